"""Build what ``draftlab serve`` serves from folders: target, drafter, flags, tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftlab.checkpoint.configs import TargetConfig
from draftlab.checkpoint.reader import open_checkpoint
from draftlab.engines import ENGINES
from draftlab.engines.sglang_flags import exact_spec_flags
from draftlab.errors import DraftlabError
from draftlab.serve.engine import ServeEngine
from draftlab.serve.http import ServeContext
from draftlab.spec.synthetic import SyntheticAcceptance


def load_context(
    target: str | Path, drafter: str | Path | None, *, steps: int | None = None, topk: int | None = None,
    num_draft_tokens: int | None = None, dtype: str | None = None, device: str = "cpu", engine: str = "sglang",
    synthetic: SyntheticAcceptance | None = None, synthetic_seed: int = 0,
) -> ServeContext:
    """Load the pair and start the decoder worker. ``engine`` picks whose aux-id convention to read;
    ``synthetic`` forces acceptance at the requested rates (:mod:`draftlab.serve.synthetic`)."""
    from draftlab.models.devices import default_dtype
    from draftlab.models.pair import load_pair
    from draftlab.models.target import TargetRunner
    from draftlab.spec.decoder import SpeculativeDecoder

    if engine not in ENGINES:
        raise DraftlabError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if drafter is None and any(v is not None for v in (steps, topk, num_draft_tokens)):
        raise DraftlabError("--steps/--topk/--num-draft-tokens need --drafter")
    if drafter is None and synthetic is not None:
        raise DraftlabError("--synthetic-acceptance forces the acceptance of drafts; it needs --drafter")
    target_cfg = TargetConfig.from_dict(open_checkpoint(target).config)
    dtype = dtype or default_dtype(device)
    flags = draft_model = None
    if drafter is None:
        runner = TargetRunner.load(target, dtype=dtype, device=device)
    else:
        flags = exact_spec_flags(steps, topk, num_draft_tokens, architecture=target_cfg.architecture)
        if synthetic is not None:
            from draftlab.serve.synthetic import check_forceable

            check_forceable(synthetic, flags)  # before anything loads
        pair = load_pair(target, drafter, engine=engine, dtype=dtype, device=device)
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


def _tokenizer(folder: Path) -> Any | None:
    """The target folder's tokenizer, or None when it has none (token-id requests still work)."""
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise DraftlabError(f"cannot load its tokenizer: {str(exc).splitlines()[0]}", path=folder) from None
