import pytest

from draftlab.engines.sglang_flags import draft_pool_size, exact_spec_flags, resolve_spec_flags
from draftlab.errors import DraftlabError


@pytest.mark.parametrize(
    ("arch", "expected"),
    [("LlamaForCausalLM", (5, 4, 8)), ("Grok1ForCausalLM", (5, 4, 8)), ("DeepseekV3ForCausalLM", (3, 1, 4)),
     ("GptOssForCausalLM", (3, 1, 4)), ("Qwen3ForCausalLM", (3, 1, 4)), (None, (3, 1, 4))],
)
def test_none_set_takes_sglang_auto_choice_by_architecture(arch, expected):
    flags = resolve_spec_flags(None, None, None, architecture=arch)
    assert (flags.steps, flags.topk, flags.num_draft_tokens) == expected
    assert flags.source.startswith("auto") and flags.rewrites == []


@pytest.mark.parametrize("given", [(3, None, None), (None, 1, 4), (None, None, 4), (3, 2, None), (3, None, 4),
                                   (None, 1, None)])
def test_partial_settings_sglang_fails_on_are_rejected_naming_the_missing_flags(given):
    with pytest.raises(DraftlabError, match="all three"):
        resolve_spec_flags(*given)


def test_steps_and_topk_one_alone_is_the_chain_sglang_completes_and_is_recorded_as_rewritten():
    """SGLang warns and sets num_draft_tokens = steps + 1; draftlab runs it (it corrects no given value)."""
    for resolve in (resolve_spec_flags, exact_spec_flags):
        flags = resolve(3, 1, None)
        assert (flags.steps, flags.topk, flags.num_draft_tokens) == (3, 1, 4) and flags.rewrites == []
        assert flags.source.startswith("rewritten") and "steps + 1 = 4" in flags.source
    with pytest.raises(DraftlabError, match="positive integer"):
        resolve_spec_flags(0, 1, None)


def test_more_than_1024_tokens_per_cycle_is_refused_as_sglangs_tree_kernel_would():
    assert resolve_spec_flags(3, 40, 1024).num_draft_tokens == 1024
    assert resolve_spec_flags(1023, 1, 1024).num_draft_tokens == 1024
    with pytest.raises(DraftlabError, match="at most 1024.*--num-draft-tokens <= 1024"):
        resolve_spec_flags(3, 40, 1025)
    with pytest.raises(DraftlabError, match="at most 1024.*--steps <= 1023"):
        resolve_spec_flags(1024, 1, None)


def test_chain_with_wrong_draft_tokens_is_rewritten_and_recorded():
    flags = resolve_spec_flags(3, 1, 8)
    assert (flags.steps, flags.topk, flags.num_draft_tokens) == (3, 1, 4)
    assert len(flags.rewrites) == 1 and "steps + 1 = 4" in flags.rewrites[0]


def test_two_one_three_is_a_chain_of_two_drafts_unchanged():
    flags = resolve_spec_flags(2, 1, 3)
    assert flags.is_chain and flags.num_draft_tokens == 3 and flags.rewrites == []


def test_draft_token_upper_bound_is_the_pool_size_plus_root():
    assert draft_pool_size(2, 2) == 6
    assert resolve_spec_flags(2, 2, 7).num_draft_tokens == 7
    with pytest.raises(DraftlabError, match="offers only 6"):
        resolve_spec_flags(2, 2, 8)
    assert resolve_spec_flags(5, 4, 8).num_draft_tokens == 8


@pytest.mark.parametrize("given", [(0, 1, 1), (3, 0, 4), (3, 2, 0), (-1, 4, 8)])
def test_non_positive_values_are_rejected(given):
    with pytest.raises(DraftlabError, match="positive integer"):
        resolve_spec_flags(*given)


def test_a_tree_that_verifies_only_the_root_is_rejected():
    with pytest.raises(DraftlabError, match=">= 2"):
        resolve_spec_flags(3, 2, 1)
