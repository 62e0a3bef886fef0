"""The two pieces of a target the probe needs when its hidden states come from files: the input
embedding (SGLang gives it to the drafter) and the lm_head (the target's argmax from its final state).

Only these tensors are read from the checkpoint, so a target of any size costs one vocab x hidden
matrix or two.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from draftlab.checkpoint import TargetConfig, open_checkpoint, read_json
from draftlab.errors import DraftlabError
from draftlab.models.devices import parse_device, parse_dtype


class TargetHeads:
    """``embed_tokens`` and ``lm_head`` of a target checkpoint, plus its EOS ids."""

    def __init__(self, path: str | Path, *, dtype: str = "float32", device: str = "cpu") -> None:
        path = Path(path)
        ckpt = open_checkpoint(path)
        self.config = TargetConfig.from_dict(ckpt.config)
        embed_name = _find(ckpt.tensors, "embed_tokens.weight", path)
        head_name = next((n for n in ckpt.tensors if n.endswith("lm_head.weight")), None)
        if head_name is None and not self.config.tie_word_embeddings:
            raise DraftlabError("has no lm_head.weight and does not tie it to the embedding", path=path)
        tensors = ckpt.load([embed_name] + ([head_name] if head_name else []))
        torch_dtype, torch_device = parse_dtype(dtype), parse_device(device)
        embed = tensors[embed_name].to(torch_device, torch_dtype)
        self.embed_tokens = nn.Embedding.from_pretrained(embed, freeze=True)
        head = tensors[head_name].to(torch_device, torch_dtype) if head_name else embed
        self.lm_head = nn.Linear(head.shape[1], head.shape[0], bias=False, device=torch_device, dtype=torch_dtype)
        self.lm_head.weight = nn.Parameter(head, requires_grad=False)
        self.eos_token_ids = _eos_ids(path, self.config)


def _find(names: dict, suffix: str, path: Path) -> str:
    found = [n for n in names if n.endswith(suffix)]
    if not found:
        raise DraftlabError(f"has no {suffix} tensor", path=path)
    return min(found, key=len)


def _eos_ids(path: Path, config: TargetConfig) -> set[int]:
    ids: set[int] = set()
    values = [config.eos_token_id]
    if (path / "generation_config.json").is_file():
        values.append(read_json(path / "generation_config.json").get("eos_token_id"))
    for value in values:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    return ids
