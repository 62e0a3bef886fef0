"""Load a target's tokenizer from its local folder and check it against the target's vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftlab.checkpoint import read_json, text_config
from draftlab.errors import DraftlabError
from draftlab.readable import input_folder, present, regular_file

# the files a tokenizer folder may hold, checked to be regular before transformers opens them
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json")


def load_tokenizer(path: str | Path) -> Any:
    """A transformers fast tokenizer from a local folder (never the network)."""
    path = Path(path)
    input_folder(path, "no such tokenizer folder")
    for name in TOKENIZER_FILES:
        if present(path / name):
            regular_file(path / name)
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DraftlabError(f"cannot load a tokenizer ({first})", path=path) from None
    if getattr(tok, "backend_tokenizer", None) is None:
        raise DraftlabError("is not a fast tokenizer (no tokenizer.json); convert it with transformers first",
                            path=path)
    return tok


def target_vocab_size(path: str | Path, tokenizer: Any) -> int:
    """The target's vocab_size from ``config.json`` beside the tokenizer, else the tokenizer's length.

    Targets often pad their vocabulary (Qwen: 151936 rows for 151665 tokens), so a tokenizer may be
    shorter than the vocabulary but never longer.
    """
    config_path = Path(path) / "config.json"
    if not config_path.is_file():
        return len(tokenizer)
    config = read_json(config_path)
    vocab = text_config(config).get("vocab_size") if isinstance(config, dict) else None
    if not isinstance(vocab, int) or vocab <= 0:
        raise DraftlabError("has no positive integer vocab_size", path=config_path)
    if len(tokenizer) > vocab:
        raise DraftlabError(f"the tokenizer has {len(tokenizer)} tokens but config.json says vocab_size "
                            f"{vocab}; this tokenizer does not belong to this target", path=path)
    return vocab


def check_tokenizer_fits(tokenizer: Any, vocab_size: int, *, path: str | Path) -> None:
    """Refuse a tokenizer with more tokens than the vocabulary it is used to decode."""
    if len(tokenizer) > vocab_size:
        raise DraftlabError(f"the tokenizer has {len(tokenizer)} tokens but the vocabulary has {vocab_size}; "
                            "pass the target's own tokenizer", path=path)
