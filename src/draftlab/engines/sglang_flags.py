"""SGLang's rules for ``--speculative-num-steps``, ``--speculative-eagle-topk`` and
``--speculative-num-draft-tokens``, as one pure function.

What SGLang's server_args does with the three flags (EAGLE/EAGLE3):

- all three unset: it picks them from the target architecture (``_auto_choose_speculative_params``):
  Llama and Grok get (5, 4, 8); DeepSeek V2/V3, gpt-oss, GLM-4 MoE, Bailing MoE, MiMo, Mistral
  Large 3 and, in current releases, every other architecture get (3, 1, 4) (older releases gave
  (5, 4, 8) to everything else);
- ``--speculative-num-steps`` unset while another is set: an assertion fails at startup; the other
  partial settings fail later (comparisons with None). Set all three or none;
- topk 1 with num_draft_tokens != steps + 1: a warning, then num_draft_tokens = steps + 1;
- the draft tree has ``topk + (steps - 1) * topk**2`` candidates and ``torch.topk`` picks
  num_draft_tokens - 1 of them, so more than that fails on the first draft.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from draftlab.errors import DraftlabError

_CHAIN_ARCHITECTURES = (
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "GptOssForCausalLM",
    "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration", "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM",
)
_TREE_ARCHITECTURES = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")


@dataclass(frozen=True)
class SpecFlags:
    """The speculation shape SGLang will run, and what it changed on the way."""

    steps: int
    topk: int
    num_draft_tokens: int  # tokens verified per cycle, the root included
    source: str  # "explicit" or "auto (<architecture>)"
    rewrites: list[str] = field(default_factory=list)  # what SGLang would silently change

    @property
    def is_chain(self) -> bool:
        return self.topk == 1


def draft_pool_size(steps: int, topk: int) -> int:
    """Scored candidates the draft tree offers: topk + (steps - 1) * topk**2."""
    return topk + (steps - 1) * topk * topk


def auto_spec_flags(architecture: str | None) -> tuple[int, int, int]:
    """SGLang's automatic (steps, topk, num_draft_tokens) for a target architecture."""
    if architecture in _TREE_ARCHITECTURES:
        return (5, 4, 8)
    return (3, 1, 4)  # _CHAIN_ARCHITECTURES and, in current SGLang, everything else


def resolve_spec_flags(
    steps: int | None, topk: int | None, num_draft_tokens: int | None, *, architecture: str | None = None
) -> SpecFlags:
    """Apply SGLang's rules; raise :class:`DraftlabError` for what SGLang rejects at startup.

    Rewrites SGLang makes with only a warning are applied and recorded in ``rewrites`` so the
    caller can decide whether to refuse them.
    """
    given = (steps, topk, num_draft_tokens)
    if all(v is None for v in given):
        s, k, n = auto_spec_flags(architecture)
        return SpecFlags(s, k, n, f"auto ({architecture or 'unknown architecture'})")
    if any(v is None for v in given):
        missing = [name for name, v in zip(("--steps", "--topk", "--num-draft-tokens"), given) if v is None]
        raise DraftlabError(
            f"speculative flags: {', '.join(missing)} not set; SGLang needs all three of --steps, --topk "
            "and --num-draft-tokens or none (it fails at startup otherwise); set all three or none"
        )
    for name, value in zip(("--steps", "--topk", "--num-draft-tokens"), given):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise DraftlabError(f"speculative flags: {name} must be a positive integer, got {value!r}")
    s, k, n = given
    rewrites: list[str] = []
    if k == 1 and n != s + 1:
        rewrites.append(
            f"--topk 1 is a chain: SGLang warns and sets --num-draft-tokens to steps + 1 = {s + 1} (was {n})"
        )
        n = s + 1
    pool = draft_pool_size(s, k)
    if n - 1 > pool:
        raise DraftlabError(
            f"speculative flags: --num-draft-tokens {n} needs {n - 1} draft tokens but steps {s} x topk {k} "
            f"offers only {pool} (topk + (steps-1)*topk^2); SGLang would fail in torch.topk on the first "
            f"draft; use --num-draft-tokens <= {pool + 1} or more steps/topk"
        )
    if n < 2:
        raise DraftlabError(
            "speculative flags: --num-draft-tokens 1 verifies only the root, so SGLang would draft "
            "tokens that are never checked; use --num-draft-tokens >= 2"
        )
    return SpecFlags(s, k, n, "explicit", rewrites)


def exact_spec_flags(
    steps: int | None, topk: int | None, num_draft_tokens: int | None, *, architecture: str | None = None
) -> SpecFlags:
    """:func:`resolve_spec_flags`, refusing what SGLang would silently rewrite too.

    draftlab's own runs (generate, probe, serve, plan) use this, so that what they report is what
    SGLang runs with the very same flags, never a quietly corrected variant.
    """
    flags = resolve_spec_flags(steps, topk, num_draft_tokens, architecture=architecture)
    if flags.rewrites:
        raise DraftlabError(
            f"{flags.rewrites[0]}; pass --num-draft-tokens {flags.num_draft_tokens} "
            f"(use {flags.steps}/{flags.topk}/{flags.num_draft_tokens}) to run what SGLang runs"
        )
    return flags
