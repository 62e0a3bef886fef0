"""``draftlab demo``: the main job end to end on a small synthetic pair, offline.

The story: a drafter trained for version 1 of a target is reused on version 2 (same architecture,
longer context). It was shipped for vLLM, so its aux ids are in vLLM's convention and its weights
are named ``layers.0.*``; served by SGLang it would load without a word and accept almost nothing.
The demo inspects both, checks the pair, writes the fixed drafter and checks it again.

It is a sequence of sections (:data:`SECTIONS`), each a function of the shared :class:`Demo`
state, so later capabilities (generate, probe, bench, plan) add a section at the end.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import transformers
from rich.console import Console
from rich.rule import Rule

from draftlab.checkpoint.configs import TargetConfig
from draftlab.checkpoint.synth import (
    specforge_drafter_config,
    write_drafter,
    write_target,
)
from draftlab.compat import CheckResult, FixResult, check_pair, fix_pair
from draftlab.compat.summary import InspectResult, inspect_checkpoint
from draftlab.cost.crosscheck import check_sentence, held_against
from draftlab.decode.generate import GenerateResult, generate
from draftlab.engines import written_aux_ids
from draftlab.toy import ToyPair

ENGINE = "sglang"
NUM_LAYERS = 8
TRAINED_AUX = [1, 3, 5]  # canonical: the drafter was trained on the outputs of these target layers


def target_v2_config() -> dict[str, Any]:
    """A tiny Llama-shaped target (version 2: 8192-token context)."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": NUM_LAYERS, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu", "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "rope_scaling": None, "bos_token_id": 1,
        "eos_token_id": 2, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }


def reused_drafter_config(target: TargetConfig) -> dict[str, Any]:
    """The drafter of version 1, as shipped for vLLM: 2048 context, vLLM aux ids and class name."""
    return specforge_drafter_config(
        target, draft_vocab_size=128, max_position_embeddings=2048, architectures=["Eagle3LlamaForCausalLM"],
        eagle_aux_hidden_state_layer_ids=written_aux_ids("vllm", TRAINED_AUX))


@dataclass
class Demo:
    """What the sections share: where things are and what each step returned."""

    console: Console
    workdir: Path
    target: Path = Path()
    drafter: Path = Path()
    fixed: Path = Path()
    inspected: dict[str, InspectResult] = field(default_factory=dict)
    check: CheckResult | None = None
    fix: FixResult | None = None
    toy: ToyPair | None = None  # the trained toy pair, for the sections that run models
    probe: Any = None  # ProbeResult of the toy drafter on its own target
    drift: Any = None  # DriftResult of a changed target version against the original
    finetuned: Any = None  # TrainResult of fine-tuning the toy drafter on the changed target
    refit: Any = None  # ProbeResult of the fine-tuned drafter on the changed target
    benched: dict[str, Any] = field(default_factory=dict)  # BenchResult per arm of the serving A/B
    generated: GenerateResult | None = None
    generated_alone: GenerateResult | None = None
    plan: Any = None  # AutoPlan of the toy pair on this machine (passes only)
    plan_checked: Any = None  # generate's measured run of 3/1/4, against the plan's prediction
    plan_checks: list[dict[str, Any]] = field(default_factory=list)  # held_against results for the plan
    results: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, JSON document) for the report
    report: Path | None = None
    assessed: Any = None  # AssessResult: the whole decision for the drafter on version 2, in one command

    def keep(self, name: str, result: Any, command: str) -> None:
        """Keep ``result`` for the report, as the JSON document ``command`` would have printed."""
        from draftlab.documents import document

        doc = document(result)
        doc["provenance"]["command"] = command
        self.results.append((name, doc))


def build(demo: Demo) -> None:
    demo.target = write_target(demo.workdir / "target-v2", target_v2_config())
    target = TargetConfig.from_dict(target_v2_config())
    demo.drafter = write_drafter(demo.workdir / "drafter-for-v1", reused_drafter_config(target), layer_prefix="layers.0.")
    demo.console.print(f"Built a {NUM_LAYERS}-layer Llama-shaped target and an EAGLE-3 drafter in {demo.workdir}\n"
                       "The drafter was trained for the previous target version and shipped for vLLM:\n"
                       "  - its context is 2048 tokens, the new target serves 8192;\n"
                       f"  - its aux layer ids {written_aux_ids('vllm', TRAINED_AUX)} are written in vLLM's convention;\n"
                       "  - its weights are named layers.0.* (vLLM), and its class Eagle3LlamaForCausalLM.\n"
                       "We want to serve it with SGLang.")


