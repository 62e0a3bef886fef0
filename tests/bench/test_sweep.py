"""draftlab sweep: the grid, the exact per-entry commands, and a real sweep of draftlab serve on the toy pair."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from draftlab.bench.grid import SweepEntry, parse_grid
from draftlab.bench.result import load_result
from draftlab.bench.sweep import SUMMARY_NAME, SweepOptions, plan_sweep, run_sweep
from draftlab.cli import main
from draftlab.decode.generate import generate
from draftlab.engines.launch import group_members
from draftlab.errors import DraftlabError

TEXTS = ["def __init__(self, name", "import os\nimport sys\n\n", "    for key, value in self."]
MAX_TOKENS = 16
SPEC = (3, 1, 4)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Live direct children of ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _prompts(folder: Path) -> Path:
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps({"input_ids": list(t.encode())}) + "\n" for t in TEXTS))
    return path


FAKE_VLLM = """
import os, subprocess, sys, time
if os.environ.get("FAKE_MODE") == "exit":
    print("ValueError: no model at T", flush=True)
    sys.exit(1)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a worker, as real engines fork
time.sleep(600)  # never healthy
"""


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A `vllm` on PATH that exits with an error (FAKE_MODE=exit) or starts a worker and never gets healthy."""
    (tmp_path / "bin").mkdir()
    exe = tmp_path / "bin" / "vllm"
    exe.write_text(f"#!{sys.executable}\n" + FAKE_VLLM)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MODE", "exit")
    return tmp_path


# --- the grid --------------------------------------------------------------------------------


def test_grid_entries_and_baseline():
    grid = parse_grid(" 1,0,0,0   1,3,1,4\n4,5,4,8 ")
    assert grid == [SweepEntry(1, 0, 0, 0), SweepEntry(1, 3, 1, 4), SweepEntry(4, 5, 4, 8)]
    assert [e.is_baseline for e in grid] == [True, False, False]
    assert [e.label for e in grid] == ["baseline", "3/1/4", "5/4/8"]
    assert len({e.slug for e in grid}) == 3


@pytest.mark.parametrize("grid,needle", [
    ("", "empty"),
    ("1,3,1", "entry 1 '1,3,1' has 3 field"),
    ("1,0,0,0 2,x,1,4", "entry 2 '2,x,1,4': every field must be an integer"),
    ("0,0,0,0", "batch must be at least 1"),
    ("2,0,1,0", "steps 0 is the baseline; write 2,0,0,0"),
    ("1,3,1,5", "entry 1 '1,3,1,5': --topk 1 is a chain.*use 3/1/4"),  # SGLang would rewrite it: refused
    ("1,1,2,4", "offers only 2"),  # more draft tokens than the tree has
    ("1,-1,1,0", "positive integer"),
    ("1,3,1,4 1,3,1,4", "entry 2 '1,3,1,4' repeats"),
])
def test_grid_errors_name_the_entry(grid, needle):
    with pytest.raises(DraftlabError, match=needle):
        parse_grid(grid)


