"""``draftlab serve --synthetic-acceptance``: the requested acceptance, reached over HTTP and read back the
way bench reads an engine (vLLM's /metrics counters), on the real decoder over the tiny table pair."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pair_server import EOS, VOCAB, IdTokenizer, start

sys.path.insert(0, str(Path(__file__).parents[1] / "decode"))

from spec_fakes import make_pair  # noqa: E402

from draftlab.acceptance.synthetic import SyntheticAcceptance, parse_synthetic  # noqa: E402
from draftlab.bench.client import BenchConfig  # noqa: E402
from draftlab.bench.run import run_bench  # noqa: E402
from draftlab.bench.workload import Prompt  # noqa: E402
from draftlab.decode.decoder import SpeculativeDecoder  # noqa: E402
from draftlab.engines.sglang_flags import resolve_spec_flags  # noqa: E402
from draftlab.errors import DraftlabError  # noqa: E402
from draftlab.serve.engine import ServeEngine  # noqa: E402
from draftlab.serve.http import ServeContext  # noqa: E402
from draftlab.serve.synthetic import SyntheticDecoder  # noqa: E402

PROMPTS = [[1, 2, 3], [4, 5], [6, 0, 7, 8], [9], [2, 2, 10], [3, 1]]


def _context(synthetic: SyntheticAcceptance, steps: int = 4, seed: int = 0) -> ServeContext:
    target, drafter = make_pair(VOCAB, seed=3, eos={EOS})
    flags = resolve_spec_flags(steps, 1, steps + 1)
    engine = ServeEngine(SyntheticDecoder(target, drafter, flags, synthetic, seed=seed), steps=steps,
                         num_draft_tokens=steps + 1)
    spec = {"num_steps": steps, "eagle_topk": 1, "num_draft_tokens": steps + 1}
    return ServeContext(engine, IdTokenizer(), "toy-table", "toy-table", spec, {EOS}, None, VOCAB)


def _serve_and_bench(synthetic: SyntheticAcceptance, steps: int = 4):
    ctx = _context(synthetic, steps)
    server, url = start(ctx)
    try:
        config = BenchConfig(base_url=url, api="openai", max_tokens=200, ignore_eos=True, warmup=0, concurrency=4)
        result = run_bench(config, [Prompt(input_ids=p) for p in PROMPTS * 5])
    finally:
        server.shutdown()
        ctx.engine.close()
    return result, ctx.engine.snapshot()


def _write_profile(tmp_path: Path, marginals: list[float]) -> Path:
    cond, prev = [], 1.0
    for m in marginals:
        cond.append(m / prev if prev else 0.0)
        prev = m
    path = tmp_path / "speculation_profile.json"
    path.write_text(json.dumps({"schema_version": "1.0", "measured": True, "num_speculative_tokens": len(marginals),
                                "marginal_accept_rates": marginals, "conditional_accept_rates": cond,
                                "mean_accept_length": 1 + sum(marginals), "accept_length_model": "chain_analytic"}))
    return path


@pytest.mark.parametrize("marginals", [[0.82, 0.6, 0.41, 0.2], [0.95, 0.9, 0.3, 0.29]])
def test_a_profile_is_reached_per_position_over_1000_cycles(tmp_path, marginals):
    synthetic = parse_synthetic(str(_write_profile(tmp_path, marginals)))
    result, counters = _serve_and_bench(synthetic)
    assert result.failed == 0 and counters.num_drafts >= 1000
    assert result.accept_length == pytest.approx(1 + sum(marginals), abs=0.05)
    assert result.acceptance_by_position == pytest.approx(marginals, abs=0.03)


def test_an_accept_length_alone_is_realised_as_vllms_two_point_schedule():
    result, counters = _serve_and_bench(parse_synthetic("2.3"))
    assert counters.num_drafts >= 1000
    assert result.accept_length == pytest.approx(2.3, abs=0.05)
    # vLLM's minimum-variance schedule for 2.3 and 4 drafts: [1, 0.3, 0, 0]: exactly 1 or 2 accepted
    assert result.acceptance_by_position[0] == 1.0 and result.acceptance_by_position[2:] == [0.0, 0.0]
    assert result.acceptance_by_position[1] == pytest.approx(0.3, abs=0.03)


def test_the_text_is_the_drafts_then_the_targets_token():
    """Accepting nothing emits the target's own greedy text; accepting everything emits every draft, so the
    text then differs from the target's wherever the drafter does."""
    target, drafter = make_pair(VOCAB, seed=3, eos={EOS})
    flags = resolve_spec_flags(3, 1, 4)
    plain = SpeculativeDecoder(target, None, None)
    greedy = [t for c in plain.stream([1, 2, 3], max_new_tokens=40, ignore_eos=True) for t in c.tokens]
    none = SyntheticDecoder(target, drafter, flags, parse_synthetic("1"))
    commits = list(none.stream([1, 2, 3], max_new_tokens=40, ignore_eos=True))
    assert [t for c in commits for t in c.tokens] == greedy and {c.accept_length for c in commits[1:]} == {1}
    every = SyntheticDecoder(target, drafter, flags, parse_synthetic("4"))
    commits = list(every.stream([1, 2, 3], max_new_tokens=41, ignore_eos=True))
    assert {c.accept_length for c in commits[1:]} == {4}
    assert [t for c in commits for t in c.tokens] != greedy


def test_refusals():
    target, drafter = make_pair(VOCAB, seed=3, eos={EOS})
    with pytest.raises(DraftlabError, match="along a chain"):
        SyntheticDecoder(target, drafter, resolve_spec_flags(3, 2, 4), parse_synthetic("2"))
    with pytest.raises(DraftlabError, match="above steps \\+ 1 = 4"):
        SyntheticDecoder(target, drafter, resolve_spec_flags(3, 1, 4), parse_synthetic("4.5"))
    with pytest.raises(DraftlabError, match="finite number >= 1"):
        parse_synthetic("0.5")


def test_the_forcing_rule_is_unbiased():
    """The draws alone, 200,000 cycles: the mean and every marginal converge to the request (no bias; over
    1,000 cycles the standard error of the mean is sqrt(Var(AL) / 1000), about 0.045 for the first profile)."""
    import random

    from draftlab.acceptance.synthetic import accepted_drafts, forced_conditionals

    marginals = [0.82, 0.6, 0.41, 0.2]
    synthetic = SyntheticAcceptance("p", marginals=tuple(marginals))
    rng, conditionals = random.Random(1), forced_conditionals(synthetic, 4)
    drawn = [accepted_drafts(conditionals, rng) for _ in range(200_000)]
    assert 1 + sum(drawn) / len(drawn) == pytest.approx(1 + sum(marginals), abs=0.01)
    assert [sum(a > i for a in drawn) / len(drawn) for i in range(4)] == pytest.approx(marginals, abs=0.005)
