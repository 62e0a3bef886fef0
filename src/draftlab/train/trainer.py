"""``draftlab train``: fine-tune an EAGLE-3 drafter, or train one from scratch, with SpecForge's TTT loss.

One optimizer step takes the next ``batch_size`` rows of the data order, pads them to the longest of
them, and splits them into ``grad_accum`` x world-size equal micro-batches (rank r takes every
world-th one); each micro-batch's loss (SpecForge's mean over rows x positions) is scaled by
1 / grad_accum and DDP averages over ranks, so the gradient is the one a single process computes on
the whole batch. AdamW (betas 0.9/0.95, no weight decay), linear warm-up then cosine decay to 0,
gradient clipping at 0.5 (SpecForge's defaults); bf16 autocast on CUDA over float32 master weights.

OUT is a drafter folder from the first checkpoint on (:mod:`.checkpoints`); checkpoints are written
every ``save_every`` steps, at the end and on Ctrl-C (the step under way finishes first), and
``resume`` continues from the last one exactly: same weights, optimizer, schedule and data order.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from torch import nn

from draftlab.checkpoint import DrafterConfig, TargetConfig, open_checkpoint
from draftlab.checkpoint.variants import NEW_DRAFTER_FLAGS
from draftlab.distributed import World, all_sum, barrier, close_world, init_world
from draftlab.engines import first_nameable, intended_aux_layers
from draftlab.engines.deployment import Deployment
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.errors import DraftlabError
from draftlab.fsutil import refuse_overlap
from draftlab.models.devices import parse_device, resolve_placement
from draftlab.models.drafter import Eagle3Drafter, refuse_unsupported
from draftlab.models.kernels import compile_failed, compiler_message, kernel_unavailable
from draftlab.train import checkpoints
from draftlab.train.data import (
    DataOrder,
    TrainRow,
    feature_rows,
    pad_batch,
    pad_features,
    target_tokenizer,
    tokenized_rows,
)
from draftlab.train.setup import (
    StartingDrafter,
    from_scratch,
    master_weights,
    scratch_aux_layers,
    setup_notes,
    warm_start,
)
from draftlab.train.ttt import TTTKernels, make_batch, ttt_loss
from draftlab.vocab.counts import TokenCounts

LOG_FILE, PLOT_FILE = "train_log.jsonl", "train.png"
ACCURACY_WINDOW = 10  # final accuracy_by_step: over the last this-many optimizer steps


@dataclass
class TrainOptions:
    target: Path
    out: Path
    data: Path | None = None
    init: Path | None = None
    features: Path | None = None
    remap: Path | None = None
    max_steps: int | None = None
    epochs: float | None = None
    batch_size: int = 8
    grad_accum: int = 1
    seq_len: int = 2048
    lr: float = 1e-4
    warmup: int = 0
    max_grad_norm: float = 0.5
    ttt_length: int = 7
    draft_vocab_size: int | None = None  # from scratch; None: 32000, or the target's vocabulary when smaller
    aux_layers: list[int] | None = None
    deployment: Deployment | None = None  # with --init: the engine release whose captured layers it fuses
    variant: str | None = None  # from scratch: "eagle3" (default) or "eagle3.1"; a warm start keeps --init's
    sliding_window: int | None = None  # from scratch: every layer attends to the last W positions; --init's kept
    eval_prompts: Path | None = None
    eval_every: int = 0
    eval_max_new_tokens: int = 64
    save_every: int = 0
    steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    resume: bool = False
    seed: int = 0
    dtype: str = "float32"
    device: str | None = None
    device_map: str | None = None
    progress: bool = False
    compile: bool | None = None  # the TTT layer and the target's pass through torch.compile; None: on CUDA only


@dataclass
class TrainResult:
    out: Path
    init: str | None
    vocab: str  # "kept", "built" or "remapped"
    steps: int  # optimizer steps run (in total, resumed runs included)
    tokens: int  # tokens through the drafter (rows x their lengths), all steps
    tokens_per_second: float  # of this process's run
    final_loss: float | None
    accuracy_by_step: list[float]  # teacher-forced top-1 per TTT step, last steps' batches
    eval: list[dict[str, Any]] = field(default_factory=list)  # {"step", "accept_length", ...}
    interrupted: bool = False
    aux_layers: list[int] = field(default_factory=list)  # canonical target layers the drafter fuses
    draft_vocab_size: int | None = None
    notes: list[str] = field(default_factory=list)  # choices made for the user (aux layers, vocabulary size)
    engine: str | None = None  # with --init: the engine release whose captured layers it fuses
    engine_version: str | None = None
    captured_layers: list[int] = field(default_factory=list)  # the target layers fed (aux_layers)


StepHook = Callable[[int], bool]  # called after each optimizer step; True asks the run to stop (tests)


def _fallback(kernels: TTTKernels, exc: BaseException) -> tuple[TTTKernels, str] | None:
    """The kernels to rerun a step on when ``exc`` says this machine cannot run the current ones, and
    why; None for any other error. flex tiles that do not fit the GPU give way to the exact blocked
    kernel (still compiled); a torch.compile that cannot build at all (no Triton or C compiler) to the
    blocked kernel uncompiled. Either computes the same loss."""
    if kernels.attention == "flex" and kernel_unavailable(exc):
        why = f"flex attention's kernels do not fit this GPU for these shapes ({_first_line(exc)})"
        return TTTKernels("blocked", kernels.compile), f"{why}; trained on the exact blocked kernel instead"
    if kernels.compile and compile_failed(exc):
        why = f"torch.compile cannot build the TTT layer or the target's pass here ({compiler_message(exc)})"
        return TTTKernels("blocked", False), f"{why}; trained uncompiled on the exact blocked kernel instead"
    return None


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if "out of resource" in ln or "triton configs" in ln]
    return (lines[0] if lines else str(exc).splitlines()[0] if str(exc) else type(exc).__name__)[:200]


class _TTTModule(nn.Module):
    """The drafter and its TTT loss as one module, so DDP sees the forward it syncs gradients for."""

    def __init__(self, drafter: Eagle3Drafter, length: int, kernels: TTTKernels) -> None:
        super().__init__()
        self.drafter, self.length, self.kernels = drafter, length, kernels

    def forward(self, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        r = ttt_loss(self.drafter, batch, self.length, kernels=self.kernels)
        return r.loss, torch.stack(r.step_losses).detach(), torch.stack(r.step_correct), torch.stack(r.step_counted)


def train(opts: TrainOptions, *, on_step: StepHook | None = None) -> TrainResult:
    """Run (or resume) training into ``opts.out``; see the module docstring. A new OUT that fails before
    its first checkpoint is removed: a rerun is not refused as "already exists"."""
    world = init_world(opts.device or "cpu")
    try:
        run = _Run(opts, world)  # every input checked, OUT not yet created
        with _removed_unless_checkpointed(Path(opts.out), new=not opts.resume and world.main):
            return run.run(on_step)
    finally:
        close_world(world)


@contextmanager
def _removed_unless_checkpointed(out: Path, *, new: bool):
    """Remove ``out`` (made by this run when ``new``) if the block fails before a checkpoint is in it."""
    try:
        yield
    except BaseException:
        if new and out.is_dir() and not (out / checkpoints.STATE_FILE).exists():
            shutil.rmtree(out, ignore_errors=True)
        raise


class _Run:
    def __init__(self, opts: TrainOptions, world: World) -> None:
        _check_options(opts, world)
        self.opts, self.world = opts, world
        device, self.device_map = resolve_placement(opts.device, opts.device_map)
        if self.device_map is not None and (opts.features is not None or world.size > 1):
            raise DraftlabError("--device-map splits a live target in one process; not with --features or torchrun")
        self.device = parse_device(device or "cpu")  # with a device map: the target's first device, below
        if world.size > 1 and self.device.type == "cuda":
            self.device = torch.device("cuda", world.local_rank)
        self.out = Path(opts.out)
        refuse_overlap(self.out, {"--target": opts.target, "--data": opts.data, "--init": opts.init,
                                  "--features": opts.features, "--remap": opts.remap,
                                  "--eval-prompts": opts.eval_prompts}, folder=True)
        self.state = checkpoints.load_state(self.out) if opts.resume else None
        if not opts.resume and self.out.exists():
            raise DraftlabError("already exists; choose a new output folder, or pass --resume to continue it",
                                path=self.out)
        barrier(world)  # every rank has looked before rank 0 creates OUT
        self.target_cfg = TargetConfig.from_dict(open_checkpoint(opts.target).config)
        if opts.eval_prompts is not None:  # cheap checks first: nothing has loaded yet
            from draftlab.probe.probe import check_room

            exact_spec_flags(opts.steps, opts.topk, opts.num_draft_tokens, architecture=self.target_cfg.architecture)
            check_room(opts.eval_prompts, opts.target, self.target_cfg)
        aux = self.state["aux_layers"] if self.state else self._aux_layers()
        self.runner, self.heads = self._target(aux)
        if self.device_map is not None:  # the drafter sits with the split target's input embedding
            self.device = self.runner.device
        self.rows = self._rows(aux)
        self.start = self._drafter(aux)
        self.drafter = self.start.drafter.place(torch.float32, self.device, keep_embedding=True)
        self.t2d = self.start.t2d.to(self.device)
        # the eval prompts and flags are inputs too: checked (and their continuations made) before OUT exists
        self.evaluate = self._evaluator() if opts.eval_prompts is not None and world.main else None
        self.kernel_note: str | None = None  # set when a step had to rerun on other kernels (_fallback)

    # --- set-up ---

    def _aux_layers(self) -> list[int]:
        if self.opts.deployment is not None:
            return list(self.opts.deployment.aux.layers)
        if self.opts.init is not None:
            cfg = DrafterConfig.from_dict(open_checkpoint(self.opts.init).config)
            return intended_aux_layers(cfg, self.target_cfg.num_layers, target=self.target_cfg).layers
        return scratch_aux_layers(self.target_cfg.num_layers, self.opts.aux_layers,
                                  first=first_nameable(self.target_cfg))

    def _target(self, aux: list[int]):
        """The live target (online features, eval), or only its embedding and lm_head (--features)."""
        from draftlab.models.target import TargetRunner
        from draftlab.probe.heads import TargetHeads

        o = self.opts
        if o.features is None or o.eval_prompts is not None:
            runner = TargetRunner.load(o.target, aux_layers=aux, dtype=o.dtype, device=str(self.device),
                                       device_map=self.device_map, cache="dynamic")
            runner.embed_tokens.weight.requires_grad_(False)
            return runner, runner
        return None, TargetHeads(o.target, dtype=o.dtype, device=str(self.device))

    def _rows(self, aux: list[int]) -> list[TrainRow]:
        o = self.opts
        if o.features is not None:
            return feature_rows(o.features, hidden_size=self.target_cfg.hidden_size, num_aux=len(aux),
                                seq_len=o.seq_len)
        tokenizer, why = target_tokenizer(o.target)
        return tokenized_rows(o.data, tokenizer, self.target_cfg.vocab_size, o.seq_len, no_tokenizer=why)

    def _drafter(self, aux: list[int]) -> StartingDrafter:
        o = self.opts
        if self.state is not None:
            config = self.state["config"]
            cfg = DrafterConfig.from_dict(config)
            shared = "embed_tokens.weight" not in self.state["weights"]
            drafter = Eagle3Drafter(cfg, embed_tokens=self.heads.embed_tokens if shared else None)
            drafter.load_state_dict({**drafter.state_dict(), **self.state["weights"]})
            return StartingDrafter(master_weights(drafter), self.state["t2d"], config, aux, self.state["vocab"])
        if o.init is not None:
            staging = self.out.parent / f".{self.out.name}.staging{self.world.rank}"
            try:
                return warm_start(o.init, o.target, self.heads, remap=o.remap, staging=staging, aux_layers=aux)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return from_scratch(o.target, self.heads.embed_tokens, self._counts(), o.draft_vocab_size, o.aux_layers,
                            o.seed, o.variant or "eagle3", o.sliding_window)

    def _counts(self) -> TokenCounts:
        """``vocab count``'s counts of --data; of the feature files' loss-mask tokens with --features."""
        if self.opts.data is not None:
            from draftlab.vocab.count import count_tokens

            return count_tokens([self.opts.data], self.opts.target, workers=1)
        counts = np.zeros(self.target_cfg.vocab_size, dtype=np.int64)
        for row in self.rows:
            ids = np.asarray(row.input_ids)[np.asarray(row.loss_mask, dtype=bool)]
            counts += np.bincount(ids, minlength=self.target_cfg.vocab_size)
        return TokenCounts.from_dense(counts)

    # --- the loop ---

    def run(self, on_step: StepHook | None) -> TrainResult:
        o, world = self.opts, self.world
        total = self._total_steps()
        params = [p for p in self.drafter.parameters() if p.requires_grad]
        kernels = TTTKernels.for_device(self.device, self.drafter.midlayer.self_attn.head_dim, o.compile)
        module: nn.Module = _TTTModule(self.drafter, o.ttt_length, kernels)
        if world.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            module = DistributedDataParallel(module, device_ids=ids, broadcast_buffers=False)
        optimizer = make_optimizer(params, o.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine(o.warmup, total))
        order = DataOrder(o.seed)
        step, tokens, log = 0, 0, []
        if self.state is not None:
            optimizer.load_state_dict(self.state["optimizer"])
            scheduler.load_state_dict(self.state["scheduler"])
            order = DataOrder(**self.state["data_order"])
            step, tokens, log = self.state["step"], self.state["tokens"], self.state["log"]
            checkpoints.set_rng_state(self.state["rng"])
            if world.main:
                _rewrite_log(self.out, log)
        elif world.main:
            self.out.mkdir(parents=True)
        barrier(world)
        evaluate = self.evaluate
        run_tokens, started = 0, time.perf_counter()
        interrupted = False
        with _stop_on_sigint() as stop, _progress(o.progress and world.main, total, step) as bar:
            while step < total:
                picked = order.next_rows(len(self.rows), o.batch_size)
                try:
                    metrics, batch_tokens = self._step(module, optimizer, params, picked)
                except Exception as exc:  # noqa: BLE001 (only kernels this machine cannot run are kept)
                    metrics, batch_tokens, kernels = self._rerun_step(module, optimizer, params, picked, kernels, exc)
                scheduler.step()
                step += 1
                tokens += batch_tokens
                run_tokens += batch_tokens
                rate = run_tokens / max(time.perf_counter() - started, 1e-9)
                entry = {"step": step, "loss": metrics["loss"], "accuracy_by_step": metrics["accuracy_by_step"],
                         "step_losses": metrics["step_losses"], "correct": metrics["correct"],
                         "counted": metrics["counted"], "lr": scheduler.get_last_lr()[0], "tokens": tokens,
                         "tokens_per_second": rate}
                if evaluate is not None and o.eval_every and step % o.eval_every == 0:
                    entry["eval"] = evaluate(self.drafter)
                log.append(entry)
                if world.main:
                    _append_log(self.out, entry)
                bar(step, entry)
                hook_stop = on_step(step) if on_step is not None else False
                if stop() or hook_stop:
                    interrupted = step < total
                    break
                if o.save_every and step % o.save_every == 0 and step < total:
                    self._checkpoint(step, tokens, log, optimizer, scheduler, order)
        rate = run_tokens / max(time.perf_counter() - started, 1e-9)  # training only: not the final save
        if evaluate is not None and not interrupted and log and "eval" not in log[-1]:
            log[-1]["eval"] = evaluate(self.drafter)
        self._checkpoint(step, tokens, log, optimizer, scheduler, order)
        if world.main and log:
            from draftlab.train.plot import plot_training

            plot_training(log, self.out / PLOT_FILE)
        return self._result(step, tokens, rate, log, interrupted)

    def _rerun_step(self, module: nn.Module, optimizer: torch.optim.Optimizer, params: list[torch.Tensor],
                    picked: list[int], kernels: TTTKernels, exc: Exception) -> tuple[dict[str, Any], int, TTTKernels]:
        """After a step failed with ``exc``: when :func:`_fallback` has kernels this machine can run, the
        step again from its start on them (``_step`` zeroes the gradients first), said on stderr and in
        the result's notes; else ``exc`` itself. A fallback that fails the same way falls back again."""
        while True:
            found = _fallback(kernels, exc)
            if found is None:
                raise exc
            kernels, self.kernel_note = found
            getattr(module, "module", module).kernels = kernels  # inside DDP or not
            Console(stderr=True).print(f"[yellow]{self.kernel_note}[/yellow]", highlight=False)
            try:
                return (*self._step(module, optimizer, params, picked), kernels)
            except Exception as again:  # noqa: BLE001 (judged by _fallback on the next turn)
                exc = again

    def _step(self, module: nn.Module, optimizer: torch.optim.Optimizer, params: list[torch.Tensor],
              picked: list[int]) -> tuple[dict[str, Any], int]:
        """One optimizer step over the global batch ``picked``; metrics summed over every rank."""
        o, world = self.opts, self.world
        rows = [self.rows[i] for i in picked]
        width = max(len(r.input_ids) for r in rows)
        parts = o.grad_accum * world.size
        size = len(rows) // parts
        sums = torch.zeros(3, o.ttt_length, dtype=torch.float64, device=self.device)  # read back once, below
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        optimizer.zero_grad(set_to_none=True)
        for a in range(o.grad_accum):
            chunk = rows[(a * world.size + world.rank) * size:][:size]
            batch = self._batch(chunk, width, getattr(module, "module", module).kernels.compile)
            sync = nullcontext() if a == o.grad_accum - 1 or world.size == 1 else module.no_sync()
            with sync:
                with self._autocast():
                    loss, step_losses, correct, counted = module(batch)
                (loss / o.grad_accum).backward()
            loss_sum += loss.detach().double()
            sums += torch.stack([step_losses.double(), correct.double(), counted.double()]).to(self.device)
        torch.nn.utils.clip_grad_norm_(params, o.max_grad_norm)
        optimizer.step()
        sums = all_sum(self.world, sums).cpu()
        loss_sum = all_sum(self.world, loss_sum).cpu()
        step_losses, correct, counted = sums / torch.tensor([parts, 1, 1], dtype=torch.float64)[:, None]
        metrics = {"loss": float(loss_sum) / parts, "step_losses": step_losses.tolist(),
                   "correct": correct.tolist(), "counted": counted.tolist(),
                   "accuracy_by_step": (correct / counted.clamp(min=1)).tolist()}
        return metrics, sum(len(r.input_ids) for r in rows)

    def _batch(self, rows: list[TrainRow], width: int, compiled: bool):
        """The rows padded to ``width``, with their features (captured, or from the target's pass,
        ``compiled`` as the drafter's layer is)."""
        ids, mask, attn = pad_batch(rows, width)
        if rows[0].aux is not None:
            aux, final = pad_features(rows, width)
            aux, final = aux.to(self.device), final.to(self.device)
        else:
            step = self.runner.forward_batch(ids, compiled=compiled)
            aux, final = step.aux, step.hidden
        return make_batch(ids.to(self.device), mask.to(self.device), aux, final, self.heads.lm_head, self.t2d,
                          attn.to(self.device))

    def _autocast(self):
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    def _total_steps(self) -> int:
        o = self.opts
        if o.max_steps is not None:
            return o.max_steps
        return max(1, math.ceil(o.epochs * len(self.rows) / o.batch_size))

    def _evaluator(self):
        from draftlab.train.evaluate import Evaluator

        o = self.opts
        flags = exact_spec_flags(o.steps, o.topk, o.num_draft_tokens, architecture=self.target_cfg.architecture)
        return Evaluator(self.runner, o.target, o.eval_prompts, flags, max_new_tokens=o.eval_max_new_tokens,
                         t2d=self.t2d, ttt_length=o.ttt_length)

    def _checkpoint(self, step: int, tokens: int, log: list[dict], optimizer, scheduler, order: DataOrder) -> None:
        if not self.world.main:
            barrier(self.world)
            return
        shared = self.drafter.embed_tokens is self.heads.embed_tokens
        weights = {k: v.detach().cpu().clone() for k, v in self.drafter.state_dict().items()
                   if not (shared and k.startswith("embed_tokens."))}
        checkpoints.export_drafter(self.out, self.drafter, self.start.t2d, self.start.config, with_embedding=not shared)
        checkpoints.save_state(self.out, {
            "step": step, "tokens": tokens, "log": log, "weights": weights, "t2d": self.start.t2d.cpu(),
            "config": self.start.config, "aux_layers": self.start.aux_layers, "vocab": self.start.vocab,
            "init": None if self.opts.init is None else str(self.opts.init),
            "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "data_order": order.state(), "rng": checkpoints.rng_state(), "options": self._options(),
        })
        _rewrite_log(self.out, log)
        barrier(self.world)

    def _options(self) -> dict[str, Any]:
        """The run's options as plain values (torch.load reads them back weights-only): the deployment as its
        JSON fields."""
        deployment = self.opts.deployment
        options = asdict(replace(self.opts, deployment=None))
        return _jsonable({**options, "deployment": None if deployment is None else deployment.describe()})

    def _result(self, step: int, tokens: int, rate: float, log: list[dict], interrupted: bool) -> TrainResult:
        deployment = self.opts.deployment
        window = log[-ACCURACY_WINDOW:]
        correct = np.sum([e["correct"] for e in window], axis=0) if window else []
        counted = np.sum([e["counted"] for e in window], axis=0) if window else []
        accuracy = [float(c / max(n, 1)) for c, n in zip(correct, counted)]
        init = self.state.get("init") if self.state is not None else (None if self.opts.init is None
                                                                        else str(self.opts.init))
        evals = [{"step": e["step"], **e["eval"]} for e in log if "eval" in e]
        return TrainResult(self.out, init, self.start.vocab, step, tokens, rate,
                           log[-1]["loss"] if log else None, accuracy, evals, interrupted,
                           aux_layers=list(self.start.aux_layers),
                           draft_vocab_size=self.start.config.get("draft_vocab_size"),
                           notes=setup_notes(self.target_cfg, self.start, scratch=self.opts.init is None
                                             and self.state is None, opts_aux=self.opts.aux_layers,
                                             opts_vocab=self.opts.draft_vocab_size)
                           + ([self.kernel_note] if self.kernel_note else []),
                           engine=deployment and deployment.engine, engine_version=deployment and deployment.version,
                           captured_layers=list(self.start.aux_layers))


