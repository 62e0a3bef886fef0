"""draftlab report: real toy-pair outputs become one self-contained page whose headings state the
findings; Chromium loads it without a network request and draws every section and figure."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib.image
import pytest
from chromium import load

from draftlab.cli import main
from draftlab.report.html.report import make_report

ORDER = ["inspect", "check", "vocab-compare", "probe", "drift", "plan", "bench", "bench-compare"]
KINDS = ["inspect", "check", "vocab-compare", "probe", "drift", "plan", "bench", "bench-compare"]


@pytest.fixture(scope="module")
def page(toy_results, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "report.html"
    result = make_report([toy_results[k] for k in ORDER], out, "toy pair")
    return out, result


def doc(toy_results, name: str) -> dict:
    return json.loads(toy_results[name].read_text())


def test_each_result_is_recognised_and_its_heading_states_the_finding(page, toy_results):
    _, result = page
    assert [s["kind"] for s in result.sections] == KINDS
    heading = {s["kind"]: s["heading"] for s in result.sections}
    probe = doc(toy_results, "probe")
    assert f"3/1/4 accepts {probe['mean_accept_length']:.2f} tokens per cycle" in heading["probe"]
    drift = doc(toy_results, "drift")
    worst = min(drift["layers"], key=lambda layer: layer["cosine"])
    assert f"cosine {worst['cosine']:.3f} at layer {worst['layer']}" in heading["drift"]
    assert f"{drift['accept_length_a']:.2f} → {drift['accept_length_b']:.2f}" in heading["drift"]
    best = doc(toy_results, "plan")["best"]["1"]
    label = f"{best['steps']}/{best['topk']}/{best['num_draft_tokens']}"
    expected = (f"{label} pays off at batch 1: {best['speedup']:.2f}x" if best["speedup"] > 1
                else "Nothing pays off at batch 1")
    assert heading["plan"] == expected
    rows = [r for r in doc(toy_results, "bench-compare")["rows"] if r["label"] == "eagle3"]
    lo, hi = sorted(r["speedup"] for r in rows)
    span = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}x to {hi:.2f}x"  # the toy's timings may agree
    assert heading["bench-compare"] == f"eagle3 against baseline: {span} output throughput"
    assert heading["check"] == "drafter loads cleanly in SGLang 0.5.23"  # the release whose rules applied
    assert [s["figures"] for s in result.sections] == [0, 0, 0, 2, 1, 2, 0, 1]  # probe: + accept by context


def test_each_section_names_the_command_and_versions_that_made_it(page, toy_results):
    html = page[0].read_text()
    probe = doc(toy_results, "probe")
    assert probe["provenance"]["command"].startswith("draftlab probe --target ")
    assert probe["provenance"]["command"].endswith("--max-new-tokens 32 --json")
    assert probe["provenance"]["torch"] and probe["provenance"]["draftlab"]
    for name in ORDER:
        command = doc(toy_results, name)["provenance"]["command"]
        assert f"<code>{command.replace('&', '&amp;')}</code>" in html, name
    assert html.count("torch ") >= len(ORDER)


def test_page_is_self_contained(page):
    html = page[0].read_text()
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"<(script|link|img|iframe|object)\b", html)
    assert not re.search(r"\b(src|href)=\"(?!#)", html)  # only in-page links
    assert not re.search(r"url\((?!#)", html) and "@import" not in html  # SVG clip paths point inside the page
    assert html.count("<svg") == sum(s["figures"] for s in page[1].sections)


def test_chromium_loads_it_offline_and_draws_every_section(page, tmp_path):
    out, result = page
    loaded = load(out, tmp_path, height=9000)
    assert loaded.page_requests == []
    for i, section in enumerate(result.sections, 1):
        assert re.search(rf'<section class="result" id="r{i}" data-kind="{section["kind"]}">', loaded.dom)
    assert len(re.findall(r"<figure data-figure=", loaded.dom)) == 6
    assert loaded.dom.count("<svg") == 6
    pixels = matplotlib.image.imread(loaded.screenshot)[..., :3]
    ink = (pixels.mean(axis=-1) < 0.9).mean()  # share of pixels that are not (near) white
    assert ink > 0.02 and pixels.std() > 0.05


def test_the_network_check_sees_a_page_that_fetches(tmp_path):
    """The harness's own control: a page with an external image is caught asking for it."""
    leaky = tmp_path / "leaky.html"
    leaky.write_text('<!doctype html><html><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    assert load(leaky, tmp_path, height=200).page_requests == ["http://127.0.0.1:9/x.png"]


def test_plans_saved_probes_are_one_section_per_config(tmp_path, toy_results):
    probes = json.loads(toy_results["save-probe"].read_text())
    result = make_report([toy_results["save-probe"]], tmp_path / "r.html")
    assert [s["kind"] for s in result.sections] == ["probe"] * 3
    for section, probe in zip(result.sections, probes):
        cfg = probe["config"]
        label = f"{cfg['steps']}/{cfg['topk']}/{cfg['num_draft_tokens']}"
        assert section["heading"].startswith(f"{label} accepts {probe['mean_accept_length']:.2f} tokens per cycle")


def test_train_log_and_sweep_render(tmp_path, toy_results):
    log = tmp_path / "train_log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 3.0 / s, "accuracy_by_step": [0.5, 0.4], "tokens_per_second":
                                       1e3, **({"eval": {"accept_length": 1.5 + s / 10}} if s % 2 == 0 else {})}) + "\n"
                           for s in range(1, 5)))
    sweep = tmp_path / "sweep.json"
    rows = [{"batch": b, "steps": s, "topk": 1, "num_draft_tokens": s + 1, "config": c, "output_throughput": tp,
             "speedup": sp, "accept_length": al, "ttft_p50_ms": 10.0, "tpot_p50_ms": 5.0, "completed": 4, "failed": 0,
             "error": None}
            for b, s, c, tp, sp, al in [(1, 0, "baseline", 80.0, 1.0, None), (1, 3, "3/1/4", 120.0, 1.5, 2.9),
                                       (8, 0, "baseline", 400.0, 1.0, None), (8, 3, "3/1/4", 360.0, 0.9, 2.9)]]
    sweep.write_text(json.dumps({"engine": "sglang", "target": "T", "drafter": "D", "api": "openai-chat",
                                 "max_running_requests": 8, "out_dir": str(tmp_path), "rows": rows, "complete": True}))
    result = make_report([log, sweep], tmp_path / "r.html")
    assert [s["kind"] for s in result.sections] == ["train", "sweep"]
    assert result.sections[0]["heading"] == "Training: 4 steps; eval accept length 1.70 at step 2 → 1.90 at step 4"
    assert result.sections[1]["heading"] == "3/1/4 is best: 1.50x at batch 1 on sglang"
    assert result.sections[0]["figures"] == result.sections[1]["figures"] == 1


