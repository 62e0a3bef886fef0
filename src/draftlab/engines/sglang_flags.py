"""SGLang's rules for ``--speculative-num-steps``, ``--speculative-eagle-topk`` and
``--speculative-num-draft-tokens``, as one pure function.

What SGLang's server_args does with the three flags (EAGLE/EAGLE3):

- all three unset: it picks them from the target architecture (``_auto_choose_speculative_params``):
  Llama and Grok get (5, 4, 8); DeepSeek V2/V3, gpt-oss, GLM-4 MoE, Bailing MoE, MiMo, Mistral
  Large 3 and, in current releases, every other architecture get (3, 1, 4) (older releases gave
  (5, 4, 8) to everything else);
- ``--speculative-num-steps`` unset while another is set: a bare assertion fails at startup;
- steps and topk 1 without num_draft_tokens: a warning, then num_draft_tokens = steps + 1 (the
  chain rule below turns the unset value into steps + 1); recorded here as ``source`` "rewritten";
- steps without topk: startup fails comparing the unset topk with 1 (``topk > 1``, a TypeError);
- steps and topk > 1 without num_draft_tokens: startup passes the flag checks with num_draft_tokens
  unset, which the draft worker then uses as a number; refused here;
- topk 1 with num_draft_tokens != steps + 1: a warning, then num_draft_tokens = steps + 1;
- the draft tree has ``topk + (steps - 1) * topk**2`` candidates and ``torch.topk`` picks
  num_draft_tokens - 1 of them, so more than that fails on the first draft;
- the tree kernel (``build_tree_kernel_efficient``) runs one CUDA thread per draft token in one
  block and checks num_draft_tokens <= 1024, so more fails on the first draft.
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
    source: str  # "explicit", "auto (<architecture>)" or "rewritten (<what SGLang filled in>)"
    rewrites: list[str] = field(default_factory=list)  # what SGLang would silently change

    @property
    def is_chain(self) -> bool:
        return self.topk == 1


MAX_DRAFT_TOKENS = 1024  # SGLang's tree kernel: one thread per draft token, one CUDA block per request


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

    Rewrites SGLang makes of a given value with only a warning are applied and recorded in
    ``rewrites`` so the caller can decide whether to refuse them; the value SGLang fills in for an
    unset one (``--steps S --topk 1`` alone) is applied and named in ``source``.
    """
    given = (steps, topk, num_draft_tokens)
    if all(v is None for v in given):
        s, k, n = auto_spec_flags(architecture)
        return SpecFlags(s, k, n, f"auto ({architecture or 'unknown architecture'})")
    chain_steps_only = steps is not None and topk == 1 and num_draft_tokens is None
    if any(v is None for v in given) and not chain_steps_only:
        missing = [name for name, v in zip(("--steps", "--topk", "--num-draft-tokens"), given) if v is None]
        raise DraftlabError(
            f"speculative flags: {', '.join(missing)} not set; SGLang needs all three of --steps, --topk "
            "and --num-draft-tokens or none (it fails otherwise; only --steps S --topk 1 alone is a chain "
            "it completes with S + 1 draft tokens); set all three or none"
        )
    for name, value in zip(("--steps", "--topk", "--num-draft-tokens"), given):
        if value is None and name == "--num-draft-tokens":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise DraftlabError(f"speculative flags: {name} must be a positive integer, got {value!r}")
    if chain_steps_only:
        source = (f"rewritten (--steps {steps} --topk 1 without --num-draft-tokens: SGLang warns and uses "
                  f"steps + 1 = {steps + 1})")
        return _checked(steps, 1, steps + 1, source, [])
    s, k, n = given
    rewrites: list[str] = []
    if k == 1 and n != s + 1:
        rewrites.append(
            f"--topk 1 is a chain: SGLang warns and sets --num-draft-tokens to steps + 1 = {s + 1} (was {n})"
        )
        n = s + 1
    return _checked(s, k, n, "explicit", rewrites)


def _checked(s: int, k: int, n: int, source: str, rewrites: list[str]) -> SpecFlags:
    """The settings SGLang would fail on at its first draft, refused now."""
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
    if n > MAX_DRAFT_TOKENS:
        given = "steps + 1 for a chain" if k == 1 else "--num-draft-tokens"
        fix = f"--steps <= {MAX_DRAFT_TOKENS - 1}" if k == 1 else f"--num-draft-tokens <= {MAX_DRAFT_TOKENS}"
        raise DraftlabError(
            f"speculative flags: {n} tokens verified per cycle ({given}), but SGLang's tree kernel "
            f"(build_tree_kernel_efficient) takes at most {MAX_DRAFT_TOKENS}, one CUDA thread each, and "
            f"would fail on the first draft; use {fix}"
        )
    return SpecFlags(s, k, n, source, rewrites)


def exact_spec_flags(
    steps: int | None, topk: int | None, num_draft_tokens: int | None, *, architecture: str | None = None
) -> SpecFlags:
    """:func:`resolve_spec_flags`, refusing what SGLang would silently rewrite too.

    draftlab's own runs (generate, probe, serve, plan) use this, so that what they report is what
    SGLang runs with the very same flags, never a quietly corrected variant. A flag left unset that
    SGLang fills in (``--steps S --topk 1``: S + 1 draft tokens) corrects nothing and is run, its
    ``source`` saying so.
    """
    flags = resolve_spec_flags(steps, topk, num_draft_tokens, architecture=architecture)
    if flags.rewrites:
        raise DraftlabError(
            f"{flags.rewrites[0]}; pass --num-draft-tokens {flags.num_draft_tokens} "
            f"(use {flags.steps}/{flags.topk}/{flags.num_draft_tokens}) to run what SGLang runs"
        )
    return flags
