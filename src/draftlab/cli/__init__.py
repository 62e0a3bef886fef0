"""The ``draftlab`` command line: a thin layer that parses arguments, calls the library and renders.

Each command group lives in its own module and registers itself on :data:`app` in
:mod:`draftlab.cli.app`. User errors (:class:`~draftlab.errors.DraftlabError`) become one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys

import click

from draftlab.errors import DraftlabError


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``draftlab`` console script; returns the exit code."""
    from draftlab.cli.app import app

    try:
        result = app(args=argv, prog_name="draftlab", standalone_mode=False)
    except DraftlabError as exc:
        print(f"draftlab: error: {exc}", file=sys.stderr)
        return 2
    except click.exceptions.Abort:
        print("draftlab: interrupted", file=sys.stderr)
        return 130
    except click.exceptions.ClickException as exc:
        exc.show()
        return exc.exit_code
    return result if isinstance(result, int) else 0
