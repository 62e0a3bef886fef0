"""``draftlab capture``: a dataset's aux and final hidden states, into feature files that
``train --features`` and ``probe --features`` read.

Files are SpecForge's offline layout (``scripts/prepare_hidden_states.py``): row i goes to
``rows_{g}-{g + shard}/data_{i}.ckpt``, a ``torch.save`` dict of ``input_ids`` [n], ``loss_mask`` [n]
(the data's assistant mask, as ``vocab count`` finds it), ``hidden_state`` [1, n, T] (the final,
post-norm state) and ``aux_hidden_state`` [1, n, k*T] (the aux layers, low to high). Each file is
written atomically, so ``resume`` skips the files that exist and a killed run loses at most the batch
under way. Under ``torchrun`` rank r captures the rows i with i % world == r; rank 0 writes
``capture.json`` (what was captured, from what) at the end.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from draftlab.checkpoint import DrafterConfig, TargetConfig, open_checkpoint
from draftlab.distributed import barrier, close_world, init_world
from draftlab.engines import first_nameable
from draftlab.engines.deployment import Deployment
from draftlab.errors import DraftlabError
from draftlab.fsutil import atomic_path, refuse_overlap, write_json_atomic
from draftlab.train.data import pad_batch, target_tokenizer, tokenized_rows
from draftlab.train.setup import scratch_aux_layers

MANIFEST = "capture.json"


@dataclass
class CaptureResult:
    out: Path
    aux_layers: list[int]
    rows: int  # rows of the data with a trainable token (one file each)
    written: int  # files this run wrote (all ranks)
    skipped: int  # files already there (--resume)
    engine: str | None = None  # with a drafter: the engine release whose rules chose the layers
    engine_version: str | None = None
    captured_layers: list[int] | None = None  # the target layers captured (aux_layers, as every command names them)


def feature_path(out: Path, index: int, shard: int) -> Path:
    start = index // shard * shard
    return out / f"rows_{start}-{start + shard}" / f"data_{index}.ckpt"


def capture(target: str | Path, data: str | Path, out: str | Path, *, drafter: str | Path | None = None,
            aux_layers: list[int] | None = None, deployment: Deployment | None = None, seq_len: int = 2048,
            batch_size: int = 4,
            shard: int = 2000, resume: bool = False, dtype: str = "float32", device: str | None = None,
            device_map: str | None = None, progress: bool = False) -> CaptureResult:
    """Capture ``data``'s features into ``out`` (a new folder, or an unfinished one with ``resume``): the aux
    layers ``deployment`` captures for ``drafter`` (default: the newest SGLang's), or ``aux_layers``."""
    from draftlab.models.devices import resolve_placement
    from draftlab.models.target import TargetRunner

    out = Path(out)
    refuse_overlap(out, {"--target": target, "--data": data, "--drafter": drafter}, folder=True)
    if out.exists() and not resume:
        raise DraftlabError("already exists; choose a new folder, or pass --resume to finish it", path=out)
    if drafter is not None and aux_layers is not None:
        raise DraftlabError("give --drafter (capture its aux layers) or --aux-layers, not both")
    device, device_map = resolve_placement(device, device_map)
    world = init_world(device or "cpu")
    try:
        target_cfg = TargetConfig.from_dict(open_checkpoint(target).config)
        if drafter is not None:
            deployment = deployment or Deployment.resolve(
                "sglang", None, DrafterConfig.from_dict(open_checkpoint(drafter).config), target_cfg)
            layers = list(deployment.aux.layers)
        else:
            layers = scratch_aux_layers(target_cfg.num_layers, aux_layers, first=first_nameable(target_cfg))
        tokenizer, why = target_tokenizer(target)
        rows = tokenized_rows(data, tokenizer, target_cfg.vocab_size, seq_len, drop_last=False, no_tokenizer=why)
        mine = [i for i in range(len(rows)) if i % world.size == world.rank]
        todo = [i for i in mine if not feature_path(out, i, shard).is_file()]
        runner = TargetRunner.load(target, aux_layers=layers, dtype=dtype, device=device or "cpu",
                                   device_map=device_map, cache="dynamic")
        with _bar(progress and world.main, len(todo)) as advance:
            for start in range(0, len(todo), batch_size):
                chunk = todo[start:start + batch_size]
                batch = [rows[i] for i in chunk]
                ids, _, _ = pad_batch(batch, max(len(r.input_ids) for r in batch))
                step = runner.forward_batch(ids)
                for r, (i, row) in enumerate(zip(chunk, batch)):
                    n = len(row.input_ids)
                    path = feature_path(out, i, shard)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with atomic_path(path) as tmp:
                        torch.save({"input_ids": torch.tensor(row.input_ids), "loss_mask": torch.tensor(row.loss_mask),
                                    "hidden_state": step.hidden[r:r + 1, :n].cpu().clone(),
                                    "aux_hidden_state": step.aux[r:r + 1, :n].cpu().clone()}, tmp)
                advance(len(chunk))
        counts = torch.tensor([len(todo), len(mine) - len(todo)])
        if world.size > 1:
            import torch.distributed as dist

            dist.all_reduce(counts)
        barrier(world)
        if world.main:
            write_json_atomic(out / MANIFEST, {"target": str(target), "data": str(data), "aux_layers": layers,
                                               "rows": len(rows), "seq_len": seq_len, "shard": shard, "dtype": dtype,
                                               "layout": "specforge"})
        return CaptureResult(out, layers, len(rows), int(counts[0]), int(counts[1]),
                             engine=deployment and deployment.engine, engine_version=deployment and deployment.version,
                             captured_layers=layers)
    finally:
        close_world(world)


@contextmanager
def _bar(enabled: bool, total: int):
    """A rich progress bar on stderr over the files to write; yields ``advance(n)``."""
    if not enabled:
        yield lambda n: None
        return
    from rich.progress import Progress

    from draftlab.console import err_console

    with Progress(console=err_console, transient=True) as progress:
        task = progress.add_task("capture", total=total)
        yield lambda n: progress.advance(task, n)