def inspect_both(demo: Demo) -> None:
    from draftlab.report.compat import render_inspect

    for key, path in (("target", demo.target), ("drafter", demo.drafter)):
        demo.inspected[key] = inspect_checkpoint(path, engine=ENGINE, num_target_layers=NUM_LAYERS)
        render_inspect(demo.inspected[key], demo.console)


def check(demo: Demo) -> None:
    from draftlab.report.compat import render_check

    demo.check = check_pair(demo.drafter, demo.target, engine=ENGINE)
    command = f"draftlab check {demo.drafter.name} --target {demo.target.name} --engine {ENGINE}"
    demo.console.print(f"$ {command}")
    render_check(demo.check, demo.console)
    demo.keep("check", demo.check, command)


def fix(demo: Demo) -> None:
    from draftlab.report.compat import render_fix

    demo.fixed = demo.workdir / "drafter-fixed"
    command = f"draftlab check {demo.drafter.name} --target {demo.target.name} --fix {demo.fixed.name}"
    demo.console.print(f"$ {command}")
    demo.fix = fix_pair(demo.drafter, demo.target, demo.fixed, engine=ENGINE)
    render_fix(demo.fix, demo.console)
    demo.keep("fix", demo.fix, command)
    captured = demo.fix.after.aux_layers
    demo.console.print(f"SGLang now captures layers {captured}, the ones the drafter was trained on "
                       f"({'yes' if captured == TRAINED_AUX else 'NO'}); the original folder is unchanged.")


DEMO_PROMPTS = ["def __init__(self, name", "import os\nimport sys\n\n", "    for key, value in self."]


def speculative_decoding(demo: Demo) -> None:
    """Real speculative decoding on the trained toy pair: accept lengths, and the same tokens."""
    from draftlab.report.generate import render_generate
    from draftlab.toy import cached_toy_pair

    pair = cached_toy_pair()
    prompts = demo.workdir / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in DEMO_PROMPTS))
    demo.console.print("The pair above has random weights and would accept nothing. draftlab's toy pair (a "
                       "byte-level Llama and an EAGLE-3 drafter trained for seconds on Python source, in "
                       f"{pair.target_dir.parent}) shows real speculative decoding:")
    command = ("draftlab generate --target target --drafter drafter --prompts prompts.jsonl "
               "--steps 3 --topk 1 --num-draft-tokens 4 --max-new-tokens 48")
    demo.console.print(f"$ {command}", soft_wrap=True)
    demo.generated = generate(pair.target_dir, pair.drafter_dir, prompts, steps=3, topk=1, num_draft_tokens=4,
                              max_new_tokens=48)  # the newest SGLang (ENGINE)
    render_generate(demo.generated, demo.console)
    demo.keep("generate", demo.generated, command)
    demo.generated_alone = generate(pair.target_dir, None, prompts, no_draft=True, max_new_tokens=48)
    same = [r.output_ids for r in demo.generated.results] == [r.output_ids for r in demo.generated_alone.results]
    demo.console.print(f"Decoded by the target alone (--no-draft): {'the same' if same else 'DIFFERENT'} tokens, "
                       f"one per target pass instead of {demo.generated.mean_accept_length:.2f}.")


def write_two_datasets(workdir: Path) -> tuple[Path, Path]:
    """Two offline data distributions: Python source as plain text, and English prose (the
    stdlib's own pydoc topics) as chat conversations whose assistant turns get counted."""
    import json
    import pydoc_data.topics

    from draftlab.toy.corpus import stdlib_text

    code = workdir / "code.jsonl"
    text = stdlib_text("heldout", 200_000).decode("utf-8", "replace")
    code.write_text("".join(json.dumps({"text": chunk}) + "\n" for chunk in text.split("\n\n") if chunk))
    prose = workdir / "prose.jsonl"
    prose.write_text("".join(
        json.dumps({"messages": [{"role": "user", "content": f"Explain {name}."},
                                 {"role": "assistant", "content": body}]}) + "\n"
        for name, body in sorted(pydoc_data.topics.topics.items())))
    return code, prose


