"""The GPU smoke run: every draftlab command, typed as a user types it, on a CUDA device.

    PYTHONPATH=src python benchmarks/gpu_smoke.py --toy TOY_DIR [--pairs toy,llama-3.1-8b] [--out smoke.json]
CPU check of the script itself (a tiny random pair instead of the 8B one; minutes):
    PYTHONPATH=src python benchmarks/gpu_smoke.py --device cpu --pairs toy,tiny
On a device whose Python differs from this machine's, carry the toys trained here (benchmarks/smoke_cache.py)
rather than train them there.

Run it on a GPU machine whenever a change touches models/, decode/, probe/, cost/ or serve/, and record
the last run in benchmarks/RESULTS.md ("GPU smoke run"). Every command runs in its own process
(`python -m draftlab ...`, default flags plus `--device cuda` where the command takes one) and must
exit 0: inspect, check (SGLang and vLLM, --fix), vocab (count, build, coverage, compare), generate (its
default speculation flags, a chain, a tree, sampling, a batch, no drafter alone and batched), probe
(the target's own continuations, sampled ones, given responses, captured features, --profile-out),
drift, serve + bench, profile, plan --target (alone and with --schedule vllm), assess, train
(fine-tune with evaluation, from scratch) and capture.

Pairs:
- ``toy``: the trained toy pair (``--toy DIR`` holding ``target/`` and ``drafter/``, e.g. the
  draftlab cache's ``toy-v1-seed0-py311``; trained here when not given). Its commands run in its
  float32 checkpoints' default on CUDA (bfloat16) and, for the exactness check, in float32: the probe's
  per-prompt accept lengths must equal generate's for the chain 3/1/4, in a short decode and in one
  long enough (24 prompts x 512 tokens) for generate to compile its verify (and its drafter's steps with
  ``DRAFTLAB_DRAFTER=compiled``).
- ``llama-3.1-8b``: a Llama-3.1-8B-shaped target with random bf16 weights arranged for real
  acceptance (benchmarks/multi_gpu.py's ``PredictableWeights``) and its drafter, written to disk
  (16 GB) so that the commands load them as a user's folders. Per-prompt agreement is reported, not
  required (bf16 ties).
- ``llama-3.1-8b:eagle3.1``: the same with an EAGLE-3.1 drafter (``fc_norm`` + ``norm_output``, its
  ``fc_norm.{i}`` weights drawn around one).
- ``toy:window``, ``toy:qwen3``, ``toy:mtp``: the drafters trained today and the target's own MTP head, on
  their toys (:func:`smoke_variant_pairs`), probe == generate per prompt required in float32.
- ``deepseek-v3-5l:mla``: a DeepSeek-V3-shaped target (real dimensions and YaRN, 5 layers, dense MLPs,
  random bf16 weights) and an MLA drafter (``Eagle3DeepseekV2ForCausalLM``) with random weights.

Independent commands run concurrently (``--workers`` at most, as many as the card's free memory holds of a
pair's jobs: :func:`fitting_workers`), so their seconds include waiting for each other: the smoke run checks that commands work, not how fast.
Prints one line per command (pair, command, exit code, seconds) and a Markdown table last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1"}
SHAPES = {"llama-3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=131072,
                rms_norm_eps=1e-5, rope_theta=500000.0,
                rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192},
                tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001),
          "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                       rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)}
SHAPES["deepseek-v3-5l"] = dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=5,
                                first_k_dense_replace=5, num_attention_heads=128, num_key_value_heads=128,
                                q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                v_head_dim=128, max_position_embeddings=163840, rms_norm_eps=1e-6, rope_theta=10000.0,
                                rope_scaling={"type": "yarn", "factor": 40.0, "beta_fast": 32, "beta_slow": 1,
                                              "mscale": 1.0, "mscale_all_dim": 1.0,
                                              "original_max_position_embeddings": 4096},
                                tie_word_embeddings=False, bos_token_id=0, eos_token_id=1)
DRAFT_VOCAB = {"llama-3.1-8b": 32000, "tiny": 256, "deepseek-v3-5l": 32000}
VARIANT_PAIRS = ("toy:window", "toy:qwen3", "toy:mtp")  # smoke_variant_pairs: the toys' variants, exact
TOY_TEXTS = ["def __init__(self, name", "import os\nimport sys\n\n", "    for key, value in self.",
             "return self._", "class Config:\n    ", "    if not isinstance(", "# Copyright", "with open("]


# commands whose JSON documents `draftlab report` renders (file-name prefixes of the kept documents)
REPORTED = ("inspect", "check", "vocab_coverage", "vocab_compare", "generate", "probe", "drift", "bench", "profile",
            "plan", "train", "assess")


class Smoke:
    """Runs commands and keeps one record per command, in the order the jobs were listed, and each
    command's JSON document under ``root/PAIR/results`` (for the report at the end)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.records: list[dict] = []
        self.lock = threading.Lock()
        self.job = threading.local()  # the running job's place in the list, for the table's order

    def jobs(self, jobs: list[Callable[[], object]], workers: int) -> None:
        """Run independent jobs concurrently; a job that raises is recorded as failed."""
        def run(index: int, job: Callable[[], object]) -> None:
            self.job.key = (index, 0)
            try:
                job()
            except Exception as exc:  # noqa: BLE001 - record and go on: the table is the point
                self.record(getattr(job, "pair", "?"), getattr(job, "__name__", "job"), False, 0.0,
                            error=f"{type(exc).__name__}: {exc}")

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, range(len(jobs)), jobs))

    def run(self, pair: str, name: str, argv: list[str], *, expect: int = 0, timeout: int = 600,
            or_refused: str | None = None) -> dict | None:
        """``python -m draftlab argv``; returns its JSON document when it printed one. ``or_refused``: exit 2
        with this in its one-line error also passes (an answer that depends on the pair's measured costs)."""
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "draftlab", *argv], capture_output=True, text=True,
                             env=ENV, timeout=timeout)
        seconds = time.perf_counter() - start
        doc = None
        if out.stdout.strip().startswith(("{", "[")):
            try:
                doc = json.loads(out.stdout)
            except json.JSONDecodeError:
                pass
        ok = out.returncode == expect or (or_refused is not None and out.returncode == 2 and or_refused in out.stderr)
        self.record(pair, name, ok, seconds, rc=out.returncode,
                    error=None if out.returncode == expect else out.stderr.strip()[-1500:])
        if isinstance(doc, dict):
            folder = self.root / pair / "results"
            folder.mkdir(exist_ok=True)
            (folder / (re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + ".json")).write_text(out.stdout)
        return doc

    def record(self, pair: str, name: str, ok: bool, seconds: float, **extra: object) -> None:
        index, seq = getattr(self.job, "key", (0, 0))
        self.job.key = (index, seq + 1)
        row = {"pair": pair, "command": name, "ok": ok, "seconds": round(seconds, 2), **extra}
        with self.lock:
            self.records.append({**row, "_order": (pair, index, seq)})
            print(json.dumps(row), flush=True)


