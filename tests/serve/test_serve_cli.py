"""`draftlab serve` as a process on a real (tiny, random) Hugging Face target folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))

from tiny_targets import tiny_target  # noqa: E402

SRC = str(Path(__file__).parents[2] / "src")


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("target")
    tiny_target("llama").save_pretrained(folder)
    return folder


def test_serve_process_generates_like_the_library_and_stops_on_ctrl_c(target_dir):
    from draftlab.decode.decoder import SpeculativeDecoder
    from draftlab.models.target import TargetRunner

    expected = [t for c in SpeculativeDecoder(TargetRunner.load(target_dir), None, None)
                .stream([5, 6, 7], max_new_tokens=8, ignore_eos=True) for t in c.tokens]
    proc = subprocess.Popen([sys.executable, "-m", "draftlab", "serve", "--target", str(target_dir), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": SRC})
    try:
        line = proc.stdout.readline()
        assert "serving" in line, proc.stderr.read()
        url = line.split(" at ")[1].split(";")[0]
        with httpx.Client(base_url=url, trust_env=False, timeout=60) as client:
            assert client.get("/health").status_code == 200
            body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
            out = client.post("/generate", json=body).json()
            assert out["output_ids"] == expected
            assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 8}
            bad = client.post("/generate", json={"input_ids": [5], "sampling_params": {"max_new_tokens": 0}})
            assert bad.status_code == 400 and "max_new_tokens" in bad.json()["error"]["message"]
            info = client.get("/get_server_info").json()
            assert info["speculative_algorithm"] is None
            assert "vllm:spec_decode_num_drafts" not in client.get("/metrics").text
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_out_of_range_is_one_line_and_exit_2(target_dir, port):
    out = subprocess.run([sys.executable, "-m", "draftlab", "serve", "--target", str(target_dir), "--port", port],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": SRC})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "Invalid value for '--port'" in out.stderr and "Usage:" in out.stderr


def test_a_port_the_os_refuses_is_one_line(target_dir):
    """The library refuses too (a caller that skips the CLI's range check): one DraftlabError, no traceback."""
    from draftlab.errors import DraftlabError
    from draftlab.serve.http import make_server

    with pytest.raises(DraftlabError, match="ports are 0..65535"):
        make_server(None, "127.0.0.1", 99999)
