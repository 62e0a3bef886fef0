"""A byte-level tokenizer whose token ids are the byte values (0..255), plus four special tokens
and a tiny chat template, so `prompt` and `messages` rows work with the toy target."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

END, USER, ASSISTANT, SYSTEM = 256, 257, 258, 259
SPECIALS = {"<|end|>": END, "<|user|>": USER, "<|assistant|>": ASSISTANT, "<|system|>": SYSTEM}
VOCAB_SIZE = 260
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _byte_chars() -> list[str]:
    """GPT-2's printable stand-in character for each byte value (the ByteLevel pre-tokenizer's alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def byte_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {c: i for i, c in enumerate(_byte_chars())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>")
    fast.add_special_tokens({"additional_special_tokens": [s for s in SPECIALS if s != "<|end|>"]})
    fast.chat_template = CHAT_TEMPLATE
    return fast