# --- the commands (dry run) ------------------------------------------------------------------


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_dry_run_sglang_every_entry_launched_with_exactly_its_flags(capsys):
    code = main(["sweep", "--engine", "sglang", "--target", "org/T", "--drafter", "org/D", "--grid",
                 "1,0,0,0 1,3,1,4 64,5,4,8", "--port", "31000", "--dry-run", "--json", "--", "--mem-fraction-static", "0.8"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0 and plan["api"] == "sglang"
    base, chain, tree = (e["argv"] for e in plan["entries"])
    assert not any(a.startswith("--speculative") for a in base)
    assert [_flag(chain, f) for f in ("--speculative-num-steps", "--speculative-eagle-topk",
                                      "--speculative-num-draft-tokens")] == ["3", "1", "4"]
    assert [_flag(tree, f) for f in ("--speculative-num-steps", "--speculative-eagle-topk",
                                     "--speculative-num-draft-tokens")] == ["5", "4", "8"]
    # one engine cap on every entry, raised to the largest batch so batch 64 does not queue in the engine
    assert {_flag(a, "--max-running-requests") for a in (base, chain, tree)} == {"64"}
    assert all("--disable-overlap-schedule" in a and a[-2:] == ["--mem-fraction-static", "0.8"]
               for a in (base, chain, tree))


def test_dry_run_vllm_chain_and_refused_tree(capsys):
    code = main(["sweep", "--engine", "vllm", "--target", "org/T", "--drafter", "org/D", "--grid",
                 "2,0,0,0 2,4,1,5", "--dry-run", "--json"])
    plan = json.loads(capsys.readouterr().out)
    base, chain = (e["argv"] for e in plan["entries"])
    assert code == 0 and plan["api"] == "openai"
    assert "--speculative-config" not in base
    assert json.loads(_flag(chain, "--speculative-config")) == {"method": "eagle3", "model": "org/D",
                                                                "num_speculative_tokens": 4}
    code = main(["sweep", "--engine", "vllm", "--target", "org/T", "--drafter", "org/D", "--grid",
                 "1,0,0,0 4,5,4,8", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "--grid entry 2 '4,5,4,8' for vllm: --topk 4" in err and "Traceback" not in err


def test_dry_run_draftlab_runs_this_package(capsys):
    code = main(["sweep", "--engine", "draftlab", "--target", "T", "--drafter", "D", "--grid", "1,3,1,4",
                 "--port", "31001", "--dry-run", "--json"])
    (entry,) = json.loads(capsys.readouterr().out)["entries"]
    assert code == 0
    assert entry["argv"][:4] == [sys.executable, "-m", "draftlab", "serve"]
    assert [_flag(entry["argv"], f) for f in ("--drafter", "--steps", "--topk", "--num-draft-tokens", "--port")] == \
        ["D", "3", "1", "4", "31001"]
    src = str(Path(__file__).parents[2] / "src")
    assert entry["env"]["PYTHONPATH"].split(os.pathsep)[0] == src


def test_speculative_entries_need_a_drafter():
    with pytest.raises(DraftlabError, match="no --drafter"):
        plan_sweep(SweepOptions("sglang", "T", None, tuple(parse_grid("1,0,0,0 1,3,1,4"))))


# --- refused before anything starts ----------------------------------------------------------


def test_port_in_use_and_missing_engine_refused_up_front(tmp_path, monkeypatch, capsys):
    prompts = _prompts(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        code = main(["sweep", "--engine", "draftlab", "--target", "T", "--grid", "1,0,0,0", "--prompts", str(prompts),
                     "--port", str(busy.getsockname()[1]), "--out", str(tmp_path / "a")])
    assert code == 2 and "in use" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))
    code = main(["sweep", "--engine", "vllm", "--target", "T", "--grid", "1,0,0,0", "--prompts", str(prompts),
                 "--port", str(_free_port()), "--out", str(tmp_path / "b")])
    assert code == 2 and "'vllm' not found on PATH" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_existing_output_folder_refused(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    code = main(["sweep", "--engine", "draftlab", "--target", "T", "--grid", "1,0,0,0", "--prompts",
                 str(_prompts(tmp_path)), "--port", str(_free_port()), "--out", str(tmp_path / "out")])
    assert code == 2 and "not an empty folder" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]


def test_engine_that_exits_is_recorded_and_all_failed_exits_2(fake_vllm, capsys):
    out = fake_vllm / "out"
    code = main(["sweep", "--engine", "vllm", "--target", "T", "--grid", "1,0,0,0 2,0,0,0", "--prompts",
                 str(_prompts(fake_vllm)), "--port", str(_free_port()), "--health-timeout", "60", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "every sweep entry failed" in err and "exited with code 1" in err
    rows = json.loads((out / SUMMARY_NAME).read_text())["rows"]
    assert len(rows) == 2  # the first failure did not stop the sweep
    for row in rows:
        assert row["result_file"] is None and "ValueError: no model at T" in row["error"]
        assert str(out / row["log_file"]) in row["error"]


# --- a real sweep ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_sweep(toy_pair, tmp_path_factory):
    """draftlab serve on the toy pair, grid 1,0,0,0 1,3,1,4 2,0,0,0 2,3,1,4; the third entry's port is
    taken while it starts (so it fails) and freed for the fourth. Records every engine pid, and the
    children this process had before (earlier tests may leave helpers such as a resource tracker)."""
    tmp = tmp_path_factory.mktemp("sweep")
    port = _free_port()
    options = SweepOptions("draftlab", str(toy_pair.target_dir), str(toy_pair.drafter_dir),
                           tuple(parse_grid("1,0,0,0 1,3,1,4 2,0,0,0 2,3,1,4")), _prompts(tmp),
                           max_tokens=MAX_TOKENS, warmup=1, port=port, health_timeout_s=120)
    engine_pids: list[int] = []
    blocker: list[socket.socket] = []
    before = set(_children(os.getpid()))

    def on_event(index: int, entry: SweepEntry, phase: str) -> None:
        if phase == "launch" and index == 3:
            sock = socket.socket()
            sock.bind(("127.0.0.1", port))
            sock.listen()
            blocker.append(sock)
        if phase == "failed" and blocker:
            blocker.pop().close()
        if phase == "bench":
            engine_pids.extend(pid for pid in _children(os.getpid()) if pid not in before)

    result = run_sweep(plan_sweep(options), tmp / "out", on_event=on_event)
    return result, engine_pids, tmp, before


def test_real_sweep_accept_lengths_equal_generate(real_sweep, toy_pair):
    result, _, tmp, _ = real_sweep
    expected = generate(toy_pair.target_dir, toy_pair.drafter_dir, tmp / "prompts.jsonl", steps=SPEC[0],
                        topk=SPEC[1], num_draft_tokens=SPEC[2], max_new_tokens=MAX_TOKENS)
    assert expected.mean_accept_length > 1.5  # the toy pair accepts for real
    spec_rows = [r for r in result.rows if r.steps]
    assert [(r.batch, r.error) for r in spec_rows] == [(1, None), (2, None)]
    for row in spec_rows:
        assert row.accept_length == pytest.approx(expected.mean_accept_length, rel=1e-12)
        assert row.completed == len(TEXTS) and row.failed == 0


def test_real_sweep_summary_speedups_and_files(real_sweep):
    result, _, _, _ = real_sweep
    out = Path(result.out_dir)
    base1, spec1, base2, spec2 = result.rows
    assert base1.accept_length is None and base1.speedup == 1.0
    assert spec1.speedup == pytest.approx(spec1.output_throughput / base1.output_throughput)
    assert "in use" in base2.error and base2.result_file is None
    assert spec2.speedup is None  # batch 2 has no baseline that ran
    assert result.complete and not result.interrupted and not result.all_failed
    summary = json.loads((out / SUMMARY_NAME).read_text())
    assert [r["config"] for r in summary["rows"]] == ["baseline", "3/1/4", "baseline", "3/1/4"]
    assert summary["rows"][1]["accept_length"] == spec1.accept_length
    for row in (base1, spec1, spec2):
        bench = load_result(out / row.result_file)  # the bench -o contract
        assert bench.config["concurrency"] == row.batch and bench.config["label"] == row.config
        assert bench.output_throughput == row.output_throughput
        assert (out / row.log_file).stat().st_size > 0
    assert (out / result.plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_real_sweep_leaves_no_process(real_sweep):
    _, engine_pids, _, before = real_sweep
    assert len(engine_pids) == 3  # one engine per entry that started
    assert all(group_members(pid) == [] for pid in engine_pids)
    assert set(_children(os.getpid())) <= before


# --- Ctrl-C ----------------------------------------------------------------------------------


def test_ctrl_c_stops_the_engine_group_and_keeps_a_summary(fake_vllm, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "never")
    out = fake_vllm / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    cli = subprocess.Popen(
        [sys.executable, "-m", "draftlab", "sweep", "--engine", "vllm", "--target", "T", "--grid", "1,0,0,0 2,0,0,0",
         "--prompts", str(_prompts(fake_vllm)), "--port", str(_free_port()), "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while not workers and time.monotonic() < deadline:  # the engine and its worker are up
            engines = _children(cli.pid)
            workers = [w for e in engines for w in _children(e)]
            time.sleep(0.05)
        assert workers, "the sweep never started the engine's worker"
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130 and "Traceback" not in err and "interrupted" in err
    assert all(group_members(pid) == [] for pid in engines)  # the engine and its worker are gone
    summary = json.loads((out / SUMMARY_NAME).read_text())
    assert summary["interrupted"] and not summary["complete"]
    assert [r["error"] for r in summary["rows"]] == ["interrupted"]  # the second entry never started


def test_running_needs_prompts(capsys):
    code = main(["sweep", "--engine", "draftlab", "--target", "T", "--grid", "1,0,0,0", "--port", str(_free_port())])
    assert code == 2 and "a sweep needs --prompts FILE" in capsys.readouterr().err
