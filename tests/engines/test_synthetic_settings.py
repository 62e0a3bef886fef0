"""``--synthetic-acceptance`` as each engine reads it.

The parsing and validation below are reimplemented from the engines' code (engine-interop.md 2, 3a, 4):
vLLM 0.20.0-0.34.0 ``vllm/config/speculative.py`` (``SpeculativeConfig`` keys, ``_resolve_synthetic_acceptance_rates``,
``_acceptance_length_to_rates``; ``vllm/engine/arg_utils.py`` json.loads of --speculative-config); SGLang
``sglang/srt/environ.py`` (``EnvFloat``/``EnvStr``) and ``speculative/spec_utils.py`` (``SIMULATE_ACC_LEN`` > 0 is on,
clamped to [1, steps + 1], ``match-expected`` two-point draw); TensorRT-LLM ``_torch/speculative/interface.py``
(``get_force_num_accepted_tokens_float`` on the one-model path, ``int()`` on the two-model path).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from draftlab.acceptance.synthetic import SyntheticAcceptance, parse_synthetic
from draftlab.cli import main
from draftlab.engines.launch import LaunchRequest, engine_command
from draftlab.engines.releases import SGLANG_VERSIONS, VLLM_VERSIONS, version_key
from draftlab.engines.synthetic import synthetic_settings
from draftlab.errors import DraftlabError

PROFILE = SyntheticAcceptance("p.json", marginals=(0.816, 0.634, 0.475, 0.2), profile="p.json")

# --- vLLM, as its SpeculativeConfig validates ----------------------------------------------------

VLLM_SYNTHETIC_KEYS = {"rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length"}
VLLM_BASE_KEYS = {"method", "model", "num_speculative_tokens"}


def vllm_resolve(config: dict) -> list[float]:
    """vLLM's resolution of the synthetic keys into per-position marginals (ValueError as vLLM raises)."""
    unknown = set(config) - VLLM_SYNTHETIC_KEYS - VLLM_BASE_KEYS
    if unknown:  # pydantic extra="forbid"
        raise ValueError(f"extra keys {unknown}")
    n = config["num_speculative_tokens"]
    rates, length = config.get("synthetic_acceptance_rates"), config.get("synthetic_acceptance_length")
    if config.get("rejection_sample_method", "standard") != "synthetic":
        if rates is not None or length is not None:
            raise ValueError("only valid with rejection_sample_method='synthetic'")
        return []
    if (rates is None) == (length is None):
        raise ValueError("requires exactly one of synthetic_acceptance_rates, synthetic_acceptance_length")
    if rates is not None:
        if not isinstance(rates, list) or not all(isinstance(r, float) for r in rates):
            raise ValueError("list[float]")
        if len(rates) != n:
            raise ValueError("length must equal num_speculative_tokens")
        if not all(0.0 <= r <= 1.0 for r in rates):
            raise ValueError("entries must be in [0, 1]")
        if any(rates[i] > rates[i - 1] for i in range(1, n)):
            raise ValueError("must be non-increasing")
        return list(rates)
    if not 1.0 <= length <= float(n + 1):
        raise ValueError(f"synthetic_acceptance_length must be in [1, {n + 1}]")
    drafts = length - 1
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (n - full - 1))[:n]


def vllm_config(argv: list[str]) -> dict:
    return json.loads(argv[argv.index("--speculative-config") + 1])


@pytest.mark.parametrize("steps", [1, 3, 4])
def test_vllm_profile_becomes_its_marginal_rates(steps):
    cmd = engine_command(LaunchRequest("vllm", "T", "D", steps=steps, synthetic=PROFILE))
    config = vllm_config(cmd.argv)
    assert vllm_resolve(config) == list(PROFILE.marginals[:steps])
    assert config["num_speculative_tokens"] == steps and config["rejection_sample_method"] == "synthetic"


@pytest.mark.parametrize("al, steps, rates", [(2.6, 3, [1.0, 0.6, 0.0]), (1.0, 3, [0.0, 0.0, 0.0]),
                                              (4.0, 3, [1.0, 1.0, 1.0]), (3.5, 4, [1.0, 1.0, 0.5, 0.0])])
def test_vllm_accept_length_passes_as_its_length_and_draftlab_serve_uses_the_same_schedule(al, steps, rates):
    synthetic = parse_synthetic(str(al))
    config = vllm_config(engine_command(LaunchRequest("vllm", "T", "D", steps=steps, synthetic=synthetic)).argv)
    assert config["synthetic_acceptance_length"] == al
    resolved = vllm_resolve(config)
    assert resolved == pytest.approx(rates) and synthetic.marginals_for(steps) == pytest.approx(resolved)
    assert 1 + sum(resolved) == pytest.approx(al)


def test_vllm_releases_before_0_20_are_refused_and_later_ones_take_the_keys():
    for version in VLLM_VERSIONS:
        request = LaunchRequest("vllm", "T", "D", steps=3, synthetic=PROFILE, engine_version=version)
        if version_key(version) < version_key("0.20.0"):
            with pytest.raises(DraftlabError, match=f"vLLM {version} has no synthetic_acceptance_rates"):
                engine_command(request)
        else:
            assert vllm_resolve(vllm_config(engine_command(request).argv)) == list(PROFILE.marginals[:3])


