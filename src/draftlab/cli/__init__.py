"""The ``draftlab`` command line: a thin layer that parses arguments, calls the library and renders.

Each command group lives in its own module and registers itself on :data:`app` in
:mod:`draftlab.cli.app`. User errors (:class:`~draftlab.errors.DraftlabError`) become one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys

import typer

from draftlab.errors import DraftlabError


def _click_exceptions() -> tuple[type[Exception], tuple[type[Exception], ...]]:
    """The ClickException and Abort classes that the installed typer raises.

    typer >= 0.2x ships its own copy of click (``typer._click``) and raises its exception classes, not
    those of the installed click; older typer raises click's own. Both are found from typer's public
    ``BadParameter`` (a ClickException subclass in either) and ``Abort``."""
    click_exception = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    aborts = {typer.Abort}
    try:
        import click

        aborts.add(click.exceptions.Abort)
    except ImportError:  # a typer that vendors click need not have it installed
        pass
    return click_exception, tuple(aborts)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``draftlab`` console script; returns the exit code."""
    from draftlab.cli.app import app
    from draftlab.documents import record_command

    record_command(sys.argv[1:] if argv is None else argv)
    click_exception, aborts = _click_exceptions()
    try:
        result = app(args=argv, prog_name="draftlab", standalone_mode=False)
    except DraftlabError as exc:
        print(f"draftlab: error: {exc}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as exc:  # memory that ran out where no command named its sizes
        from draftlab.cli.common import is_out_of_memory, out_of_memory_detail

        if not is_out_of_memory(exc):
            raise
        print(f"draftlab: error: out of memory ({out_of_memory_detail(exc)}); free the device (other processes "
              f"may hold it) or run smaller (see --help for the sizes)", file=sys.stderr)
        return 2
    except aborts:
        print("draftlab: interrupted", file=sys.stderr)
        return 130
    except click_exception as exc:
        exc.show()
        return exc.exit_code
    if result == 130:  # typer >= 0.2x turns Ctrl-C into an exit code of 130 instead of Abort
        print("draftlab: interrupted", file=sys.stderr)
    return result if isinstance(result, int) else 0
