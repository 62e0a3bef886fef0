"""``draftlab regenerate``: the target's own responses for a dataset's prompts (SpecForge's
regeneration step: a drafter trained on what its target actually says accepts more).

Each conversation row (``messages`` or ``conversations``, as ``vocab count`` reads them) keeps its
messages up to its last assistant turn, and that turn is replaced by the target's response (a row
ending on a user turn gets one appended). Responses come from the target run here (batched greedy,
or sampled at ``temperature`` > 0, cut at EOS) or from any OpenAI-compatible server (``base_url``:
SGLang, vLLM, ``draftlab serve``), ``concurrency`` requests in flight as ``bench`` sends them.

Finished rows are appended to a hidden ``.OUT.partial`` file beside OUT as they complete, so
``resume`` generates only the missing ones; OUT (one JSONL, rows in input order) is written
atomically at the end. Under ``torchrun`` rank r takes rows i with i % world == r and rank 0 merges.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftlab.distributed import World, barrier, close_world, init_world
from draftlab.errors import DraftlabError
from draftlab.fsutil import refuse_overlap, write_text_atomic
from draftlab.readable import regular_file
from draftlab.vocab.rows import BadRow, parse_row


@dataclass
class RegenerateResult:
    out: Path
    rows: int
    generated: int  # responses produced by this run (all ranks)
    resumed: int  # rows already done in the partial file
    source: str  # "runtime" or the server's base URL


def conversation_prompts(data: str | Path) -> list[list[dict[str, str]]]:
    """Each row's messages before its last assistant turn; every row must be a conversation."""
    path = Path(data)
    regular_file(path, "data file not found")
    prompts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = parse_row(line.lstrip("\ufeff"))
        except BadRow as exc:
            raise DraftlabError(f"line {number}: {exc}", path=path) from None
        if row.messages is None:
            raise DraftlabError(f"line {number}: regenerate needs conversation rows (messages or conversations), "
                                f"not {row.kind}", path=path)
        last = max((i for i, m in enumerate(row.messages) if m["role"] == "assistant"), default=len(row.messages))
        if last == 0:
            raise DraftlabError(f"line {number}: the conversation has no prompt before its assistant turn", path=path)
        prompts.append(row.messages[:last])
    if not prompts:
        raise DraftlabError("has no rows", path=path)
    return prompts


def regenerate(data: str | Path, out: str | Path, *, target: str | Path | None = None, base_url: str | None = None,
               model: str | None = None, concurrency: int = 8, max_new_tokens: int = 512, temperature: float = 0.0,
               seed: int = 0, batch_size: int = 8, resume: bool = False, dtype: str = "float32",
               device: str | None = None, device_map: str | None = None, timeout_s: float = 600.0
               ) -> RegenerateResult:
    """Write ``out`` with every prompt of ``data`` answered by the target (see the module docstring)."""
    if (target is None) == (base_url is None):
        raise DraftlabError("give --target (run the target here) or --base-url (an OpenAI-compatible server)")
    out = Path(out)
    refuse_overlap(out, {"--data": data, "--target": target})
    if out.exists():
        raise DraftlabError("already exists; choose a new output file", path=out)
    prompts = conversation_prompts(data)
    world = init_world(device or "cpu")
    try:
        partial = out.parent / f".{out.name}.partial{world.rank}"
        if partial.exists() and not resume:
            raise DraftlabError(f"an unfinished regeneration is in {partial.name}; pass --resume to finish it",
                                path=out.parent)
        done = _read_partial(partial)
        if partial.exists():  # drop a line a kill cut short, so appended rows start on a line of their own
            write_text_atomic(partial, "".join(json.dumps({"index": i, "row": r}) + "\n" for i, r in done.items()))
        todo = [i for i in range(len(prompts)) if i % world.size == world.rank and i not in done]
        out.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("a", encoding="utf-8") as sink:
            def record(i: int, text: str) -> None:
                row = {"messages": prompts[i] + [{"role": "assistant", "content": text}]}
                sink.write(json.dumps({"index": i, "row": row}) + "\n")
                sink.flush()

            if base_url is not None:
                asyncio.run(_from_server(base_url, model, [(i, prompts[i]) for i in todo], record,
                                         concurrency=concurrency, max_tokens=max_new_tokens, temperature=temperature,
                                         timeout_s=timeout_s))
            else:
                _from_runtime(target, [(i, prompts[i]) for i in todo], record, max_new_tokens=max_new_tokens,
                              temperature=temperature, seed=seed, batch_size=batch_size, dtype=dtype,
                              device=device, device_map=device_map)
        generated = _world_sum(world, len(todo))
        barrier(world)
        if world.main:
            _merge(out, len(prompts), world)
        barrier(world)
        return RegenerateResult(out, len(prompts), generated, _world_sum(world, len(done)),
                                base_url or "runtime")
    finally:
        close_world(world)