def toy_pair(toy: str | None) -> tuple[Path, Path]:
    if toy:
        return Path(toy) / "target", Path(toy) / "drafter"
    from draftlab.toy import cached_toy_pair

    pair = cached_toy_pair()
    return pair.target_dir, pair.drafter_dir


def shape_of(pair: str) -> str:
    """The model shape a pair is built from ("llama-3.1-8b:eagle3.1" -> "llama-3.1-8b")."""
    return pair.split(":")[0]


def write_random_pair(pair: str, work: Path, device: str) -> tuple[Path, Path]:
    """A target of ``pair``'s shape and its drafter (of its variant) as folders (SpecForge's layout)."""
    shape, _, variant = pair.partition(":")
    if variant == "mla":
        return write_mla_pair(shape, work, device)
    from multi_gpu import PredictableWeights, build_drafter, split_target
    from safetensors.torch import save_file

    from draftlab.engines import default_aux_layers, written_aux_ids

    cfg, draft_vocab = SHAPES[shape], DRAFT_VOCAB[shape]
    values = PredictableWeights(cfg, draft_vocab, residual_scale=1e-3, fixed_points=0.3, seed=0)
    model = split_target(cfg, device, torch.bfloat16, values)
    target_dir, drafter_dir = work / "target", work / "drafter"
    model.save_pretrained(target_dir)
    drafter = build_drafter(model, values, cfg, draft_vocab, torch.bfloat16)
    drafter_dir.mkdir()
    layers = cfg["num_hidden_layers"]
    aux = default_aux_layers(layers) if layers >= 8 else [0, 1, 2]  # explicit, in both engines' fields
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
              **{k: v for k, v in cfg.items() if k != "tie_word_embeddings"},
              "num_hidden_layers": 1, "hidden_act": "silu", "draft_vocab_size": draft_vocab,
              "target_hidden_size": cfg["hidden_size"], "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": written_aux_ids("sglang", aux),
                               "use_aux_hidden_state": True},
              "eagle_aux_hidden_state_layer_ids": written_aux_ids("vllm", aux)}
    tensors = {k: v.detach().contiguous().cpu() for k, v in drafter.checkpoint_tensors().items()}
    if variant:
        from draftlab.checkpoint.variants import NEW_DRAFTER_FLAGS

        config.update(NEW_DRAFTER_FLAGS[variant])
        gen = torch.Generator().manual_seed(1)
        tensors.update({f"fc_norm.{i}.weight": (1 + 0.1 * torch.randn(cfg["hidden_size"], generator=gen)).bfloat16()
                        for i in range(3)})
    (drafter_dir / "config.json").write_text(json.dumps(config, indent=2))
    tensors["d2t"] = torch.zeros(draft_vocab, dtype=torch.int64)  # the draft ids are the first 32000
    tensors["t2d"] = torch.arange(cfg["vocab_size"]) < draft_vocab
    save_file(tensors, str(drafter_dir / "model.safetensors"))
    del model, drafter, values
    if device == "cuda":
        torch.cuda.empty_cache()
    return target_dir, drafter_dir