def make_optimizer(params: list[torch.Tensor], lr: float) -> torch.optim.AdamW:
    """AdamW as SpecForge sets it (betas 0.9/0.95, no weight decay); its fused kernel on CUDA (one
    launch for every tensor; the same update up to rounding)."""
    fused = bool(params) and all(p.device.type == "cuda" for p in params)
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0, fused=fused or None)


def _check_options(o: TrainOptions, world: World) -> None:
    if (o.data is None) == (o.features is None):
        raise DraftlabError("give --data (JSONL rows, the target runs online) or --features (captured hidden "
                            "states), one of them")
    if (o.max_steps is None) == (o.epochs is None):
        raise DraftlabError("give --max-steps N or --epochs E, one of them")
    if o.max_steps is not None and o.max_steps < 1 or o.epochs is not None and o.epochs <= 0:
        raise DraftlabError("--max-steps and --epochs must be positive")
    if o.remap is not None and o.init is None:
        raise DraftlabError("--remap COUNTS rebuilds a warm start's vocabulary; it needs --init OLD_DRAFTER")
    if o.variant is not None and o.init is not None:
        raise DraftlabError("--variant chooses a new drafter's variant; a warm start keeps the variant of --init")
    if o.sliding_window is not None and o.init is not None:
        raise DraftlabError("--sliding-window gives a new drafter its window; a warm start keeps the window of --init")
    if o.sliding_window is not None and o.sliding_window < 1:
        raise DraftlabError(f"--sliding-window must be >= 1, got {o.sliding_window}")
    if o.variant is not None and o.variant not in NEW_DRAFTER_FLAGS:
        raise DraftlabError(f"--variant {o.variant!r} is not one draftlab trains; choose one of "
                            f"{', '.join(NEW_DRAFTER_FLAGS)}")
    if o.init is not None:
        refuse_unsupported(open_checkpoint(o.init))
    if o.grad_accum < 1 or o.batch_size % (o.grad_accum * world.size):
        raise DraftlabError(f"--batch-size {o.batch_size} must split into --grad-accum {o.grad_accum} x "
                            f"{world.size} process(es) equal micro-batches")
    if o.eval_every and o.eval_prompts is None:
        raise DraftlabError("--eval-every needs --eval-prompts (held-out prompts)")
    if o.seq_len < 2:
        raise DraftlabError(f"--seq-len must be >= 2, got {o.seq_len}")


