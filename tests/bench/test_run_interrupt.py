"""Ctrl-C (task cancellation) during the warm-up ends a bench run: nothing is measured after it."""

from __future__ import annotations

import asyncio
import socket
import threading

from draftlab.bench.client import BenchConfig
from draftlab.bench.run import bench_async
from draftlab.bench.workload import Prompt


def test_cancel_during_warmup_returns_an_interrupted_empty_run():
    accepted: list[socket.socket] = []
    with socket.socket() as listener:  # accepts connections and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
        config = BenchConfig(base_url=f"http://127.0.0.1:{listener.getsockname()[1]}", api="sglang",
                             num_prompts=3, warmup=1, timeout_s=5)

        async def interrupted_run():
            task = asyncio.create_task(bench_async(config, [Prompt(input_ids=[1, 2, 3])]))
            while not accepted:  # the warm-up request is in flight
                await asyncio.sleep(0.01)
            task.cancel()
            return await task

        result = asyncio.run(interrupted_run())
    for conn in accepted:
        conn.close()
    assert result.config["interrupted"] is True
    assert result.completed == 0 and result.failed == 3
    assert result.errors == [{"kind": "interrupted", "count": 3, "example": "run stopped before these finished"}]
