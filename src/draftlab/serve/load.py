"""Build what ``draftlab serve`` serves from folders: target, drafter, flags, tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftlab.acceptance.synthetic import SyntheticAcceptance
from draftlab.checkpoint.configs import TargetConfig
from draftlab.checkpoint.reader import open_checkpoint
from draftlab.engines.deployment import Deployment
from draftlab.engines.schedule import LoadedSchedule, schedule_steps
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.errors import DraftlabError
from draftlab.serve.engine import ServeEngine
from draftlab.serve.http import ServeContext

SCHEDULE_MAX_BATCH = 48  # requests batched together with a schedule unless --max-batch says otherwise


def load_context(
    target: str | Path, drafter: str | Path | None, *, steps: int | None = None, topk: int | None = None,
    num_draft_tokens: int | None = None, dtype: str | None = None, device: str = "cpu",
    deployment: Deployment | None = None, synthetic: SyntheticAcceptance | None = None, synthetic_seed: int = 0,
    schedule: LoadedSchedule | None = None, max_batch: int | None = None,
) -> ServeContext:
    """Load the pair and start the decoder worker, the target capturing the aux layers ``deployment`` names
    (default: the newest SGLang's);
    ``synthetic`` forces acceptance at the requested rates (:mod:`draftlab.serve.synthetic`).

    With ``schedule`` or ``max_batch`` > 1 the worker batches requests (:mod:`draftlab.serve.batched`):
    the draft length per batch follows ``schedule`` (else the fixed ``steps``); ``max_batch`` defaults
    to 48 (SGLang's EAGLE cap) with a schedule, 1 (one request at a time) without."""
    if schedule is not None or (max_batch or 1) > 1:
        if synthetic is not None:
            raise DraftlabError("--synthetic-acceptance runs one request at a time; drop --schedule/--max-batch")
        return _batched_context(target, drafter, steps, topk, num_draft_tokens, dtype, device, deployment, schedule,
                                max_batch or SCHEDULE_MAX_BATCH)
    from draftlab.decode.decoder import SpeculativeDecoder
    from draftlab.models.devices import default_dtype
    from draftlab.models.pair import load_pair
    from draftlab.models.target import TargetRunner

    if drafter is None and any(v is not None for v in (steps, topk, num_draft_tokens)):
        raise DraftlabError("--steps/--topk/--num-draft-tokens need --drafter")
    if drafter is None and synthetic is not None:
        raise DraftlabError("--synthetic-acceptance forces the acceptance of drafts; it needs --drafter")
    target_cfg = TargetConfig.from_dict(open_checkpoint(target).config)
    dtype = dtype or default_dtype(device)
    flags = draft_model = None
    if drafter is None:
        runner = TargetRunner.load(target, aux_layers=[], dtype=dtype, device=device)  # plain: captures none
    else:
        flags = exact_spec_flags(steps, topk, num_draft_tokens, architecture=target_cfg.architecture)
        if synthetic is not None:
            from draftlab.serve.synthetic import check_forceable

            check_forceable(synthetic, flags)  # before anything loads
        pair = load_pair(target, drafter, deployment, dtype=dtype, device=device)
        runner, draft_model = pair.target, pair.drafter
    if synthetic is None:
        decoder = SpeculativeDecoder(runner, draft_model, flags)
    else:
        from draftlab.serve.synthetic import SyntheticDecoder

        decoder = SyntheticDecoder(runner, draft_model, flags, synthetic, seed=synthetic_seed)
    spec = None if flags is None else {"num_steps": flags.steps, "eagle_topk": flags.topk,
                                       "num_draft_tokens": flags.num_draft_tokens}
    serve_engine = ServeEngine(decoder, steps=flags.steps if flags else None,
                               num_draft_tokens=flags.num_draft_tokens if flags else None)
    return ServeContext(serve_engine, _tokenizer(Path(target)), Path(target).name, str(target), spec,
                        set(runner.eos_token_ids), runner.config.max_position_embeddings, runner.config.vocab_size)


def _batched_context(target: str | Path, drafter: str | Path | None, steps: int | None, topk: int | None,
                     num_draft_tokens: int | None, dtype: str | None, device: str, deployment: Deployment | None,
                     schedule: LoadedSchedule | None, max_batch: int) -> ServeContext:
    from draftlab.models.devices import default_dtype
    from draftlab.models.pair import load_pair
    from draftlab.models.target import TargetRunner
    from draftlab.serve.batched import BatchServeEngine

    if drafter is None:
        if schedule is not None:
            raise DraftlabError("--schedule sets the draft length per batch size; it needs --drafter")
        if any(v is not None for v in (steps, topk, num_draft_tokens)):
            raise DraftlabError("--steps/--topk/--num-draft-tokens need --drafter")
        top, draft_length = 0, None
    elif schedule is not None:
        top = schedule_steps(schedule, "draftlab", steps, topk, num_draft_tokens)
        draft_length = schedule.draft_length
    else:
        flags = exact_spec_flags(steps, topk, num_draft_tokens)
        if flags.topk != 1:
            raise DraftlabError(f"--topk {flags.topk}: the batching server drafts chains; use --topk 1 (or "
                                "--max-batch 1 for trees)")
        top, draft_length = flags.steps, None
    dtype = dtype or default_dtype(device)
    if drafter is None:
        runner, draft_model = TargetRunner.load(target, aux_layers=[], dtype=dtype, device=device), None
    else:
        pair = load_pair(target, drafter, deployment, dtype=dtype, device=device)
        runner, draft_model = pair.target, pair.drafter
    serve_engine = BatchServeEngine(runner, draft_model, draft_length or (lambda _b: top), max_draft_length=top,
                                    max_batch=max_batch)
    spec = None if draft_model is None else {"num_steps": top, "eagle_topk": 1, "num_draft_tokens": top + 1}
    return ServeContext(serve_engine, _tokenizer(Path(target)), Path(target).name, str(target), spec,
                        set(runner.eos_token_ids), runner.config.max_position_embeddings, runner.config.vocab_size)


def _tokenizer(folder: Path) -> Any | None:
    """The target folder's tokenizer, or None when it has none (token-id requests still work)."""
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise DraftlabError(f"cannot load its tokenizer: {str(exc).splitlines()[0]}", path=folder) from None