def vocab(demo: Demo) -> None:
    """A draft vocabulary built on one distribution, measured on another."""
    from draftlab.toy import cached_toy_pair
    from draftlab.vocab.build import build_mapping
    from draftlab.vocab.compare import compare_mappings
    from draftlab.vocab.count import count_tokens

    demo.toy = cached_toy_pair()
    tokenizer = demo.toy.target_dir
    code, prose = write_two_datasets(demo.workdir)
    counts_code = count_tokens([code], tokenizer, workers=1)
    counts_prose = count_tokens([prose], tokenizer, workers=1)
    size = 32
    on_code = build_mapping(counts_code, size)
    on_prose = build_mapping(counts_prose, size)
    result = compare_mappings(on_code, on_prose, counts_prose)
    demo.keep("vocab-compare", result, f"draftlab vocab compare code-{size}/ prose-{size}/ --counts prose-counts.json")
    demo.console.print(
        f"$ draftlab vocab count --data {code.name} / {prose.name} --tokenizer toy-target; vocab build --size {size}\n"
        f"Two {size}-token draft vocabularies over the toy target's {on_code.vocab_size}-token byte vocabulary, "
        f"one built on Python source ({counts_code.num_tokens:,} tokens), one on English prose "
        f"({counts_prose.num_tokens:,} assistant tokens).\n"
        f"They share {result.shared_tokens} of {size} tokens (Jaccard {result.jaccard:.2f}); "
        f"{result.differing_d2t_entries} of {size} d2t entries differ.\n"
        f"On prose, the code-built vocabulary can propose only [bold]{result.coverage_a:.1%}[/] of the tokens "
        f"(the prose-built one {result.coverage_b:.1%}): a drafter can never draft the rest, "
        "whatever it learned.")


def _prompts_file(workdir: Path) -> Path:
    path = workdir / "probe-prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": text}) + "\n" for text in DEMO_PROMPTS))
    return path


def probe_section(demo: Demo) -> None:
    """The exact greedy accept length from one target pass, chain and tree."""
    from draftlab.probe.probe import probe
    from draftlab.report.probe import render_probe
    from draftlab.toy import cached_toy_pair

    demo.toy = demo.toy or cached_toy_pair()
    prompts = _prompts_file(demo.workdir)
    command = (f"draftlab probe --target toy-target --drafter toy-drafter --prompts {prompts.name} "
               "--steps 3 --topk 1 --num-draft-tokens 4 --max-new-tokens 64")
    demo.console.print(f"$ {command}")
    demo.probe = probe(demo.toy.target_dir, demo.toy.drafter_dir, prompts, steps=3, topk=1, num_draft_tokens=4,
                       max_new_tokens=64)
    render_probe(demo.probe, demo.console)
    demo.keep("probe", demo.probe, command)
    demo.console.print("These are the accept lengths greedy speculative decoding (draftlab generate, SGLang) "
                       "would report on these prompts, from one target pass instead of a decode loop.")