def write_mla_pair(shape: str, work: Path, device: str) -> tuple[Path, Path]:
    """A DeepSeek-V3-shaped target with random weights and an MLA drafter for it, as folders."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, DeepseekV3Config

    from draftlab.checkpoint import DrafterConfig, TargetConfig
    from draftlab.checkpoint.synth import mla_drafter_config
    from draftlab.engines import written_aux_ids
    from draftlab.models.drafter import Eagle3Drafter

    cfg, draft_vocab = SHAPES[shape], DRAFT_VOCAB[shape]
    target_dir, drafter_dir = work / "target", work / "drafter"
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(DeepseekV3Config(**cfg), dtype=torch.bfloat16)
    model.save_pretrained(target_dir)
    raw = json.loads((target_dir / "config.json").read_text())
    aux, family = [1, 2, 3], TargetConfig.from_dict(raw)  # SGLang cannot name layer 0's output for DeepSeek targets
    config = mla_drafter_config(raw, draft_vocab_size=draft_vocab, torch_dtype="bfloat16",
                                eagle_config={"eagle_aux_hidden_state_layer_ids": written_aux_ids(
                                    "sglang", aux, target=family), "use_aux_hidden_state": True},
                                eagle_aux_hidden_state_layer_ids=written_aux_ids("vllm", aux, target=family))
    with torch.device(device):
        drafter = Eagle3Drafter(DrafterConfig.from_dict(config)).to(torch.bfloat16)
    drafter_dir.mkdir()
    (drafter_dir / "config.json").write_text(json.dumps(config, indent=2))
    tensors = {k: v.detach().contiguous().cpu() for k, v in drafter.checkpoint_tensors().items()}
    tensors["d2t"] = torch.zeros(draft_vocab, dtype=torch.int64)
    tensors["t2d"] = torch.arange(cfg["vocab_size"]) < draft_vocab
    save_file(tensors, str(drafter_dir / "model.safetensors"))
    del model, drafter
    if device == "cuda":
        torch.cuda.empty_cache()
    return target_dir, drafter_dir


def write_prompts(path: Path, pair: str) -> list[list[int]]:
    if pair == "toy":
        rows = [list(t.encode()) for t in TOY_TEXTS]
    else:  # inside the draft vocabulary, where the arranged weights make drafts acceptable
        gen = torch.Generator().manual_seed(0)
        rows = torch.randint(0, DRAFT_VOCAB[shape_of(pair)], (8, 64), generator=gen).tolist()
    path.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows))
    return rows


def write_features(target_dir: Path, drafter_dir: Path, rows: list[list[int]], outputs: list[list[int]],
                   folder: Path, device: str) -> None:
    """SpecForge-format feature files (data_*.ckpt) of the target's own greedy responses, as an engine
    captures them: what ``probe --features`` reads."""
    from draftlab.checkpoint import DrafterConfig, TargetConfig, open_checkpoint
    from draftlab.engines import aux_layers
    from draftlab.models.target import TargetRunner

    target_cfg = TargetConfig.from_dict(open_checkpoint(target_dir).config)
    layers = aux_layers("sglang", DrafterConfig.from_dict(open_checkpoint(drafter_dir).config),
                        target_cfg.num_layers).layers
    runner = TargetRunner.load(target_dir, aux_layers=layers, dtype="bfloat16", device=device, cache="dynamic")
    folder.mkdir(parents=True)
    for i, (prompt, response) in enumerate(zip(rows, outputs)):
        step = runner.forward_batch(torch.tensor([prompt + response]))
        torch.save({"input_ids": torch.tensor(prompt + response),
                    "loss_mask": torch.tensor([0] * len(prompt) + [1] * len(response)),
                    "hidden_state": step.hidden.cpu(), "aux_hidden_state": step.aux.cpu()}, folder / f"data_{i}.ckpt")
    del runner


def serve_and_bench(smoke: Smoke, pair: str, target: Path, drafter: Path, prompts: Path, work: Path,
                    device: str) -> None:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "draftlab", "serve", "--target", str(target), "--drafter",
                             str(drafter), "--device", device, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        line = proc.stdout.readline()
        if "serving" not in line:
            proc.kill()
            smoke.record(pair, "serve", False, time.perf_counter() - start, error=proc.stderr.read()[-1500:])
            return
        smoke.record(pair, "serve (start)", True, time.perf_counter() - start)
        url = line.split(" at ")[1].split(";")[0]
        doc = smoke.run(pair, "bench --api sglang", ["bench", "--base-url", url, "--api", "sglang", "--prompts",
                                                     str(prompts), "--max-tokens", "32", "--concurrency", "2",
                                                     "-o", str(work / "bench.json"), "--json"])
        if doc is not None:
            smoke.records[-1].update(completed=doc["completed"], accept_length=doc["accept_length"])
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        smoke.record(pair, "serve (Ctrl-C)", proc.returncode == 130, 0.0, rc=proc.returncode,
                     error=None if proc.returncode == 130 else err[-1500:])
    finally:
        if proc.poll() is None:
            proc.kill()


def per_prompt(doc: dict | None) -> list[list[int]] | None:
    return None if doc is None else [r["accept_lengths"] for r in doc["results"]]


def smoke_pair(smoke: Smoke, pair: str, target: Path, drafter: Path, work: Path, device: str, workers: int,
               only: set[str] | None = None) -> None:
    """Every command on one pair: independent jobs, run ``workers`` at a time (``only``: the named jobs
    alone, e.g. ``train``, to re-check one group after a fix; the report is then left out)."""
    t, d = str(target), str(drafter)
    prompts = work / "prompts.jsonl"
    rows = write_prompts(prompts, pair)
    cuda = ["--device", device]
    chain = ["--steps", "3", "--topk", "1", "--num-draft-tokens", "4"]
    tree = ["--steps", "5", "--topk", "4", "--num-draft-tokens", "8"]
    pair_args = ["--target", t, "--drafter", d, "--prompts", str(prompts)]
    new = ["--max-new-tokens", "64"]

    def run(name: str, argv: list[str]) -> Callable[[], object]:
        def job() -> None:
            smoke.run(pair, name, argv)
        job.__name__ = name  # what --only selects
        return job

    def vocab() -> None:
        counts = work / "counts.json"
        if pair == "toy":
            smoke.run(pair, "vocab count", ["vocab", "count", "--data", str(prompts), "--tokenizer", t,
                                            "-o", str(counts)])
        else:  # a random target has no tokenizer: the prompts are token ids
            smoke.run(pair, "vocab count", ["vocab", "count", "--data", str(prompts), "--vocab-size",
                                            str(SHAPES[shape_of(pair)]["vocab_size"]), "-o", str(counts)])
        mapping = work / "mapping.safetensors"
        size = "64" if pair == "toy" else str(DRAFT_VOCAB[shape_of(pair)] // 2)
        smoke.run(pair, "vocab build", ["vocab", "build", "--counts", str(counts), "--size", size, "-o", str(mapping)])
        smoke.run(pair, "vocab coverage", ["vocab", "coverage", d, "--counts", str(counts), "--json"])
        smoke.run(pair, "vocab compare", ["vocab", "compare", d, str(mapping), "--json"])

    def probe_equals_generate(name: str, flags: list[str], required: bool, *, compiled: bool = False
                              ) -> Callable[[], None]:
        """generate then probe with ``flags``; their per-prompt accept lengths compared. ``compiled``: a decode
        long enough (three copies of each prompt, 512 new tokens) for generate to compile its steps, which on
        CUDA it must say it did."""
        copies, tokens = (3, ["--max-new-tokens", "512"]) if compiled else (1, new)
        given = pair_args
        if compiled:
            given = ["--target", t, "--drafter", d, "--prompts", str(work / "prompts-x3.jsonl")]

        def job() -> None:
            if compiled:
                Path(given[-1]).write_text(prompts.read_text() * copies)
            gen = smoke.run(pair, f"generate {name}", ["generate", *given, *cuda, *tokens, *flags, "--json"])
            got = smoke.run(pair, f"probe {name}", ["probe", *given, *cuda, *tokens, *flags, "--json"])
            if gen is not None and got is not None:
                same = sum(a == b for a, b in zip(per_prompt(gen), per_prompt(got)))
                count = copies * len(rows)
                ok = (same == count or not required) and (gen["config"].get("compile") or not compiled
                                                           or device != "cuda")
                smoke.record(pair, f"probe == generate per prompt, {name} ({gen['config']['dtype']})", ok, 0.0,
                             matching=f"{same}/{count}", mean_accept_length=gen["mean_accept_length"],
                             compiled=gen["config"].get("compile"), timings=got.get("timings"))
        return job

    def given_and_features() -> None:
        ahead = smoke.run(pair, "generate 3/1/4 (+ look-ahead)", ["generate", *pair_args, *cuda, *chain,
                                                                  "--max-new-tokens", "68", "--ignore-eos", "--json"])
        if ahead is None:
            return
        outputs = [r["output_ids"] for r in ahead["results"]]
        given = work / "given.jsonl"
        given.write_text("".join(json.dumps({"input_ids": p, "response_ids": o}) + "\n" for p, o in zip(rows, outputs)))
        smoke.run(pair, "probe --responses given", ["probe", "--target", t, "--drafter", d, "--prompts", str(given),
                                                    "--responses", "given", *cuda, *new, *chain, "--json"])
        write_features(target, drafter, rows, outputs, work / "features" / "rows_0-5000", device)
        smoke.run(pair, "probe --features", ["probe", "--target", t, "--drafter", d, "--features",
                                             str(work / "features"), *cuda, *new, *chain, "--json"])

    def drift() -> None:
        if pair == "toy":
            from draftlab.demo import perturbed_copy

            other = str(perturbed_copy(target, work / "target-v2", 0.3))
        else:
            other = t  # a second 16 GB copy would only cost disk: the target against itself
        smoke.run(pair, "drift", ["drift", "--target-a", t, "--target-b", other, "--prompts", str(prompts),
                                  "--drafter", d, *cuda, *new, "--json"])

    def assess() -> None:
        """The whole decision, default flags (the toy with its perturbed version 2 and version 1 as OLD)."""
        if pair == "toy":
            from draftlab.demo import perturbed_copy

            v2 = work / "target-v2-assess"
            if not v2.exists():
                perturbed_copy(target, v2, 0.3)
            new = ["--target", str(v2), "--old-target", t]
        else:
            new = ["--target", t]
        smoke.run(pair, "assess", ["assess", "--drafter", d, *new, "--prompts", str(prompts), *cuda, *cpu_assess,
                                   "--out", str(work / "assess"), "--json"])

    def train() -> None:
        """Fine-tune the drafter and train one from scratch for a few steps; capture features."""
        data = work / "train.jsonl"
        if pair == "toy":
            from draftlab.toy.corpus import stdlib_text

            text = stdlib_text("train", 16 * 256)
            ids = [list(text[i:i + 256]) for i in range(0, len(text), 256)]
        else:
            ids = torch.randint(0, DRAFT_VOCAB[shape_of(pair)], (16, 256),
                                generator=torch.Generator().manual_seed(2)).tolist()
        data.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in ids))
        steps = ["--max-steps", "4", "--batch-size", "4", "--seq-len", "256", *cuda]
        smoke.run(pair, "train --init (fine-tune, eval)", ["train", "--target", t, "--data", str(data), "--init", d,
                                                          "--out", str(work / "tuned"), *steps, "--eval-prompts",
                                                          str(prompts), "--eval-every", "2", *chain, "--json"])
        smoke.run(pair, "check (trained drafter)", ["check", str(work / "tuned"), "--target", t, "--json"])
        shutil.rmtree(work / "tuned", ignore_errors=True)  # its optimizer state: tens of GB on the device's disk
        vocab_size = "64" if pair == "toy" else str(DRAFT_VOCAB[shape_of(pair)])
        variant = ["--variant", "eagle3.1"] if pair.endswith(":eagle3.1") else []
        smoke.run(pair, "train (from scratch)", ["train", "--target", t, "--data", str(data), "--out",
                                                 str(work / "scratch"), *steps, "--draft-vocab-size", vocab_size,
                                                 *variant, "--json"])
        smoke.run(pair, "check (drafter from scratch)", ["check", str(work / "scratch"), "--target", t, "--json"])
        smoke.run(pair, "capture", ["capture", "--target", t, "--data", str(data), "--drafter", d, "--out",
                                    str(work / "captured"), "--seq-len", "256", *cuda, "--json"])

    def convert() -> None:
        """Both layouts and back; an MLA drafter is refused for the speculators layout (no engine reads it)."""
        if pair.endswith(":mla"):
            smoke.run(pair, "convert --to speculators (MLA: refused)", ["convert", d, "--to", "speculators", "-o",
                                                                        str(work / "speculators"), "--target", t],
                      expect=2)
            return
        smoke.run(pair, "convert --to speculators", ["convert", d, "--to", "speculators", "-o",
                                                      str(work / "speculators"), "--target", t, "--json"])
        smoke.run(pair, "convert --to specforge (back)", ["convert", str(work / "speculators"), "--to", "specforge",
                                                          "-o", str(work / "specforge"), "--target", t, "--json"])

    cpu_profile = [] if device == "cuda" else ["--device", "cpu", "--repeats", "2", "--verify-tokens", "1,4"]
    cpu_plan = [] if device == "cuda" else ["--repeats", "1", "--grid", "3/1/4,2/2/4", "--max-new-tokens", "16"]
    cpu_assess = [] if device == "cuda" else ["--grid", "3/1/4,2/2/4", "--batch-sizes", "1", "--max-new-tokens", "16"]
    jobs = [
        run("inspect target", ["inspect", t, "--json"]),
        run("inspect drafter", ["inspect", d, "--json"]),
        run("check --engine sglang", ["check", d, "--target", t, "--engine", "sglang", "--json"]),
        run("check --engine vllm", ["check", d, "--target", t, "--engine", "vllm", "--json"]),
        run("check --fix", ["check", d, "--target", t, "--fix", str(work / "fixed"), "--json"]),
        convert,
        vocab,
        probe_equals_generate("(default flags)", [], required=False),  # bf16 on CUDA: agreement reported
        probe_equals_generate("3/1/4", chain, required=False),
        run("generate 5/4/8", ["generate", *pair_args, *cuda, *new, *tree, "--json"]),
        run("generate T=0.7", ["generate", *pair_args, *cuda, *new, "--temperature", "0.7", "--seed", "0", "--json"]),
        run("generate --batch-size 4", ["generate", *pair_args, *cuda, *new, "--batch-size", "4", "--json"]),
        run("generate --no-draft", ["generate", "--target", t, "--prompts", str(prompts), "--no-draft", *cuda, *new,
                                    "--json"]),
        run("generate --no-draft --batch-size 8", ["generate", "--target", t, "--prompts", str(prompts), "--no-draft",
                                                   "--batch-size", "8", *cuda, *new, "--json"]),
        run("probe --profile-out", ["probe", *pair_args, *cuda, *new, "--profile-out",
                                    str(work / "speculation_profile.json"), "--json"]),
        run("probe T=0.7", ["probe", *pair_args, *cuda, *new, "--temperature", "0.7", "--seed", "0", "--json"]),
        given_and_features,
        drift,
        lambda: serve_and_bench(smoke, pair, target, drafter, prompts, work, device),
        run("profile", ["profile", "--target", t, "--drafter", d, "--out", str(work / "profile.json"), *cpu_profile,
                        "--json"]),
        run("plan --target", ["plan", *pair_args, *cuda, *cpu_plan, "--json"]),
        # where the plan finds that speculation loses at every batch size (the MLA pair's random drafter; the
        # toy's drafter costs as much as its target on a GPU) it says there is no schedule, exit 2
        lambda: smoke.run(pair, "plan --target --schedule vllm", [
            "plan", *pair_args, *cuda, *cpu_plan, "--batch-sizes", "1,8", "--schedule", "vllm", "--schedule-out",
            str(work / "schedule.json"), "--json"], or_refused="speculation loses at every planned batch size"),
        assess,
        train,
    ]
    if pair == "toy":  # the exactness claim, in float32; then with generate's steps compiled (a long decode)
        jobs.insert(8, probe_equals_generate("3/1/4 float32", [*chain, "--dtype", "float32"], required=True))
        jobs.insert(9, probe_equals_generate("3/1/4 float32, compiled", [*chain, "--dtype", "float32"],
                                             required=True, compiled=True))
    if only:
        jobs = [job for job in jobs if job.__name__ in only]
    for job in jobs:
        job.pair = pair
    smoke.jobs(jobs, workers)
    if only:
        return
    smoke.job.key = (len(jobs), 0)  # the report's row goes last in the table
    reported = sorted(p for p in (work / "results").glob("*.json") if p.stem.startswith(REPORTED))
    doc = smoke.run(pair, "report", ["report", *map(str, reported), "-o", str(work / "report.html"), "--json"])
    if doc is not None:
        smoke.records[-1].update(sections=len(doc["sections"]), of=len(reported))


def smoke_variant_pairs(smoke: Smoke, pair: str, work: Path, device: str, workers: int) -> None:
    """The drafters trained today and the target's own MTP head, on their toys, exact in float32 on ``device``:
    ``toy:window`` (the toy drafter trained with an 8-token window: vLLM serves the window from the config,
    SGLang only with --draft-window, which launch writes as --speculative-draft-window-size), ``toy:qwen3``
    (speculators' --draft-arch qwen3 layer, q/k norms; vLLM >= 0.24) and ``toy:mtp`` (the toy DeepSeek-V3
    target's own MTP layer, ``--drafter mtp``, a chain on vLLM and a tree on SGLang; and the toy Qwen3-Next's,
    whose target mixes linear and full attention, a chain; and the EAGLE-3 MLA drafter beside the DeepSeek-V3
    target, a tree, its cache static while the target's is dynamic). Independent parts run
    ``workers`` at a time: on a GPU each command's process start outweighs its work on a toy."""
    from draftlab.toy import cached_toy_pair
    from draftlab.toy.mtp import cached_mtp_toy
    from draftlab.toy.mtp_drafter import cached_mtp_eagle3_drafter
    from draftlab.toy.variants import WINDOW, cached_variant_drafter

    prompts = work / "prompts.jsonl"
    rows = write_prompts(prompts, "toy")
    exact = ["--device", device, "--dtype", "float32", "--max-new-tokens", "64", "--json"]
    chain, tree = ["--steps", "3", "--topk", "1", "--num-draft-tokens", "4"], ["--steps", "3", "--topk", "2",
                                                                              "--num-draft-tokens", "6"]
    if pair == "toy:mtp":
        toy = cached_mtp_toy()
        target, drafter = str(toy.target_dir), "mtp"

        def checks() -> None:
            smoke.run(pair, "inspect (MTP layers)", ["inspect", target, "--json"])
            smoke.run(pair, "check mtp", ["check", "mtp", "--target", target, "--json"])
            for engine, steps in (("sglang", []), ("vllm", ["--steps", "3"])):  # vLLM has no automatic choice
                smoke.run(pair, f"launch {engine} --drafter mtp --dry-run",
                          ["launch", engine, "--target", target, "--drafter", "mtp", *steps, "--dry-run"])
        eagle3 = str(cached_mtp_eagle3_drafter(toy.target_dir))  # its cache static beside the dynamic target
        cases = [("vllm", chain, [], target, drafter), ("sglang", chain, [], target, drafter),
                 ("sglang", tree, [], target, drafter), ("vllm", chain, [], str(toy.qwen3_next_dir), drafter),
                 ("vllm", tree, [], target, eagle3)]
    else:
        toy = cached_toy_pair()
        variant = {"toy:window": "sliding-window", "toy:qwen3": "qwen3"}[pair]
        target, drafter = str(toy.target_dir), str(cached_variant_drafter(toy, variant))
        window = ["--draft-window", str(WINDOW)]

        def checks() -> None:
            smoke.run(pair, "check vllm", ["check", drafter, "--target", target, "--engine", "vllm", "--json"])
            if pair == "toy:window":
                doc = smoke.run(pair, "check sglang", ["check", drafter, "--target", target, "--json"])
                smoke.record(pair, "check sglang names --speculative-draft-window-size",
                             doc is not None and "--speculative-draft-window-size" in json.dumps(doc), 0.0)
                smoke.run(pair, "launch sglang --dry-run (adds the window flag)",
                          ["launch", "sglang", "--target", target, "--drafter", drafter, "--dry-run"])
        cases = [("vllm", chain, [], target, drafter), ("vllm", tree, [], target, drafter)] + (
            [("sglang", chain, window, target, drafter)] if pair == "toy:window" else [])

    def exact_case(engine: str, flags: list[str], extra: list[str], on: str, by: str) -> Callable[[], None]:
        name = f"{engine} {'/'.join(flags[1::2])}" + (" (Qwen3-Next)" if on != target else "") + (
            " (EAGLE-3 drafter)" if by != drafter else "")

        def probe_equals_generate() -> None:
            argv = ["--target", on, "--drafter", by, "--prompts", str(prompts), "--engine", engine, *extra,
                    *flags, *exact]
            gen = smoke.run(pair, f"generate {name}", ["generate", *argv])
            got = smoke.run(pair, f"probe {name}", ["probe", *argv])
            if gen is not None and got is not None:
                same = sum(a == b for a, b in zip(per_prompt(gen), per_prompt(got)))
                smoke.record(pair, f"probe == generate per prompt, {name} (float32)", same == len(rows), 0.0,
                             matching=f"{same}/{len(rows)}", mean_accept_length=gen["mean_accept_length"],
                             caches=f"{gen['config']['cache']}/{gen['config'].get('drafter_cache')}")
        return probe_equals_generate

    jobs = [checks, *(exact_case(*case) for case in cases)]
    assessed = None
    if pair == "toy:mtp":
        priced, assessed = mtp_decision_jobs(smoke, pair, target, prompts, work, device)
        jobs.append(priced)
    for job in jobs:
        job.pair = pair  # type: ignore[attr-defined]  # named in the record of a job that raises
    smoke.jobs(jobs, workers)
    if assessed is not None:  # alone: its verdict rests on timings other jobs would disturb
        smoke.job.key = (len(jobs), 0)
        assessed()


def mtp_decision_jobs(smoke: Smoke, pair: str, target: str, prompts: Path, work: Path, device: str
                      ) -> tuple[Callable[[], None], Callable[[], None]]:
    """The MTP head priced and weighed, default flags: profile and probe it, then plan from both; and assess the
    toy target's EAGLE-3 drafter with the head as the other candidate (the verdict names the better one, or
    the timing contradictions that kept it from doing so go into the record)."""
    from draftlab.toy.mtp_drafter import cached_mtp_eagle3_drafter

    cuda = ["--device", device]

    def priced() -> None:
        cpu = [] if device == "cuda" else ["--repeats", "2", "--verify-tokens", "1,4"]
        costs, probed = work / "profile-mtp.json", work / "probe-mtp.json"
        smoke.run(pair, "profile --drafter mtp", ["profile", "--target", target, "--drafter", "mtp", "--out",
                                                  str(costs), *cuda, *cpu, "--json"])
        doc = smoke.run(pair, "probe --drafter mtp (default flags)", ["probe", "--target", target, "--drafter",
                                                                      "mtp", "--prompts", str(prompts), *cuda, "--json"])
        if doc is not None and costs.is_file():
            probed.write_text(json.dumps(doc))
            smoke.run(pair, "plan --costs --probe (MTP head)", ["plan", "--costs", str(costs), "--probe",
                                                                str(probed), "--json"])

    def assessed() -> None:
        drafter = str(cached_mtp_eagle3_drafter(Path(target)))
        cpu = [] if device == "cuda" else ["--grid", "3/1/4,2/2/4", "--batch-sizes", "1", "--max-new-tokens", "16"]
        # vLLM: the drafter names layers 0..2, which SGLang cannot name on a DeepSeek target (check says so)
        doc = smoke.run(pair, "assess --engine vllm (EAGLE-3 drafter and the MTP head)", [
            "assess", "--drafter", drafter, "--target", target, "--prompts", str(prompts), "--engine", "vllm", *cuda,
            *cpu, "--out", str(work / "assess"), "--json"])
        verdict = (doc or {}).get("verdict") or {}
        versus = verdict.get("versus") or {}
        undecided = [c for r in verdict.get("reasons", []) if r["rule"] == "timing"
                     for c in r["figures"]["contradictions"]]  # the timings' contradictions and failed cross-checks
        smoke.record(pair, "assess names the better of drafter and MTP head", bool(versus.get("better")), 0.0,
                     matching=versus.get("text", "")[:160] + "".join(f" | {c}" for c in undecided[:4]),
                     measured_checks=(doc or {}).get("measured_checks"))
    return priced, assessed


def fitting_workers(asked: int, target: Path, drafter: Path, device: str) -> int:
    """At most ``asked`` jobs at once, as many as the card's free memory holds: each job loads the pair and
    holds about as much again in caches and activations (training: gradients and optimizer state), plus 4 GiB
    of CUDA context and workspace (an 8B pair: about 36 GiB a job; two on an 80 GB card, three on an H200)."""
    if device != "cuda":
        return asked
    weights = sum(f.stat().st_size for folder in (target, drafter) for f in folder.glob("*.safetensors"))
    per_job = 2 * weights + (4 << 30)
    free, _ = torch.cuda.mem_get_info()
    return max(1, min(asked, free // per_job))


def table(records: list[dict]) -> str:
    lines = ["| pair | command | result | seconds | note |", "|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: r["_order"]):
        note = r.get("matching") or (f"rc {r['rc']}" if "rc" in r else "")
        if r.get("timings"):
            note += f"; timings {r['timings']}"
        if "sections" in r:
            note += f"; {r['sections']} sections from {r['of']} results"
        if r.get("error"):
            note += "; " + r["error"].splitlines()[-1][:160]
        lines.append(f"| {r['pair']} | {r['command']} | {'ok' if r['ok'] else 'FAILED'} | {r['seconds']} | {note} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--toy", help="folder with the toy pair's target/ and drafter/ (default: train it)")
    parser.add_argument("--pairs", default="toy,toy:window,toy:qwen3,toy:mtp,llama-3.1-8b,llama-3.1-8b:eagle3.1,"
                                           "deepseek-v3-5l:mla")
    parser.add_argument("--workdir", help="where the pairs' folders go (default: a temporary folder)")
    parser.add_argument("--out", help="write the records as JSON here")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: check the script itself")
    parser.add_argument("--workers", type=int, default=4, help="commands run at once, at most (fewer where the "
                                                                   "card's free memory holds fewer of a pair's jobs)")
    parser.add_argument("--only", help="comma-separated jobs (a group: train, assess, vocab, drift, convert, ...; or "
                                       "one command: 'generate --no-draft'): re-check those alone; the full run is "
                                       "what RESULTS records")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_smoke.py needs a CUDA device (or --device cpu to check the script)", file=sys.stderr)
        return 2
    import transformers

    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(json.dumps({"device": name, "torch": torch.__version__,
                      "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d")}), flush=True)
    root = Path(args.workdir or tempfile.mkdtemp(prefix="draftlab-smoke-"))
    smoke = Smoke(root)
    for pair in args.pairs.split(","):
        work = root / pair
        work.mkdir(parents=True)
        start = time.perf_counter()
        try:
            if pair in VARIANT_PAIRS:
                smoke_variant_pairs(smoke, pair, work, args.device, args.workers)
                continue
            target, drafter = (toy_pair(args.toy) if pair == "toy"
                               else write_random_pair(pair, work / "models", args.device))
            workers = fitting_workers(args.workers, target, drafter, args.device)
            smoke.record(pair, "build pair", True, time.perf_counter() - start, workers=workers)
            smoke_pair(smoke, pair, target, drafter, work, args.device, workers,
                       set(args.only.split(",")) if args.only else None)
        except Exception as exc:  # record and go on to the next pair: the table is the point
            smoke.record(pair, "smoke script", False, 0.0, error=f"{type(exc).__name__}: {exc}")
    if args.out:
        Path(args.out).write_text(json.dumps([{k: v for k, v in r.items() if k != "_order"} for r in smoke.records],
                                             indent=1))
    print(table(smoke.records))
    failed = [r for r in smoke.records if not r["ok"]]
    print(f"{len(smoke.records) - len(failed)}/{len(smoke.records)} ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
