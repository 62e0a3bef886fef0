"""``bench --timeout`` bounds the whole run, server probes included, against a server that accepts
connections and never answers; ``duration_s`` is the measured run's wall time; Ctrl-C still writes the
partial result."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from draftlab.cli import main

SRC = str(Path(__file__).parents[2] / "src")


@pytest.fixture
def silent_url():
    """A server that accepts every connection and never answers; yields its URL and the accepted sockets."""
    accepted: list[socket.socket] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    listener.close()
    for conn in accepted:
        conn.close()


def test_timeout_bounds_the_whole_run_and_duration_is_its_wall_time(silent_url, tmp_path, capsys):
    url, _ = silent_url
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x"}\n')
    out = tmp_path / "r.json"
    started = time.monotonic()
    code = main(["bench", "--base-url", url, "--api", "openai", "--model", "m", "--prompts", str(prompts),
                 "--num-prompts", "1", "--warmup", "0", "--timeout", "2", "-o", str(out), "--json"])
    took = time.monotonic() - started
    assert code == 1  # no request completed
    doc = json.loads(out.read_text())
    assert doc["config"]["timed_out"] is True and doc["failed"] == 1
    assert [e["kind"] for e in doc["errors"]] == ["timeout"]
    assert 1.0 < doc["duration_s"] <= took  # the request waited out the run, not 0.001 s
    assert took < 15  # generous: the server probes no longer wait 10 s each before and after (43 s)


def test_ctrl_c_writes_the_partial_result_at_once(silent_url, tmp_path):
    url, accepted = silent_url
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x"}\n')
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "draftlab", "bench", "--base-url", url, "--api", "openai", "--model", "m",
         "--prompts", str(prompts), "--num-prompts", "3", "--warmup", "0", "--timeout", "30", "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": SRC})
    try:
        waited = time.monotonic()
        while len(accepted) < 3 and time.monotonic() - waited < 30:  # two probes, then the first request
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=30)
        ended = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    doc = json.loads(out.read_text())
    assert doc["config"]["interrupted"] is True and doc["completed"] == 0 and doc["failed"] == 3
    assert ended < 5  # generous: it does not ask the silent server for metrics again (20 s)