def perturbed_copy(target_dir: Path, dest: Path, scale: float, seed: int = 0) -> Path:
    """A "new version" of a target: its layer-1+ matrices with relative Gaussian noise of size ``scale``."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(target_dir, dest)
    weights = load_file(str(dest / "model.safetensors"))
    gen = torch.Generator().manual_seed(seed)
    for name, w in weights.items():
        if w.dim() == 2 and ".layers." in name and ".layers.0." not in name:
            weights[name] = w + scale * w.std() * torch.randn(w.shape, generator=gen)
    save_file(weights, str(dest / "model.safetensors"))
    return dest


def drift_section(demo: Demo) -> None:
    """A changed target version: how far it moved, and what that costs the drafter."""
    from draftlab.probe.drift import drift
    from draftlab.report.drift import render_drift
    from draftlab.toy import cached_toy_pair

    demo.toy = demo.toy or cached_toy_pair()
    v2 = perturbed_copy(demo.toy.target_dir, demo.workdir / "toy-target-v2", scale=0.5)
    prompts = _prompts_file(demo.workdir)
    command = (f"draftlab drift --target-a toy-target --target-b {v2.name} --prompts {prompts.name} "
               "--drafter toy-drafter --steps 3 --topk 1 --num-draft-tokens 4 --max-new-tokens 64")
    demo.console.print(f"$ {command}")
    demo.drift = drift(demo.toy.target_dir, v2, prompts, drafter=demo.toy.drafter_dir, steps=3, topk=1,
                       num_draft_tokens=4, max_new_tokens=64)
    render_drift(demo.drift, demo.console)
    demo.keep("drift", demo.drift, command)
    demo.console.print("The drafter was trained on version 1's hidden states; version 2's have moved, and the "
                       "accept length falls with them: retrain (or fine-tune) the drafter on version 2.")


def finetune_section(demo: Demo) -> None:
    """Act on the drift: fine-tune the old drafter on version 2 and probe it again."""
    import json

    from draftlab.probe.probe import probe
    from draftlab.toy.corpus import stdlib_text
    from draftlab.train.trainer import TrainOptions, train

    v2 = demo.workdir / "toy-target-v2"
    data = demo.workdir / "v2-train.jsonl"
    text = stdlib_text("train", 80_000).decode("utf-8", "replace")
    data.write_text("".join(json.dumps({"text": text[i:i + 256]}) + "\n" for i in range(0, len(text), 256)))
    out = demo.workdir / "toy-drafter-v2"
    prompts = _prompts_file(demo.workdir)
    command = (f"draftlab train --target {v2.name} --init toy-drafter --data {data.name} --out {out.name} "
               "--max-steps 30 --batch-size 8 --seq-len 256 --ttt-length 3 --lr 1e-3 --warmup 3 "
               f"--eval-prompts {prompts.name} --eval-every 10 --steps 3 --topk 1 --num-draft-tokens 4")
    demo.console.print(f"$ {command}", soft_wrap=True)
    demo.finetuned = train(TrainOptions(target=v2, data=data, out=out, init=demo.toy.drafter_dir, max_steps=30,
                                        batch_size=8, seq_len=256, ttt_length=3, lr=1e-3, warmup=3,
                                        eval_prompts=prompts, eval_every=10, steps=3, topk=1, num_draft_tokens=4))
    from draftlab.report.train import train_document

    demo.keep("train", train_document(demo.finetuned), command)
    demo.refit = probe(v2, out, prompts, steps=3, topk=1, num_draft_tokens=4, max_new_tokens=64)
    demo.keep("probe-finetuned", demo.refit, f"draftlab probe --target {v2.name} --drafter {out.name} --prompts "
              f"{prompts.name} --steps 3 --topk 1 --num-draft-tokens 4 --max-new-tokens 64")
    f = demo.finetuned
    demo.console.print(f"{f.steps} steps over {f.tokens} tokens ({f.tokens_per_second:.0f} tok/s), vocabulary "
                       f"{f.vocab} bit for bit; teacher-forced accuracy by TTT step "
                       f"{' / '.join(f'{a:.2f}' for a in f.accuracy_by_step)}.")
    demo.console.print(f"Exact accept length on version 2 (3/1/4): [bold]{demo.drift.accept_length_b:.2f}[/] before, "
                       f"[bold]{demo.refit.mean_accept_length:.2f}[/] after fine-tuning "
                       f"(version 1 with its own drafter: {demo.drift.accept_length_a:.2f}). {out.name} is a "
                       "SpecForge-layout folder SGLang and vLLM load.")


def serve_and_bench(demo: Demo) -> None:
    """The whole serving path on a laptop: serve the toy pair, bench it with and without the drafter."""
    import threading

    from rich.table import Table

    from draftlab.bench.client import BenchConfig
    from draftlab.bench.compare import compare_results
    from draftlab.bench.run import run_bench
    from draftlab.bench.workload import Prompt
    from draftlab.documents import document
    from draftlab.fsutil import write_json_atomic
    from draftlab.serve.http import make_server
    from draftlab.serve.load import load_context
    from draftlab.toy import cached_toy_pair

    demo.toy = demo.toy or cached_toy_pair()
    prompts = [Prompt(input_ids=list(text.encode())) for text in DEMO_PROMPTS * 2]
    demo.console.print("$ draftlab serve --target toy-target [--drafter toy-drafter --steps 3 --topk 1 "
                       "--num-draft-tokens 4] & draftlab bench --api sglang --concurrency 1 --max-tokens 48",
                       soft_wrap=True)
    table = Table("arm", "output tok/s", "TPOT p50 ms", "accept length")
    files: list[Path] = []
    for arm, drafter in (("baseline", None), ("EAGLE-3 3/1/4", demo.toy.drafter_dir)):
        flags = {} if drafter is None else {"steps": 3, "topk": 1, "num_draft_tokens": 4}
        ctx = load_context(demo.toy.target_dir, drafter, **flags)
        server = make_server(ctx, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            result = run_bench(BenchConfig(base_url=url, api="sglang", max_tokens=48, warmup=1, concurrency=1,
                                           temperature=0.0, label=arm), prompts)
        finally:
            server.shutdown()
            ctx.engine.close()
        demo.benched[arm] = result
        files.append(demo.workdir / f"bench-{'baseline' if drafter is None else 'eagle3'}.json")
        write_json_atomic(files[-1], document(result))
        table.add_row(arm, f"{result.output_throughput:.0f}", f"{result.tpot_ms['p50']:.2f}",
                      "-" if result.accept_length is None else f"{result.accept_length:.2f}")
    demo.console.print(table)
    demo.keep("bench-compare", compare_results(files), "draftlab bench compare " + " ".join(f.name for f in files))
    base, spec = demo.benched["baseline"], demo.benched["EAGLE-3 3/1/4"]
    speedup = spec.output_throughput / base.output_throughput
    demo.console.print(f"Speedup {speedup:.2f}x on this CPU at accept length {spec.accept_length:.2f}: on a "
                       "4-layer toy a cycle's fixed costs (the loop's Python work, drafter passes as large as the "
                       "target's) eat most of what the accepted tokens save, so the result swings with the "
                       "machine's load. `draftlab plan` says when it pays off, and why.")


PLAN_GRID = "1/1/2,3/1/4,5/1/6,3/4/8"


def plan_section(demo: Demo) -> None:
    """Will speculation pay off for the toy pair on this CPU? Probe, profile (passes and the decoder's
    own per-cycle work), predict; then hold the prediction against what generate measures."""
    from draftlab.cost.auto_plan import auto_plan
    from draftlab.cost.model import SpecConfig
    from draftlab.documents import to_jsonable
    from draftlab.report.plan import render_plan
    from draftlab.toy import cached_toy_pair

    demo.toy = demo.toy or cached_toy_pair()
    prompts = _prompts_file(demo.workdir)
    command = (f"draftlab plan --target toy-target --drafter toy-drafter --prompts {prompts.name} "
               f"--grid {PLAN_GRID} --device cpu --max-new-tokens 64 --context 64 --repeats 5")
    demo.console.print(f"$ {command}", soft_wrap=True)
    # the same torch threads as every section before (set once by the command): predicted and measured
    # numbers come from the same settings
    demo.plan = auto_plan(demo.toy.target_dir, demo.toy.drafter_dir, prompts,
                          grid=[SpecConfig.parse(c) for c in PLAN_GRID.split(",")], max_new_tokens=64,
                          context_tokens=64, device="cpu", warmup=2, repeats=5, progress=False)
    demo.plan_checked = generate(demo.toy.target_dir, demo.toy.drafter_dir, prompts, steps=3, topk=1,
                                 num_draft_tokens=4, max_new_tokens=64)  # the newest SGLang
    chain = next(r for r in demo.plan.plan.configs if r.label == "3/1/4" and r.batch_size == 1)
    checks = [held_against("draftlab generate, 3/1/4 tok/s", chain.tokens_per_second,
                           demo.plan_checked.tokens_per_second)]
    if demo.benched:
        base, spec = demo.benched["baseline"], demo.benched["EAGLE-3 3/1/4"]
        if base.output_throughput > 0:
            checks.append(held_against("the served A/B at concurrency 1, speedup", chain.speedup,
                                       spec.output_throughput / base.output_throughput))
    demo.plan_checks = checks
    render_plan(demo.plan.plan, demo.console)
    demo.keep("plan", {**to_jsonable(demo.plan.plan), "timings": demo.plan.timings, "measured_checks": checks},
              command)
    own = demo.plan.profile.overhead[0]
    demo.console.print(
        f"The cycles include the reference decoder's own work beyond its passes, measured by timing its real "
        f"cycles: {own.cycle_ms:.1f} ms per cycle, {own.draft_step_ms:.1f} ms per draft step and "
        f"{own.tree_ms:.1f} ms more per tree cycle (tree, walk, "
        f"cache bookkeeping in Python; an engine does it in a few GPU kernels).")
    for check in checks:
        demo.console.print(check_sentence(check))
    if any(not c["agrees"] for c in checks):
        demo.console.print("[bold]The prediction and the measurement disagree here, so neither verdict above stands "
                           "on its own:[/] on a small, busy CPU the timings of a toy's tiny passes swing with the "
                           "machine's load. Rerun on a quiet machine, or trust the measured numbers.")
    demo.console.print("On a GPU the same command profiles the real passes; the verdict there is the one to act on.")


def report_section(demo: Demo) -> None:
    """Every result above as one HTML page, for the people who decide."""
    from draftlab.fsutil import write_json_atomic
    from draftlab.report.html.report import make_report

    folder = demo.workdir / "results"
    files = []
    for i, (name, doc) in enumerate(demo.results, 1):
        files.append(folder / f"{i:02d}-{name}.json")
        write_json_atomic(files[-1], doc)
    demo.report = demo.workdir / "report.html"
    result = make_report(files, demo.report, "draftlab demo: a reused drafter on a new target version")
    demo.console.print(f"$ draftlab report {folder.name}/*.json -o {demo.report.name}")
    for s in result.sections:
        demo.console.print(f"  {s['heading']}", markup=False)
    demo.console.print(f"Open [bold]{demo.report}[/] in a browser: {len(files)} results, their figures and the "
                       "commands that made them, in one self-contained page.")


ASSESS_GRID = "1/1/2,3/1/4,5/1/6"  # the story serves chains (3/1/4 throughout): the decision weighs those


def assess_section(demo: Demo) -> None:
    """The whole phase 0 again, as a user with a real pair would run it: one command, one decision, which must
    agree with the drift and fine-tune steps above (the same pair, prompts and chains)."""
    from draftlab.assess.render import render_assess
    from draftlab.assess.run import assess
    from draftlab.cost.model import SpecConfig
    from draftlab.toy import cached_toy_pair

    demo.toy = demo.toy or cached_toy_pair()
    v2, prompts, out = demo.workdir / "toy-target-v2", _prompts_file(demo.workdir), demo.workdir / "assess"
    command = (f"draftlab assess --drafter toy-drafter --target {v2.name} --old-target toy-target --prompts "
               f"{prompts.name} --grid {ASSESS_GRID} --batch-sizes 1,8 --max-new-tokens 64 --device cpu --out {out.name}")
    demo.console.print(f"$ {command}", soft_wrap=True)
    demo.assessed = assess(demo.toy.drafter_dir, v2, prompts, out, old_target=demo.toy.target_dir,
                           grid=[SpecConfig.parse(c) for c in ASSESS_GRID.split(",")], batch_sizes=[1, 8],
                           max_new_tokens=64, context_tokens=64, device="cpu", repeats=5, progress=False)
    render_assess(demo.assessed, demo.console)
    v = demo.assessed.verdict
    if v.kind in ("fine-tune", "train-from-scratch"):
        demo.console.print(f"The same answer as the drift and fine-tune steps above: the drafter lost acceptance on "
                           f"version 2 (3/1/4: {demo.drift.accept_length_a:.2f} -> {demo.drift.accept_length_b:.2f}), and "
                           f"fine-tuning won it back ({demo.refit.mean_accept_length:.2f}).")
    if v.serving is not None and v.serving.model_free_note:
        demo.console.print("Where a model-free method wins above, it wins on the toy's own text: its greedy "
                           "continuations loop, and n-gram or suffix decoding copy loops for free. Real chat traffic "
                           "rarely loops; measure on prompts like yours before choosing one.")
    demo.console.print(f"Every step above in one process, each model loaded once ({demo.assessed.timings['total_s']:.0f}"
                       f" s); {out.name}/report.html opens with the decision.")


SECTIONS: list[tuple[str, Callable[[Demo], None]]] = [
    ("Build a target and a reused drafter", build),
    ("Inspect", inspect_both),
    ("Check the pair for SGLang", check),
    ("Fix, and check again", fix),
    ("Draft vocabularies on two data distributions", vocab),
    ("Speculative decoding with accept lengths", speculative_decoding),
    ("Probe the toy drafter: exact accept lengths, offline", probe_section),
    ("A new target version: drift and its cost", drift_section),
    ("Act on it: fine-tune the drafter on version 2", finetune_section),
    ("Serve and benchmark, with and without the drafter", serve_and_bench),
    ("Plan: which config pays off on this machine?", plan_section),
    ("One page for the people who decide", report_section),
    ("The decision in one command: assess", assess_section),
]


def run_demo(console: Console | None = None, workdir: Path | None = None) -> Demo:
    """Run every section; files go to ``workdir`` (a new temporary folder when None, removed again when the
    demo does not finish: Ctrl-C leaves nothing behind)."""
    import shutil

    console = console or Console()
    transformers.utils.logging.disable_progress_bar()  # keep the story readable
    demo = Demo(console, Path(workdir or tempfile.mkdtemp(prefix="draftlab-demo-")))
    try:
        for i, (title, section) in enumerate(SECTIONS, 1):
            console.print(Rule(f"{i}. {title}", align="left"))
            section(demo)
    except BaseException:
        if workdir is None:
            shutil.rmtree(demo.workdir, ignore_errors=True)
        raise
    return demo