@pytest.mark.parametrize("content, says", [
    ('{"hello": 1}', "not a draftlab result that report knows"),
    ("[1, 2, 3]", "not a draftlab result that report knows"),
    ("{not json", "not valid JSON"),
    ('{"config": {"responses": "given"}, "acceptance_by_step": [], "accept_length_histogram": [], "results": []}',
     "looks like a probe result but cannot be read"),
])
def test_a_result_it_does_not_know_is_one_line_and_exit_2(tmp_path, capsys, content, says):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code = main(["report", str(bad), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err and str(bad) in err
    assert not (tmp_path / "r.html").exists() and list(tmp_path.iterdir()) == [bad]


def test_it_never_writes_over_an_input(tmp_path, capsys, toy_results):
    copy = tmp_path / "probe.json"
    copy.write_text(toy_results["probe"].read_text())
    before = copy.read_bytes()
    assert main(["report", str(copy), "-o", str(copy)]) == 2
    assert "is a result file itself" in capsys.readouterr().err and copy.read_bytes() == before
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "result file not found" in capsys.readouterr().err


def test_cli_json_lists_the_sections(tmp_path, capsys, toy_results):
    out = tmp_path / "one.html"
    assert main(["report", str(toy_results["probe"]), str(toy_results["drift"]), "-o", str(out), "--title", "T",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["out"] == str(out) and [s["kind"] for s in doc["sections"]] == ["probe", "drift"]
    assert "<title>T</title>" in Path(out).read_text()
