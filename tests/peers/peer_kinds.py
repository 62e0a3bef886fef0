"""Every kind of drafter folder draftlab writes, on a toy-sized target, and each peer's logits for it.

The peers are SpecForge (``LlamaForCausalLMEagle3``, the trainer most drafters come from) and
speculators (``Eagle3DraftModel`` and its ``eagle3`` converter, vLLM's format), installed without
their heavy dependencies. Used by ``test_peers.py`` and by ``peer_table.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from draftlab.checkpoint.synth import write_target
from draftlab.compat import fix_pair
from draftlab.compat.convert import convert_drafter
from draftlab.models.drafter import Eagle3Drafter
from draftlab.vocab import VocabMapping, remap_drafter

H, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, LAYERS = 32, 4, 2, 8, 48, 97, 8
AUX = [1, 3, 5]  # canonical layers the drafters are "trained" on (the default for 8 layers is [1, 3, 4])
DRAFT_IDS = list(range(0, 80, 2))  # 40 draft tokens
NEW_IDS = list(range(1, 97, 3))  # 32 tokens, half shared with DRAFT_IDS: remap keeps some rows, inits others
PEER_VERSIONS = {"specforge": "0.2.0", "speculators": "0.9.0"}


def peer_import_error(peer: str) -> str | None:
    """Why ``peer`` cannot be imported here (None when it can)."""
    try:
        with _quiet():
            if peer == "specforge":
                import specforge.data.preprocessing  # noqa: F401
                import specforge.modeling.draft.llama3_eagle  # noqa: F401
            else:
                import speculators.convert.eagle.eagle3_converter  # noqa: F401
                import speculators.models.eagle3  # noqa: F401
    except Exception as exc:  # any import failure means the peer is unusable here
        return f"{type(exc).__name__}: {exc}"
    return None


def skip_reason(peer: str, why: str) -> str:
    name = {"specforge": "SpecForge", "speculators": "speculators"}[peer]
    return (f"{name} {PEER_VERSIONS[peer]} cannot be imported ({why}); install the peers with the README's "
            "'Run the whole test suite' peer line (pip install --no-deps ...)")


@contextlib.contextmanager
def _quiet():
    """The peers print, warn and log (loguru) freely; keep test output readable."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            try:
                from loguru import logger
                logger.disable("speculators")
            except ImportError:
                pass
            yield
        finally:
            logging.disable(logging.NOTSET)


# --- inputs: a target and a trained-looking drafter ----------------------------------------------

def target_config() -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "intermediate_size": 64,
            "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM, "vocab_size": VOCAB, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0, "bos_token_id": 4, "eos_token_id": 5, "tie_word_embeddings": False,
            "torch_dtype": "float32"}


def drafter_tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    """SpecForge-named float32 weights; norm weights away from 1 so a skipped norm shows in the logits."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) / math.sqrt(shape[-1])

    def norm() -> torch.Tensor:
        return 1 + 0.3 * torch.randn(H, generator=g)

    mapping = VocabMapping.from_target_ids(DRAFT_IDS, VOCAB)
    p = "midlayer."
    return {
        "fc.weight": w(H, 3 * H), "norm.weight": norm(), "lm_head.weight": w(len(DRAFT_IDS), H),
        "embed_tokens.weight": torch.randn(VOCAB, H, generator=g),
        "d2t": torch.from_numpy(mapping.d2t.copy()), "t2d": torch.from_numpy(mapping.t2d.copy()),
        p + "self_attn.q_proj.weight": w(HEADS * HEAD_DIM, 2 * H),
        p + "self_attn.k_proj.weight": w(KV_HEADS * HEAD_DIM, 2 * H),
        p + "self_attn.v_proj.weight": w(KV_HEADS * HEAD_DIM, 2 * H),
        p + "self_attn.o_proj.weight": w(H, HEADS * HEAD_DIM),
        p + "mlp.gate_proj.weight": w(INTER, H), p + "mlp.up_proj.weight": w(INTER, H),
        p + "mlp.down_proj.weight": w(H, INTER), p + "input_layernorm.weight": norm(),
        p + "hidden_norm.weight": norm(), p + "post_attention_layernorm.weight": norm(),
    }


def variant_tensors(flags: dict[str, bool], seed: int = 2) -> dict[str, torch.Tensor]:
    """The norms a variant adds (``input_norm`` over the 3H features, one ``fc_norm`` per aux feature),
    weights away from 1 so a skipped norm shows."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    if flags.get("norm_before_fc"):
        out["input_norm.weight"] = 1 + 0.3 * torch.randn(3 * H, generator=g)
    if flags.get("fc_norm"):
        out.update({f"fc_norm.{i}.weight": 1 + 0.3 * torch.randn(H, generator=g) for i in range(3)})
    return out


