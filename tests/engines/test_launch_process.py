"""Process management against fake engine binaries: health wait, failures, group cleanup."""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from draftlab.engines.launch import EngineProcess, LaunchRequest, engine_command, group_members
from draftlab.errors import DraftlabError

# A fake engine: parses --port, starts a grandchild that sleeps (as real engines fork workers),
# then, by FAKE_MODE: serves /health, never becomes healthy, or exits with an error.
FAKE_ENGINE = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port = int(sys.argv[sys.argv.index("--port") + 1])
    mode = os.environ.get("FAKE_MODE", "healthy")
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["FAKE_PIDS"], "w") as f:
        f.write(f"{os.getpid()} {worker.pid}")
    if os.environ.get("FAKE_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("fake engine starting", flush=True)
    if mode == "exit":
        print("RuntimeError: CUDA out of memory", flush=True)
        sys.exit(3)
    if mode == "never":
        time.sleep(600)
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A `vllm` executable on PATH that runs the fake engine."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "vllm"
    exe.write_text(f"#!{sys.executable}\n" + FAKE_ENGINE)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    return tmp_path


@pytest.fixture
def fake_sglang(tmp_path, monkeypatch):
    """An importable `sglang.launch_server` module that runs the fake engine."""
    pkg = tmp_path / "site" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(FAKE_ENGINE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    return tmp_path


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _pids(tmp: Path) -> list[int]:
    for _ in range(100):
        text = (tmp / "pids").read_text() if (tmp / "pids").exists() else ""
        if text.count(" ") == 1:
            return [int(x) for x in text.split()]
        time.sleep(0.05)
    raise AssertionError("fake engine never wrote its pids")


@pytest.mark.parametrize("engine,fixture", [("vllm", "fake_vllm"), ("sglang", "fake_sglang")])
def test_healthy_engine_then_whole_group_stopped(engine, fixture, request):
    tmp = request.getfixturevalue(fixture)
    cmd = engine_command(LaunchRequest(engine, "T", port=_free_port()))
    with EngineProcess(cmd, tmp / "engine.log") as proc:
        proc.start()
        proc.wait_healthy(timeout_s=30)
        pgid = proc.process.pid
        pids = _pids(tmp)
        assert all(_alive(p) for p in pids) and set(pids) <= set(group_members(pgid))
    assert not any(_alive(p) for p in pids)  # the grandchild worker too
    assert group_members(pgid) == []
    assert "fake engine starting" in (tmp / "engine.log").read_text()


def test_engine_that_exits_reports_its_last_log_line(fake_vllm, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "exit")
    cmd = engine_command(LaunchRequest("vllm", "T", port=_free_port()))
    with pytest.raises(DraftlabError, match="exited with code 3.*CUDA out of memory"):
        with EngineProcess(cmd, fake_vllm / "engine.log") as proc:
            proc.start()
            proc.wait_healthy(timeout_s=30)
    worker = _pids(fake_vllm)[1]
    assert not _alive(worker)  # the orphaned worker was stopped with the group


def test_never_healthy_times_out_and_sigkills_a_stubborn_group(fake_vllm, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "never")
    monkeypatch.setenv("FAKE_IGNORE_TERM", "1")
    cmd = engine_command(LaunchRequest("vllm", "T", port=_free_port()))
    proc = EngineProcess(cmd, fake_vllm / "engine.log", stop_grace_s=1)
    with pytest.raises(DraftlabError, match="not healthy .* after 1 s"):
        with proc:
            proc.start()
            proc.wait_healthy(timeout_s=1)
    assert not any(_alive(p) for p in _pids(fake_vllm))


def test_port_in_use_refused_before_starting(fake_vllm):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        cmd = engine_command(LaunchRequest("vllm", "T", port=busy.getsockname()[1]))
        proc = EngineProcess(cmd, fake_vllm / "engine.log")
        with pytest.raises(DraftlabError, match="in use"):
            proc.start()
    assert proc.process is None and not (fake_vllm / "pids").exists()


def test_missing_binaries(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DraftlabError, match="'vllm' not found on PATH"):
        EngineProcess(engine_command(LaunchRequest("vllm", "T", port=_free_port())), tmp_path / "l").start()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # no sglang here (nor, on this machine, anywhere)
    with pytest.raises(DraftlabError, match="SGLang is not installed"):
        EngineProcess(engine_command(LaunchRequest("sglang", "T", port=_free_port())), tmp_path / "l").start()


def test_cli_dry_run_json(capsys):
    from draftlab.cli import main

    code = main(["launch", "sglang", "--target", "T", "--drafter", "D", "--steps", "2", "--topk", "1",
                 "--num-draft-tokens", "3", "--port", "31234", "--dry-run", "--json", "--", "--mem-fraction-static", "0.8"])
    import json

    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["argv"][-2:] == ["--mem-fraction-static", "0.8"]
    assert out["spec"]["steps"] == 2 and out["spec"]["num_draft_tokens"] == 3
    assert out["base_url"] == "http://127.0.0.1:31234" and out["env"] == {}


def test_cli_ctrl_c_stops_the_engine_group(fake_vllm):
    import signal
    import subprocess

    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    cli = subprocess.Popen([sys.executable, "-m", "draftlab", "launch", "vllm", "--target", "T", "--port", str(port),
                            "--log-file", str(fake_vllm / "engine.log"), "--health-timeout", "30"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = ""
        while "ready" not in line:
            line = cli.stdout.readline()
            assert line, cli.stderr.read()
        pids = _pids(fake_vllm)
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130 and "Traceback" not in err
    assert not any(_alive(p) for p in pids)
