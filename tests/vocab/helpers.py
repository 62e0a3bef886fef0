"""Tiny tokenizers, targets and drafters built in the tests (nothing is downloaded)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
from safetensors.torch import save_file

from draftlab.vocab import VocabMapping

WORDS = ("def class return import yield lambda async await value token draft target vocab count "
         "build remap mapping offset tensor layer hidden state cache batch prefix").split()

# A ChatML-like template, as Qwen's: no {% generation %} blocks, so spans come from prefixes.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The same rendering with the assistant reply (and its end marker) inside {% generation %}.
CHATML_GENERATION = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}"
    "{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Like Qwen3: replies followed by later turns lose their reasoning ("<think>...</think>").
CHATML_THINKING = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and not loop.last %}{{ m['content'].split('</think>')[-1] | trim }}"
    "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]


def sentence(rng: random.Random, n: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "."


def make_tokenizer(folder: Path, template: str | None, vocab: int = 300) -> Path:
    """A byte-level BPE tokenizer trained on generated text, saved as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([sentence(rng) for _ in range(300)], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    if template is not None:
        fast.chat_template = template
    fast.save_pretrained(folder)
    return folder


def write_config(folder: Path, config: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def make_target(folder: Path, vocab_size: int, hidden: int = 32, *, tied: bool = False, seed: int = 1,
                dtype: torch.dtype = torch.bfloat16) -> Path:
    """A tiny Llama target: config.json plus embed/lm_head tensors (all a vocab tool reads)."""
    g = torch.Generator().manual_seed(seed)
    write_config(folder, {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": 2 * hidden, "num_hidden_layers": 8, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": vocab_size, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": tied, "torch_dtype": "bfloat16",
    })
    tensors = {"model.embed_tokens.weight": torch.randn(vocab_size, hidden, generator=g).to(dtype),
               "model.norm.weight": torch.ones(hidden, dtype=dtype)}
    if not tied:
        tensors["lm_head.weight"] = torch.randn(vocab_size, hidden, generator=g).to(dtype)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def make_drafter(folder: Path, mapping: VocabMapping, hidden: int = 32, *, layout: str = "specforge",
                 seed: int = 2, dtype: torch.dtype = torch.bfloat16) -> Path:
    """A one-layer EAGLE-3 drafter of either layout with random weights (bf16 by default) and ``mapping``."""
    g = torch.Generator().manual_seed(seed)
    prefix = "midlayer." if layout == "specforge" else "layers.0."
    heads, kv, head_dim, inter = 4, 2, hidden // 4, 2 * hidden

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    tensors = {
        "fc.weight": w(hidden, 3 * hidden),
        prefix + "self_attn.q_proj.weight": w(heads * head_dim, 2 * hidden),
        prefix + "self_attn.k_proj.weight": w(kv * head_dim, 2 * hidden),
        prefix + "self_attn.v_proj.weight": w(kv * head_dim, 2 * hidden),
        prefix + "self_attn.o_proj.weight": w(hidden, heads * head_dim),
        prefix + "mlp.gate_proj.weight": w(inter, hidden),
        prefix + "mlp.up_proj.weight": w(inter, hidden),
        prefix + "mlp.down_proj.weight": w(hidden, inter),
        prefix + "hidden_norm.weight": w(hidden),
        prefix + "input_layernorm.weight": w(hidden),
        prefix + "post_attention_layernorm.weight": w(hidden),
        "norm.weight": w(hidden),
        "lm_head.weight": w(mapping.draft_size, hidden),
        "d2t": torch.from_numpy(mapping.d2t.copy()),
        "t2d": torch.from_numpy(mapping.t2d.copy()),
    }
    layer = {
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": 1,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
        "vocab_size": mapping.vocab_size, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
    }
    if layout == "specforge":
        config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", **layer,
                  "draft_vocab_size": mapping.draft_size, "torch_dtype": "bfloat16"}
    else:
        config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
                  "transformer_layer_config": {"model_type": "llama", **layer},
                  "draft_vocab_size": mapping.draft_size, "target_hidden_size": hidden,
                  "speculators_config": {"algorithm": "eagle3", "verifier": {"name_or_path": "target"}}}
    write_config(folder, config)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def tree_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path, to prove an input was left untouched."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