def write_flat_drafter(folder: Path, *, layer_prefix: str = "midlayer.", extra: dict[str, torch.Tensor] | None = None,
                       **fields: object) -> Path:
    """A SpecForge-layout drafter trained on AUX, with ``fields`` overriding its config and ``extra``
    tensors added."""
    folder.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
              "intermediate_size": INTER, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
              "head_dim": HEAD_DIM, "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "hidden_act": "silu", "max_position_embeddings": 512, "vocab_size": VOCAB,
              "draft_vocab_size": len(DRAFT_IDS),
              "bos_token_id": 4, "eos_token_id": 5, "tie_word_embeddings": False, "torch_dtype": "float32",
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX}, **fields}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    tensors = {k.replace("midlayer.", layer_prefix): v for k, v in drafter_tensors().items()}
    save_file({**tensors, **(extra or {})}, str(folder / "model.safetensors"))
    return folder


def speculators_convert(drafter: Path, target: Path, out: Path, aux_layers: list[int] | None = None) -> Path:
    """speculators' own ``eagle3`` converter, as ``speculators convert --algorithm eagle3`` runs it
    (``aux_layers`` are what a user passes in ``--algorithm-kwargs``; canonical, written in vLLM's
    input-of-layer convention as speculators expects)."""
    from speculators.convert.eagle.eagle3_converter import Eagle3Converter

    ids = [k + 1 for k in aux_layers] if aux_layers is not None else None
    with _quiet():
        Eagle3Converter().convert(drafter, out, base_model=str(target), validate=True,
                                  eagle_aux_hidden_state_layer_ids=ids)
    return out


# --- what draftlab writes ------------------------------------------------------------------------

FLAT, SPECULATORS = "specforge", "speculators"


@dataclass(frozen=True)
class Kind:
    name: str
    layout: str  # of the folder draftlab writes
    needs: str | None  # a peer needed to build the input (speculators' converter), or None
    build: Callable[[Path, Path], Path]  # (root, target) -> the folder draftlab wrote


def _fix_specforge(root: Path, target: Path) -> Path:
    src = write_flat_drafter(root / "in-layers0", layer_prefix="layers.0.", architectures=["Eagle3LlamaForCausalLM"],
                             max_position_embeddings=256, target_hidden_size=None)
    return fix_pair(src, target, root / "fix-specforge", "sglang").out


def _converted(root: Path, target: Path) -> Path:
    """speculators' converter output for a draftlab-layout drafter, run as users run it (ids lost)."""
    out = root / "converted"
    if not out.exists():
        speculators_convert(write_flat_drafter(root / "in-flat"), target, out)
    return out


def _fix_speculators(engine: str) -> Callable[[Path, Path], Path]:
    def build(root: Path, target: Path) -> Path:
        return fix_pair(_converted(root, target), target, root / f"fix-speculators-{engine}", engine,
                        aux_layers=AUX).out
    return build


def _remap(layout: str) -> Callable[[Path, Path], Path]:
    def build(root: Path, target: Path) -> Path:
        src = write_flat_drafter(root / "in-remap") if layout == FLAT else _converted(root, target)
        mapping = VocabMapping.from_target_ids(NEW_IDS, VOCAB)
        return remap_drafter(src, mapping, root / f"remap-{layout}", init="target-lm-head", target=target).output
    return build


def _convert(layout: str) -> Callable[[Path, Path], Path]:
    """``convert --to layout`` of a SpecForge drafter (to speculators) or of speculators' own converter
    output, with the aux ids restored by ``check --fix --aux-layers`` (to specforge)."""
    def build(root: Path, target: Path) -> Path:
        if layout == SPECULATORS:
            src = write_flat_drafter(root / "in-convert")
        else:
            src = fix_pair(_converted(root, target), target, root / "converted-ids", "vllm", aux_layers=AUX).out
        return convert_drafter(src, layout, root / f"convert-{layout}", target=target).out
    return build


KINDS = (
    Kind("check --fix, SpecForge layout -> sglang", FLAT, None, _fix_specforge),
    Kind("check --fix --aux-layers, speculators layout -> sglang (flattened)", FLAT, "speculators",
         _fix_speculators("sglang")),
    Kind("check --fix --aux-layers, speculators layout -> vllm", SPECULATORS, "speculators", _fix_speculators("vllm")),
    Kind("vocab remap, SpecForge layout", FLAT, None, _remap(FLAT)),
    Kind("vocab remap, speculators layout", SPECULATORS, "speculators", _remap(SPECULATORS)),
    Kind("convert --to speculators, from SpecForge layout", SPECULATORS, None, _convert(SPECULATORS)),
    Kind("convert --to specforge, from speculators layout", FLAT, "speculators", _convert(FLAT)),
)


def make_target(root: Path) -> Path:
    return write_target(root / "target", target_config())


# --- each side's logits for one folder -----------------------------------------------------------

@dataclass
class Loaded:
    logits: torch.Tensor  # [n, draft_vocab] float32
    missing: list[str]
    unexpected: list[str]


