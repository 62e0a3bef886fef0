from __future__ import annotations

import io

from rich.console import Console

from draftlab.demo import TRAINED_AUX, run_demo


def test_demo_finds_the_three_reuse_defects_and_fixes_them(tmp_path, monkeypatch):
    import torch

    changed = []  # every section runs with the threads the command set once: measured and predicted alike
    monkeypatch.setattr(torch, "set_num_threads", lambda n: changed.append(n))
    out = io.StringIO()
    demo = run_demo(Console(file=out, width=100), tmp_path)
    assert changed == []
    codes = {f.code for f in demo.check.findings}
    assert {"context-too-short", "aux-convention", "weight-names"} <= codes and not demo.check.ok
    assert demo.fix.after.ok and demo.fix.after.findings == []
    assert demo.fix.after.aux_layers == TRAINED_AUX
    text = out.getvalue()
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in text and "renamed layers.0." in text
    assert "the code-built vocabulary can propose only" in text
    assert demo.probe.mean_accept_length > 1.5 and demo.probe.target_disagreement == 0.0
    assert demo.drift.accept_length_b < demo.drift.accept_length_a
    assert "next-token agreement" in text and "drafter accept length" in text
    assert demo.finetuned.vocab == "kept" and demo.finetuned.steps == 30
    assert demo.refit.mean_accept_length > demo.drift.accept_length_b + 0.3  # fine-tuning recovers acceptance
    assert "after fine-tuning" in text
    assert demo.generated.mean_accept_length > 1.2 and "mean accept length" in text
    assert [r.output_ids for r in demo.generated.results] == [r.output_ids for r in demo.generated_alone.results]
    spec = demo.benched["EAGLE-3 3/1/4"]
    assert spec.failed == 0 and spec.accept_length > 1.5 and demo.benched["baseline"].accept_length is None
    plan = demo.plan.plan
    assert [r.label for r in plan.configs] == ["1/1/2", "3/1/4", "5/1/6", "3/4/8"]
    chain = next(r for r in plan.configs if r.label == "3/1/4")
    assert chain.accept_length == demo.probe.mean_accept_length  # same prompts, config and length as the probe
    # the measured overhead is a difference of timings, clamped at 0: a loaded machine can make it 0
    assert demo.plan.profile.overhead[0].batch_size == 1 and chain.overhead_ms >= 0
    assert demo.plan_checked.mean_accept_length == chain.accept_length  # generate agrees with the probe
    assert "Predicted throughput per speculation config" in text and "draftlab generate measures" in " ".join(text.split())
    assert [c["what"].split(",")[0] for c in demo.plan_checks] == ["draftlab generate", "the served A/B at concurrency 1"]
    flat = " ".join(text.split())
    for check in demo.plan_checks:  # each check is stated in words: agreeing, or disagreeing and by how much
        assert ("they agree within 15%" if check["agrees"] else "they DISAGREE by") in flat
    if not all(c["agrees"] for c in demo.plan_checks):
        assert "The prediction and the measurement disagree here" in flat
    assert "At batch 1, " in text or "Speculation loses at batch 1" in text  # the verdicts
    page = demo.report.read_text()  # the whole story on one page, one section per result kept
    assert [name for name, _ in demo.results] == ["check", "fix", "vocab-compare", "generate", "probe", "drift",
                                                  "train", "probe-finetuned", "bench-compare", "plan"]
    assert page.count('<section class="result"') == len(demo.results) and str(demo.report) in " ".join(text.split())
    assert page.count("<figure") >= 7 and "draftlab train --target toy-target-v2 --init toy-drafter" in page
    assessed = demo.assessed  # the demo ends with the decision in one command, on the same pair and prompts
    by_label = {f"{r.config['steps']}/{r.config['topk']}/{r.config['num_draft_tokens']}": r.mean_accept_length
                for r in assessed.probes}
    old = {f"{r.config['steps']}/{r.config['topk']}/{r.config['num_draft_tokens']}": r.mean_accept_length
           for r in assessed.old_probes}
    assert (old["3/1/4"], by_label["3/1/4"]) == (demo.drift.accept_length_a, demo.drift.accept_length_b)
    assert assessed.verdict.headline in text.replace("\n", " ") or assessed.verdict.headline[:40] in text
    # the last step agrees with the drift and fine-tune steps: the drafter is to be fine-tuned, with both accept
    # lengths of the config that would serve; model-free methods are never the headline
    v = assessed.verdict
    drift = next(r for r in v.reasons if r.rule == "drift" and "accept_length_old" in r.figures).figures
    assert v.kind == "fine-tune" and drift["gain_lost"] >= 0.2
    assert f"{drift['accept_length']:.2f}" in v.headline and f"{drift['accept_length_old']:.2f}" in v.headline
    assert (old[drift["config"]], by_label[drift["config"]]) == (drift["accept_length_old"], drift["accept_length"])
    assert not any(m in v.headline for m in ("ngram", "suffix")) and "The same answer as the drift" in flat
    assert (tmp_path / "assess" / "report.html").read_text().count(f"<h1>{assessed.verdict.headline}</h1>") == 1


def test_an_interrupted_demo_leaves_no_work_folder(tmp_path, monkeypatch):
    import tempfile

    import pytest

    from draftlab import demo

    def interrupt(d):
        assert d.target.exists()  # the first section wrote into the work folder
        raise KeyboardInterrupt

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(demo, "SECTIONS", [demo.SECTIONS[0], ("interrupted", interrupt)])
    with pytest.raises(KeyboardInterrupt):
        run_demo(Console(file=io.StringIO()))
    assert list(tmp_path.iterdir()) == []
