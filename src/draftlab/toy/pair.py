"""Build (or reuse) the toy target/drafter pair: HF-style folders that every draftlab command accepts.

The target is a 4-layer byte-level Llama with a tokenizer and chat template; the drafter is an
EAGLE-3 drafter in SpecForge layout with a 128-token draft vocabulary (d2t/t2d) and explicit aux
layer ids. Both are trained for seconds on CPU with a fixed seed, so the drafter agrees with the
target often but not always: what tests of exactness need to mean something.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.progress import Progress
from safetensors.torch import save_file
from transformers import LlamaConfig

from draftlab.checkpoint import DrafterConfig
from draftlab.engines import written_aux_ids
from draftlab.fsutil import atomic_dir, write_json_atomic
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner
from draftlab.toy import train
from draftlab.toy.corpus import stdlib_text
from draftlab.toy.tokenizer import END, VOCAB_SIZE, byte_tokenizer
from draftlab.vocab.build import build_mapping
from draftlab.vocab.counts import TokenCounts

TOY_VERSION = "1"  # bump when anything below changes what gets built
HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE, CONTEXT = 64, 4, 4, 2, 192, 2048
AUX_LAYERS = [0, 1, 2]  # canonical (output-of-layer) ids; the engines' default would repeat layer 1 here
DRAFT_VOCAB = 128
TRAIN_BYTES, HELDOUT_BYTES = 400_000, 40_000
TARGET_STEPS, DRAFTER_STEPS, FEATURE_WINDOWS, BATCH, LENGTH, UNROLL = 250, 120, 256, 16, 64, 3


@dataclass(frozen=True)
class ToyPair:
    target_dir: Path
    drafter_dir: Path


def target_config() -> LlamaConfig:
    return LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                       num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                       max_position_embeddings=CONTEXT, rope_theta=10000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=False, bos_token_id=None, eos_token_id=END, pad_token_id=END)


def drafter_config_dict() -> dict:
    """A SpecForge-style drafter config.json; vLLM's top-level ids are written too, naming the same layers."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_hidden_layers": 1, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HIDDEN // HEADS, "hidden_act": "silu",
        "max_position_embeddings": CONTEXT, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "vocab_size": VOCAB_SIZE, "draft_vocab_size": DRAFT_VOCAB, "target_hidden_size": HIDDEN,
        "tie_word_embeddings": False, "eos_token_id": END, "torch_dtype": "float32",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": written_aux_ids("sglang", AUX_LAYERS),
                         "use_aux_hidden_state": True},
        "eagle_aux_hidden_state_layer_ids": written_aux_ids("vllm", AUX_LAYERS),
    }


def build_toy_pair(out_dir: str | Path, *, seed: int = 0, show_progress: bool = True) -> ToyPair:
    """Train and write ``out_dir/target`` and ``out_dir/drafter`` (``out_dir`` must not exist)."""
    out_dir = Path(out_dir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # these ops are too small to gain from threads, and one thread is reproducible
    try:
        return _build(out_dir, seed, show_progress)
    finally:
        torch.set_num_threads(threads)


def _build(out_dir: Path, seed: int, show_progress: bool) -> ToyPair:
    with atomic_dir(out_dir) as tmp, torch.random.fork_rng(), \
            Progress(disable=not show_progress, transient=True, console=_stderr()) as bar:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        tokens = torch.frombuffer(bytearray(stdlib_text("train", TRAIN_BYTES)), dtype=torch.uint8).long()

        task = bar.add_task("toy target", total=TARGET_STEPS)
        model = train.train_target(target_config(), tokens, steps=TARGET_STEPS, batch=BATCH, length=LENGTH,
                                   lr=3e-3, gen=gen, progress=lambda k: bar.advance(task, k))
        model.generation_config.eos_token_id = END
        model.generation_config.pad_token_id = END
        model.save_pretrained(tmp / "target")
        byte_tokenizer().save_pretrained(tmp / "target")

        runner = TargetRunner(model, aux_layers=AUX_LAYERS)
        windows = train.random_windows(tokens, FEATURE_WINDOWS, LENGTH, gen)
        task = bar.add_task("target features", total=FEATURE_WINDOWS)
        feats, logits = train.target_features(runner, windows, lambda k: bar.advance(task, k))

        counts = TokenCounts.from_dense(torch.bincount(tokens.reshape(-1), minlength=VOCAB_SIZE).numpy())
        mapping = build_mapping(counts, DRAFT_VOCAB, VOCAB_SIZE)  # SpecForge's rule, ties to the lower id
        d2t, t2d = torch.from_numpy(mapping.d2t), torch.from_numpy(mapping.t2d)
        drafter = Eagle3Drafter(DrafterConfig.from_dict(drafter_config_dict()), embed_tokens=runner.embed_tokens)
        drafter.d2t.copy_(d2t)
        task = bar.add_task("toy drafter", total=DRAFTER_STEPS)
        train.train_drafter(drafter, windows, feats, logits, t2d, steps=DRAFTER_STEPS, batch=BATCH,
                            unroll=UNROLL, lr=3e-3, gen=gen, progress=lambda k: bar.advance(task, k))
        (tmp / "drafter").mkdir()
        write_json_atomic(tmp / "drafter" / "config.json", drafter_config_dict())
        tensors = {k: v.detach().contiguous() for k, v in drafter.checkpoint_tensors().items()}
        save_file({**tensors, "t2d": t2d}, str(tmp / "drafter" / "model.safetensors"))
    return ToyPair(out_dir / "target", out_dir / "drafter")


def cache_root() -> Path:
    return Path(os.environ.get("DRAFTLAB_CACHE") or Path.home() / ".cache" / "draftlab")


def cached_toy_pair(seed: int = 0) -> ToyPair:
    """The toy pair under the draftlab cache, built on first use (keyed by version, seed and Python)."""
    key = f"toy-v{TOY_VERSION}-seed{seed}-py{sys.version_info.major}{sys.version_info.minor}"
    folder = cache_root() / key
    pair = ToyPair(folder / "target", folder / "drafter")
    if not (pair.target_dir / "config.json").is_file() or not (pair.drafter_dir / "config.json").is_file():
        build_toy_pair(folder, seed=seed)
    return pair


def _stderr():
    from draftlab.console import err_console

    return err_console
