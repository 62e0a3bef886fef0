"""When ``generate`` compiles its target's layer parts: only where it pays at any accept length."""

from draftlab.decode.generate import decode_steps
from draftlab.engines.sglang_flags import resolve_spec_flags
from draftlab.models.target_batch import COMPILE_PAYS_AFTER


def test_plain_and_batched_decodes_count_a_step_per_token_of_each_group() -> None:
    assert decode_steps(64, 8, 256, None) == 8 * 256
    assert decode_steps(65, 8, 256, None) == 9 * 256


def test_a_batch_one_speculative_decode_counts_its_fewest_cycles() -> None:
    """A 3/1/4 cycle commits up to 4 tokens, so 64 prompts x 256 tokens are at least 4,096 verify steps:
    enough to compile; 16 x 200 (800 cycles at best) is not, although it is 3,200 tokens."""
    chain = resolve_spec_flags(3, 1, 4)
    assert decode_steps(64, 1, 256, chain) == 4096 >= COMPILE_PAYS_AFTER
    assert decode_steps(16, 1, 200, chain) == 800 < COMPILE_PAYS_AFTER
