"""How each engine computes a target's own MTP head when it drafts with it (SGLang ``NEXTN``, vLLM ``mtp``):
the rules :class:`~draftlab.models.mtp.MtpDrafter` follows. Which releases serve MTP for which targets, and
with which flags, is :mod:`draftlab.engines.mtp`'s.

Common to both engines and both styles: the head's input at a position is the embedding of the NEXT token
and the target's final hidden state (after its final norm: the lm_head's input, which both engines keep as
the speculative hidden state), each normalised, concatenated embedding first, projected to the hidden size,
one decoder layer, the final norm and the shared head. Every draft step runs the head's FIRST layer again
(SGLang loads exactly one: ``deepseek_nextn.py`` asserts ``num_nextn_predict_layers == 1``; vLLM's proposer
drafts with ``spec_step_idx`` 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftlab.engines.mtp import target_support
from draftlab.engines.releases import release
from draftlab.errors import DraftlabError

STYLES = ("deepseek", "qwen3_next")  # model.layers.{L}.enorm/hnorm/eh_proj/shared_head; mtp.fc/pre_fc_norm_*


def deepseek_mtp_prefixes(num_hidden_layers: int, count: int) -> list[str]:
    """Where a DeepSeek/GLM-style checkpoint stores its ``count`` MTP layers: ``model.layers.{L+i}.``, after its
    ``num_hidden_layers`` decoder layers."""
    return [f"model.layers.{num_hidden_layers + i}." for i in range(count)]


@dataclass(frozen=True)
class MtpRules:
    """What one engine does with one style of MTP head at draft time."""

    feeds_back_normed: bool  # the next step's hidden: the final norm's output (else the layer's, before it)
    zero_first_embedding: bool  # the embedding at position 0 is zeroed before its norm
    own_head: bool  # the head's own embed_tokens / shared_head.head where the checkpoint has them


def mtp_rules(engine: str, style: str) -> MtpRules:
    """The rules of ``engine`` ("sglang" | "vllm") for an MTP head of ``style`` (one of STYLES)."""
    if style not in STYLES:
        raise DraftlabError(f"unknown MTP head style {style!r}; draftlab computes {', '.join(STYLES)}")
    if engine == "sglang":
        # sglang models/deepseek_nextn.py: DeepseekModelNextN.forward returns shared_head.norm(...), which the
        # logits processor keeps as the next step's hidden state; load_weights skips "shared_head.head" and
        # "embed_tokens" (the target's are used). models/qwen3_next_mtp.py: the model ends in its norm and the
        # head uses the target's embedding and lm_head.
        return MtpRules(feeds_back_normed=True, zero_first_embedding=False, own_head=False)
    if engine == "vllm":
        if style == "deepseek":
            # vllm models/deepseek_mtp.py: DeepSeekMultiTokenPredictorLayer.forward zeroes inputs_embeds where
            # positions == 0 and returns residual + hidden_states (compute_logits applies shared_head.norm);
            # each MTP layer loads its own embed_tokens and shared_head.head.
            return MtpRules(feeds_back_normed=False, zero_first_embedding=True, own_head=True)
        # vllm models/qwen3_next_mtp.py: the predictor ends in self.norm; embed_tokens and lm_head are the target's
        return MtpRules(feeds_back_normed=True, zero_first_embedding=False, own_head=False)
    raise DraftlabError(f"unknown engine {engine!r}; choose sglang or vllm")


@dataclass(frozen=True)
class MtpServing:
    """The engine release a run computes a target's MTP head for (``--engine``, ``--engine-version``)."""

    engine: str = "sglang"
    asked_version: str | None = None  # as the user wrote it (None: the newest known)

    def rules(self, style: str) -> MtpRules:
        return mtp_rules(self.engine, style)

    def refuse_unserved(self, target: str | Path, topk: int) -> None:
        """Refuse in one line a target whose MTP layers this release does not serve, and a tree where it
        drafts a chain (:func:`draftlab.engines.mtp.mtp_support`'s rules), before any weight loads."""
        support = target_support(target, self.engine, self.asked_version)
        if support is None:
            return
        if not support.served:
            raise DraftlabError(f"{support.why_not} ({support.source})", path=Path(target))
        if topk > 1 and not support.trees:
            raise DraftlabError(f"--topk {topk}: {support.name} drafts with the MTP head as a chain "
                                f"({support.source}); use --topk 1", path=Path(target))

    def describe(self) -> dict[str, Any]:
        """The engine fields a result carries (Deployment.describe()'s keys): nothing is captured for the head,
        which reads the target's final hidden state."""
        return {"engine": self.engine, "engine_version": release(self.engine, self.asked_version).version,
                "engine_version_asked": self.asked_version, "captured_layers": None, "aux_rule": None,
                "runner": None, "draft_windows": [None]}
