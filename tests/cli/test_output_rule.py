"""The one output rule: every CLI option that names an output refuses each input its command reads (by
path, through links, by hard link), a FIFO and a device node, in one line, with every input's bytes
unchanged. The option list is read from the typer app, so a new output option without a case fails here."""

from __future__ import annotations

import os
import stat
import typing
from pathlib import Path

import pytest
from output_cases import CASES, INPUTS, OUTPUTS, attacks, build_workspace, refused_by_rule, snapshot

from draftlab.cli import main

ROOT = os.geteuid() == 0


def _is_path(param) -> bool:
    """A Path (or Optional/list of Path) parameter: typer >= 0.2x keeps the annotation, older typer a click.Path."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is not None:
        return Path in (annotation, *typing.get_args(annotation))
    return type(param.type).__name__ == "Path"


def path_options() -> set[str]:
    """Every option and argument of type Path in the app, as "COMMAND --longest-name" or "COMMAND argname"."""
    import typer.main

    from draftlab.cli.app import app

    found: set[str] = set()

    def walk(command, prefix: str) -> None:
        for param in command.params:
            if _is_path(param):
                name = max(param.opts, key=len) if param.param_type_name == "option" else param.name
                found.add(f"{prefix} {name}")
        for sub_name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{prefix} {sub_name}".strip())

    walk(typer.main.get_command(app), "")
    return found


def test_every_path_option_is_an_input_or_an_output_and_every_output_has_a_case():
    options = path_options()
    assert options - (OUTPUTS | INPUTS) == set(), "classify the new option in tests/output_cases.py"
    assert (OUTPUTS | INPUTS) - options == set(), "an option in tests/output_cases.py no longer exists"
    assert {case.option for case in CASES} == OUTPUTS


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp("outputs") / "ws")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.option} {c.note}".strip())
def test_each_output_refuses_its_inputs_a_fifo_and_a_device(workspace, case, capsys):
    tries = list(attacks(workspace, case, device=ROOT))
    before = snapshot(workspace.root)
    for what, out in tries:
        code = main(case.command(workspace, out))
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and refused_by_rule(lines[0], out), (what, code, captured.err)
        assert snapshot(workspace.root) == before, what


def test_outputs_of_one_command_may_not_name_each_other(tmp_path, capsys):
    args = ["plan", "--target", str(tmp_path / "t"), "--drafter", str(tmp_path / "d"), "--prompts", str(tmp_path / "p")]
    assert main(args + ["--save-costs", str(tmp_path / "x"), "--plot", str(tmp_path / "x")]) == 2
    assert "is --save-costs itself" in capsys.readouterr().err


@pytest.mark.skipif(not ROOT, reason="os.mknod of a character device needs root")
def test_the_atomic_writers_never_replace_a_device_node(tmp_path):
    """The rename that protects regular files would replace a device with a file: refused in fsutil itself."""
    from draftlab.errors import DraftlabError
    from draftlab.fsutil import atomic_dir, write_text_atomic

    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    with pytest.raises(DraftlabError, match="is a character device, not a regular file"):
        write_text_atomic(null, "<html>")
    with pytest.raises(DraftlabError, match="is a character device, not a folder"):
        with atomic_dir(null, overwrite=True):
            pass
    assert stat.S_ISCHR(os.lstat(null).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["null"]
