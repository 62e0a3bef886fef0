"""A plan held against a measurement with the same settings (the demo does) is headlined by whether they
agree: a prediction more than 15% off what was measured is said to be off, not shown as the verdict."""

from __future__ import annotations

import json

from draftlab.report.html.report import make_report


def _plan_with(toy_results, tmp_path, checks):
    doc = json.loads(toy_results["plan"].read_text())
    doc["measured_checks"] = checks
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    result = make_report([path], tmp_path / "r.html")
    return result.sections[0]["heading"], (tmp_path / "r.html").read_text()


def test_a_disagreeing_measurement_replaces_the_predicted_headline(toy_results, tmp_path):
    from draftlab.demo import held_against

    check = held_against("the served A/B at concurrency 1, speedup", 1.01, 0.53)
    assert check["agrees"] is False
    heading, page = _plan_with(toy_results, tmp_path, [check])
    assert heading.startswith("The plan's prediction disagrees with what was measured")
    assert "pays off" not in heading and "1.01" in heading and "0.53" in heading
    assert "they disagree by 91%" in page


def test_an_agreeing_measurement_keeps_the_verdict(toy_results, tmp_path):
    from draftlab.demo import held_against

    check = held_against("draftlab generate, 3/1/4 tok/s", 300.0, 280.0)
    assert check["agrees"] is True
    heading, page = _plan_with(toy_results, tmp_path, [check])
    assert "disagrees" not in heading and "they agree." in page