def test_requests_the_engine_would_reject_are_refused_first():
    with pytest.raises(DraftlabError, match="profile has 4 draft positions but the run drafts 5"):
        engine_command(LaunchRequest("vllm", "T", "D", steps=5, synthetic=PROFILE))
    with pytest.raises(ValueError):  # what vLLM itself says to a length above K + 1
        vllm_resolve({"num_speculative_tokens": 2, "rejection_sample_method": "synthetic",
                      "synthetic_acceptance_length": 3.5})
    with pytest.raises(DraftlabError, match="above steps \\+ 1 = 3"):
        engine_command(LaunchRequest("vllm", "T", "D", steps=2, synthetic=parse_synthetic("3.5")))
    with pytest.raises(DraftlabError, match="needs --drafter"):
        engine_command(LaunchRequest("sglang", "T", synthetic=parse_synthetic("2")))


# --- SGLang, as its environment is read ------------------------------------------------------------


def sglang_forced(env: dict[str, str], steps: int) -> tuple[float, float] | None:
    """(clamped AL, mean AL of the match-expected draw) as spec_utils reads the environment; None when off."""
    acc_len = float(env.get("SGLANG_SIMULATE_ACC_LEN", "-1"))  # EnvFloat(-1)
    if not acc_len > 0:
        return None
    method = env.get("SGLANG_SIMULATE_ACC_METHOD", "match-expected")
    assert method in ("match-expected", "multinomial")
    mode = env.get("SGLANG_SIMULATE_ACC_TOKEN_MODE", "fixed")
    if mode not in ("fixed", "real-draft-token"):
        raise ValueError(mode)
    length = min(max(acc_len, 1.0), steps + 1.0)
    low = math.floor(length)  # match-expected: floor or floor + 1, weighted so the mean is the length
    p_high = length - low
    return length, low * (1 - p_high) + (low + 1) * p_high if method == "match-expected" else float("nan")


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_sglang_gets_the_accept_length_with_the_bonus(version):
    cmd = engine_command(LaunchRequest("sglang", "T", "D", steps=3, topk=1, num_draft_tokens=4, synthetic=PROFILE,
                                       engine_version=version))
    want = 1 + sum(PROFILE.marginals[:3])
    length, mean = sglang_forced(cmd.env, 3)
    assert length == pytest.approx(want, abs=1e-6) and mean == pytest.approx(want, abs=1e-6)
    assert cmd.env["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected"  # 0.5.10 defaults to multinomial
    real = version_key(version) >= version_key("0.5.15")
    assert cmd.env.get("SGLANG_SIMULATE_ACC_TOKEN_MODE") == ("real-draft-token" if real else None)
    assert any("token id 100" in n for n in cmd.notes) != real


def test_sglang_tree_keeps_the_fixed_token_mode():
    """real-draft-token raises for topk > 1 in SGLang, so a tree is forced in the fixed mode (and says so)."""
    cmd = engine_command(LaunchRequest("sglang", "T", "D", steps=3, topk=4, num_draft_tokens=8,
                                       synthetic=parse_synthetic("2.5")))
    assert sglang_forced(cmd.env, 3)[0] == 2.5 and "SGLANG_SIMULATE_ACC_TOKEN_MODE" not in cmd.env
    assert any("real-draft-token mode needs topk 1" in n for n in cmd.notes)


# --- TensorRT-LLM, as its environment is read ---------------------------------------------------


@pytest.mark.parametrize("al", [2.6, 3.0])
def test_trtllm_gets_accepted_drafts_al_minus_one(al):
    settings = synthetic_settings("trtllm", parse_synthetic(str(al)), steps=3)
    value = settings.env["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"]
    forced = float(value)  # one-model path: integer part always, one more with probability frac, per request
    whole, frac = int(forced), forced - int(forced)
    assert 1 + whole + frac == pytest.approx(al) and min(forced, 3) == forced
    if frac:  # the two-model path's int() rejects it, which turns forcing off: said in the notes
        with pytest.raises(ValueError):
            int(value)
        assert any("two-model" in n for n in settings.notes)
    else:
        assert int(value) == al - 1
    with pytest.raises(DraftlabError, match="knows no TensorRT-LLM releases"):
        synthetic_settings("trtllm", parse_synthetic("2"), steps=3, version="1.3.0")


# --- draftlab's reference server, CLI ----------------------------------------------------------------


def test_reference_server_gets_the_option_and_a_profile_by_absolute_path():
    cmd = engine_command(LaunchRequest("draftlab", "T", "D", steps=3, topk=1, num_draft_tokens=4, synthetic=PROFILE))
    at = cmd.argv.index("--synthetic-acceptance")
    assert cmd.argv[at + 1] == str(Path("p.json").resolve())  # the server may run elsewhere
    assert cmd.argv[at - 2:at] == ["--num-draft-tokens", "4"]
    with pytest.raises(DraftlabError, match="along a chain"):
        engine_command(LaunchRequest("draftlab", "T", "D", steps=3, topk=2, num_draft_tokens=4, synthetic=PROFILE))


def test_launch_cli_one_line_refusals(capsys, tmp_path):
    code = main(["launch", "vllm", "--target", "T", "--drafter", "D", "--steps", "3", "--skip-check", "--dry-run",
                 "--synthetic-acceptance", "2.5", "--engine-version", "0.19.0"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "use --engine-version 0.20.0 or later" in err
    code = main(["launch", "vllm", "--target", "T", "--drafter", "D", "--steps", "3", "--skip-check", "--dry-run",
                 "--synthetic-acceptance", str(tmp_path / "missing.json")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "missing.json" in err
