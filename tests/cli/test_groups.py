"""Option groups (cli/groups.py): a group's options appear in --help where the command names the group, a
member the command declares itself keeps its own place and help, and the command gets one built object."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.testing import CliRunner

from draftlab.cli.groups import OptionGroup, grouped, option

PAIR = OptionGroup((option("alpha", Annotated[int, typer.Option("--alpha", help="A.")], 1),
                    option("beta", Annotated[int, typer.Option("--beta", help="B.")], 2)),
                   lambda alpha, beta: {"sum": alpha + beta})


def _app(seen: list[Any]) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @grouped
    def run(first: Annotated[str, typer.Option("--first")] = "x", both: dict[str, int] = PAIR,
            last: Annotated[bool, typer.Option("--last")] = False,
            beta: Annotated[int, typer.Option("--beta", help="Declared here.")] = 5) -> None:
        seen.append((first, both, last, beta))

    @app.command()
    def other() -> None:  # two commands: typer keeps the command names
        pass

    return app


def test_the_group_is_spelled_out_in_place_and_built_into_one_object():
    seen: list[Any] = []
    app = _app(seen)
    command = typer.main.get_command(app).commands["run"]
    assert [p.name for p in command.params] == ["first", "alpha", "last", "beta"]
    assert next(p for p in command.params if p.name == "beta").help == "Declared here."
    result = CliRunner().invoke(app, ["run", "--alpha", "10"])
    assert result.exit_code == 0, result.output
    assert seen == [("x", {"sum": 15}, False, 5)]  # the declared member's default, read by the group too
    CliRunner().invoke(app, ["run", "--beta", "7"])
    assert seen[-1] == ("x", {"sum": 8}, False, 7)