def _warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """Linear warm-up to the peak over ``warmup`` steps, then cosine to 0 at ``total``."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return factor


@contextmanager
def _stop_on_sigint():
    """Ctrl-C asks the loop to stop after the step under way (a second Ctrl-C interrupts at once)."""
    requested = []

    def handler(signum, frame):
        if requested:
            raise KeyboardInterrupt
        requested.append(signum)

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: leave Ctrl-C alone
        yield lambda: False
        return
    try:
        yield lambda: bool(requested)
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _progress(enabled: bool, total: int, done: int):
    """A rich bar on stderr with loss, step-0 accuracy and tokens/s; a no-op when disabled."""
    if not enabled:
        yield lambda step, entry: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from draftlab.console import err_console

    columns = [TextColumn("train"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
               TextColumn("acc {task.fields[acc]}"), TextColumn("{task.fields[rate]} tok/s"),
               TextColumn("{task.fields[accept]}"), TimeRemainingColumn()]
    with Progress(*columns, console=err_console, transient=False) as bar:
        task = bar.add_task("train", total=total, completed=done, loss="-", acc="-", rate="-", accept="")

        def update(step: int, entry: dict) -> None:
            fields = {"loss": f"{entry['loss']:.3f}", "acc": f"{entry['accuracy_by_step'][0]:.3f}",
                      "rate": f"{entry['tokens_per_second']:.0f}"}
            if "eval" in entry:
                fields["accept"] = f"accept {entry['eval']['accept_length']:.2f}"
            bar.update(task, completed=step, **fields)
        yield update


def _append_log(out: Path, entry: dict) -> None:
    with (out / LOG_FILE).open("a") as f:
        f.write(json.dumps(entry) + "\n")


def _rewrite_log(out: Path, log: list[dict]) -> None:
    """The log as of the checkpoint (steps after it, from a run that died, are dropped on resume)."""
    from draftlab.fsutil import write_text_atomic

    write_text_atomic(out / LOG_FILE, "".join(json.dumps(e) + "\n" for e in log))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return str(obj) if isinstance(obj, Path) else obj
