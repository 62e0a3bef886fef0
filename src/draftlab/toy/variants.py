"""Toy drafters of today's EAGLE-3 variants for the toy target, trained for seconds.

Each starts from the toy drafter's weights, turns its variant's flags on with norm weights drawn far
from one (so that dropping a flag changes what the drafter computes), and is trained again on the
toy target's features through the variant's own forward: drafts are accepted, and the accept length
depends on the variant being computed as configured. The layer variants change the decoder layer as
speculators writes it: a sliding window shorter than the toy's prompts (its default since v0.7.0) and
Qwen3's layer (``--draft-arch qwen3``: per-head q/k norms), the latter in speculators' layout.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from draftlab.checkpoint import DrafterConfig
from draftlab.fsutil import atomic_dir, write_json_atomic
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner
from draftlab.toy import train
from draftlab.toy.corpus import stdlib_text
from draftlab.toy.pair import AUX_LAYERS, BATCH, LENGTH, TRAIN_BYTES, UNROLL, ToyPair, cache_root, drafter_config_dict

VARIANTS_VERSION = "1"  # bump when anything below changes what gets built
# The variants as their configs spell them: speculators' v0.7 defaults, EAGLE-3.1, and each norm alone.
VARIANT_FLAGS: dict[str, dict[str, bool]] = {
    "norm_before_fc": {"norm_before_fc": True},
    "eagle3.1": {"fc_norm": True, "norm_output": True},
    "speculators-defaults": {"norm_before_fc": True, "norm_output": True},
}
WINDOW = 8  # the sliding-window variant's: far shorter than the training rows (LENGTH) and the tests' prompts
LAYER_VARIANTS: dict[str, dict] = {
    "sliding-window": {"layer_types": ["sliding_attention"], "use_sliding_window": True, "sliding_window": WINDOW},
    "qwen3": {"model_type": "qwen3"},
}
SPECULATORS_LAYOUT = {"qwen3"}  # written as speculators writes them (the layer kind is told only there)
STEPS, WINDOWS = 80, 128


def variant_config(name: str) -> dict:
    """The toy drafter's config.json with ``name``'s flags or layer fields set."""
    if name in VARIANT_FLAGS:
        return {**drafter_config_dict(), **VARIANT_FLAGS[name]}
    flat = {**drafter_config_dict(), **LAYER_VARIANTS[name]}
    return speculators_config(flat) if name in SPECULATORS_LAYOUT else flat


def speculators_config(flat: dict) -> dict:
    """A flat toy drafter config in speculators' layout: the layer's fields in transformer_layer_config, the
    SpecForge formula's residual and feedback stated (norm_before_residual and norm_output false)."""
    outer = ("architectures", "draft_vocab_size", "target_hidden_size", "eagle_config", "torch_dtype",
             "eagle_aux_hidden_state_layer_ids")
    return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
            "speculators_config": {"algorithm": "eagle3"},
            "transformer_layer_config": {k: v for k, v in flat.items() if k not in outer},
            "draft_vocab_size": flat["draft_vocab_size"], "target_hidden_size": flat["target_hidden_size"],
            "eagle_aux_hidden_state_layer_ids": flat["eagle_aux_hidden_state_layer_ids"],
            "norm_before_residual": False, "norm_output": False, "torch_dtype": flat["torch_dtype"]}


def build_variant_drafter(pair: ToyPair, name: str, out: Path, *, seed: int = 0) -> Path:
    """Write a ``name`` variant of the toy drafter to ``out`` (which must not exist)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small ops, and one thread is reproducible
    try:
        with atomic_dir(out) as tmp, torch.random.fork_rng():
            torch.manual_seed(seed)
            gen = torch.Generator().manual_seed(seed)
            runner = TargetRunner.load(pair.target_dir, aux_layers=AUX_LAYERS)
            old = load_file(str(pair.drafter_dir / "model.safetensors"))
            config = variant_config(name)
            drafter = Eagle3Drafter(DrafterConfig.from_dict(config), embed_tokens=runner.embed_tokens)
            drafter.load_state_dict({k: v for k, v in old.items() if k != "t2d"}, strict=False)
            attn = drafter.midlayer.self_attn
            with torch.no_grad():
                for norm in [drafter.input_norm, *(drafter.fc_norm or []), attn.q_norm, attn.k_norm]:
                    if norm is not None:
                        norm.weight.uniform_(0.25, 2.0, generator=gen)
            tokens = torch.frombuffer(bytearray(stdlib_text("train", TRAIN_BYTES)), dtype=torch.uint8).long()
            windows = train.random_windows(tokens, WINDOWS, LENGTH, gen)
            feats, logits = train.target_features(runner, windows, lambda _: None)
            train.train_drafter(drafter, windows, feats, logits, old["t2d"], steps=STEPS, batch=BATCH, unroll=UNROLL,
                                lr=2e-3, gen=gen, progress=lambda _: None)
            write_json_atomic(tmp / "config.json", config)
            tensors = {k: v.detach().contiguous() for k, v in drafter.checkpoint_tensors().items()}
            if name in SPECULATORS_LAYOUT:
                tensors = {k.replace("midlayer.", "layers.0."): v for k, v in tensors.items()}
            save_file({**tensors, "t2d": old["t2d"]}, str(tmp / "model.safetensors"))
    finally:
        torch.set_num_threads(threads)
    return out


def cached_variant_drafter(pair: ToyPair, name: str, seed: int = 0) -> Path:
    """The ``name`` variant drafter under the draftlab cache, built on first use."""
    key = f"{pair.drafter_dir.parent.name}-variant-{name}-v{VARIANTS_VERSION}-seed{seed}"
    folder = cache_root() / key / "drafter"
    if not (folder / "config.json").is_file():
        build_variant_drafter(pair, name, folder, seed=seed)
    return folder