def inputs(n: int = 12, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [n] and target features [n, 3H] (a prefill's worth)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n,), generator=g), torch.randn(n, 3 * H, generator=g)


def draftlab_logits(folder: Path, ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """draftlab's drafter forward (models/drafter.py), causal over a prefill, with the folder's own embedding."""
    drafter = Eagle3Drafter.load(folder, use_target_embedding=False)
    n = ids.numel()
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    with torch.no_grad():
        logits, _, _ = drafter.forward_masked(ids[None], hidden[None], torch.arange(n)[None], causal[None])
    return logits[0]


def specforge_load(folder: Path, ids: torch.Tensor, hidden: torch.Tensor) -> Loaded:
    """SpecForge's ``LlamaForCausalLMEagle3(config)`` built from the folder's config.json, the weights
    loaded into it, and its training-time step: embed, project_hidden_states (fc), backbone (SDPA,
    causal), compute_logits.

    Built from the config rather than ``from_pretrained``: under transformers 5.24 (SpecForge 0.2.0
    pins 5.8.1) ``from_pretrained`` leaves SpecForge's own RoPE cache buffers uninitialised (NaN).
    """
    from safetensors.torch import load_file
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from transformers import LlamaConfig

    with _quiet():
        model = LlamaForCausalLMEagle3(LlamaConfig.from_pretrained(str(folder))).eval()
        result = model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
        with torch.no_grad():
            embeds = model.embed_input_ids(ids[None])
            h = model.project_hidden_states(hidden[None])
            out = model.backbone(embeds, h, None, None, torch.arange(ids.numel())[None])
            logits = model.compute_logits(out)
    return Loaded(logits[0].float(), sorted(result.missing_keys), sorted(result.unexpected_keys))


def speculators_load(folder: Path, ids: torch.Tensor, hidden: torch.Tensor) -> Loaded:
    """speculators' ``Eagle3DraftModel.from_pretrained`` and one draft step through its own modules
    (fc, embed, rotary, decoder layers with eager attention, norm, lm_head), at its positions 1..n."""
    from speculators.models.eagle3 import Eagle3DraftModel

    with _quiet():
        model = Eagle3DraftModel.from_pretrained(str(folder)).eval()
        names = set(safe_open(str(folder / "model.safetensors"), "pt").keys())
        own = set(model.state_dict())
        ignored = set(model._keys_to_ignore_on_load_missing) | {"verifier_lm_head.weight", "verifier_norm.weight"}
        model.config.transformer_layer_config._attn_implementation = "eager"
        n = ids.numel()
        positions = 1 + torch.arange(n)[None]
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        with torch.no_grad():
            x = torch.cat([model.embed_tokens(ids[None]), model.fc(hidden[None])], dim=-1)
            rope = model.rotary_emb(x, positions)
            for layer in model.layers:
                x = layer(x, attention_mask=mask, position_ids=positions, position_embeddings=rope)
            logits = model.lm_head(model.norm(x))
    return Loaded(logits[0].float(), sorted(own - names - ignored), sorted(names - own))


def speculators_step(folder: Path, ids: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """speculators' own ``Eagle3DraftModel.forward`` (one TTT step, eager attention, positions 1..n):
    the logits and the hidden it feeds to the next step, caught at its lm_head and last decoder layer
    (with ``norm_output`` the fed-back state is the lm_head's input, norm(out); else the layer's output)."""
    from speculators.models.eagle3 import Eagle3DraftModel

    seen: dict[str, torch.Tensor] = {}
    with _quiet():
        model = Eagle3DraftModel.from_pretrained(str(folder), attn_implementation="eager").eval()
        model.lm_head.register_forward_hook(lambda m, args, out: seen.update(head_in=args[0], logits=out))
        model.layers[-1].register_forward_hook(
            lambda m, args, out: seen.update(layer_out=out[0] if isinstance(out, tuple) else out))
        with torch.no_grad():
            model(hidden[None], ids[None], torch.zeros(1, ids.numel(), dtype=torch.long), ttt_steps=1)
    fed = seen["head_in"] if model.config.norm_output else seen["layer_out"]
    return seen["logits"][0].float(), fed[0].float()


def peer_load(peer: str, folder: Path, layout: str, root: Path, target: Path,
              ids: torch.Tensor, hidden: torch.Tensor) -> tuple[Loaded, str]:
    """Load ``folder`` in ``peer`` the way a user would; returns the result and how it got there.

    speculators reads only its own layout, so a flat folder goes through its converter first (with
    the aux ids the folder names, as ``--algorithm-kwargs`` would pass them)."""
    if peer == "specforge":
        return specforge_load(folder, ids, hidden), "LlamaForCausalLMEagle3(config) + load_state_dict"
    if layout == SPECULATORS:
        return speculators_load(folder, ids, hidden), "from_pretrained"
    config = json.loads((folder / "config.json").read_text())
    aux = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    converted = speculators_convert(folder, target, root / f"{folder.name}-to-speculators", aux)
    return speculators_load(converted, ids, hidden), "speculators convert, then from_pretrained"