def _read_partial(path: Path) -> dict[int, dict[str, Any]]:
    """Rows already finished; a last line cut by a kill is ignored (it is regenerated)."""
    done: dict[int, dict[str, Any]] = {}
    if not path.is_file():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        done[int(entry["index"])] = entry["row"]
    return done


def _merge(out: Path, rows: int, world: World) -> None:
    merged: dict[int, dict[str, Any]] = {}
    partials = [out.parent / f".{out.name}.partial{r}" for r in range(world.size)]
    for path in partials:
        merged.update(_read_partial(path))
    missing = [i for i in range(rows) if i not in merged]
    if missing:
        raise DraftlabError(f"{len(missing)} of {rows} rows have no response (first: row {missing[0] + 1}); "
                            "rerun with --resume to retry them", path=out)
    write_text_atomic(out, "".join(json.dumps(merged[i]) + "\n" for i in range(rows)))
    for path in partials:
        path.unlink(missing_ok=True)


def _world_sum(world: World, value: int) -> int:
    if world.size == 1:
        return value
    import torch
    import torch.distributed as dist

    t = torch.tensor([value])
    dist.all_reduce(t)
    return int(t)


def _from_runtime(target, items, record, *, max_new_tokens, temperature, seed, batch_size, dtype, device,
                  device_map) -> None:
    """Batched decoding on the target here; each response cut at the target's first EOS."""
    from draftlab.models.devices import resolve_placement
    from draftlab.models.target import TargetRunner
    from draftlab.probe.continuations import target_continuations
    from draftlab.vocab.tokenizer import load_tokenizer

    device, device_map = resolve_placement(device, device_map)
    tokenizer = load_tokenizer(target)
    runner = TargetRunner.load(target, aux_layers=[], dtype=dtype, device=device or "cpu", device_map=device_map,
                               cache="dynamic")  # responses only: no layer is captured
    for start in range(0, len(items), batch_size):
        chunk = items[start:start + batch_size]
        ids = [list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                  return_dict=True)["input_ids"]) for _, messages in chunk]
        continuations = target_continuations(runner, ids, max_new_tokens, batch_size=len(chunk),
                                             temperature=temperature, seed=seed + start)
        for (i, _), tokens in zip(chunk, continuations):
            stop = next((k for k, t in enumerate(tokens) if t in runner.eos_token_ids), len(tokens))
            record(i, tokenizer.decode(tokens[:stop], skip_special_tokens=True))


async def _from_server(base_url: str, model: str | None, items, record, *, concurrency: int, max_tokens: int,
                       temperature: float, timeout_s: float) -> None:
    """Chat completions from an OpenAI-compatible server, ``concurrency`` at a time; rows that fail are
    left for --resume (the first failure is reported once all requests have ended)."""
    import httpx

    from draftlab.bench.workload import API_PATHS, Prompt, request_body

    failures: list[str] = []
    gate = asyncio.Semaphore(max(1, concurrency))
    async with httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout_s) as client:
        if model is None:
            try:
                listed = (await client.get("/v1/models")).json()
                model = listed["data"][0]["id"]
            except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
                raise DraftlabError(f"{base_url}: cannot read /v1/models ({exc}); pass --model") from None

        async def one(i: int, messages: list[dict[str, str]]) -> None:
            body = request_body("openai-chat", Prompt(messages=messages), model=model, max_tokens=max_tokens,
                                temperature=temperature, ignore_eos=False)
            body["stream"] = False
            body.pop("stream_options", None)
            async with gate:
                try:
                    response = await client.post(API_PATHS["openai-chat"], json=body)
                    response.raise_for_status()
                    text = response.json()["choices"][0]["message"]["content"]
                except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                    failures.append(f"row {i + 1}: {type(exc).__name__}: {exc}")
                    return
            record(i, text or "")

        await asyncio.gather(*(one(i, m) for i, m in items))
    if failures:
        raise DraftlabError(f"{len(failures)} request(s) to {base_url} failed (first: {failures[0][:200]}); the "
                            "finished rows are kept: rerun with --resume to retry the rest")
