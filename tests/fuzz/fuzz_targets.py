"""The readers draftlab points at files that strangers publish, each with a structure-aware strategy.

A target pairs a hypothesis strategy (mutations of a valid file: truncations, wrong types, huge
numbers, NaN, deep nesting, unicode, raw bytes) with a function that writes the input into a fresh
folder and runs the reader on it. The contract every target is held to: the reader returns a result
or raises :class:`DraftlabError`, in bounded time and memory. Shared by test_fuzz_readers.py (a
CI-sized run) and fuzz_survey.py (a longer survey, as a table).
"""

from __future__ import annotations

import json
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

# --- building blocks ---------------------------------------------------------------------------

HUGE = [2**31, 2**53 + 1, 2**63, 2**64 + 7, -(2**63) - 1, 10**400]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 300), st.sampled_from(HUGE),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.sampled_from(["", "BF16", "F32", "I64", "BOOL", "LlamaForCausalLM", "\u202e\ud7ff", "model.safetensors",
                     "../x", "/etc/passwd", "a\\b"]),
)
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=12)


def deep(depth: int) -> str:
    """JSON nested ``depth`` levels deep (Python's parser gives up with RecursionError near 1000s)."""
    return "[" * depth + "]" * depth


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


def _replace(doc: Any, path: tuple, value: Any, delete: bool) -> Any:
    if not path:
        return value
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    head, rest = path[0], path[1:]
    if delete and not rest:
        del copy[head]
    else:
        copy[head] = _replace(copy[head], rest, value, delete)
    return copy


@st.composite
def mutated_json(draw: Callable, valid: Any) -> str:
    """``valid`` serialised after a few structure-aware mutations, or its text cut or garbled."""
    doc = valid
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        delete = bool(path) and draw(st.booleans())
        doc = _replace(doc, path, draw(JSON_VALUES), delete)
    text = json.dumps(doc, allow_nan=True)
    how = draw(st.sampled_from(["as is", "as is", "truncate", "deep", "garble"]))
    if how == "truncate":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    elif how == "deep":
        text = text.replace("null", deep(draw(st.sampled_from([50, 5000, 100_000]))), 1) if "null" in text else deep(
            100_000)
    elif how == "garble":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=4)) + text[at:]
    return text


def safetensors_bytes(header: dict[str, Any], data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


VALID_HEADER = {"__metadata__": {"format": "pt"},
                "d2t": {"dtype": "I64", "shape": [4], "data_offsets": [0, 32]},
                "t2d": {"dtype": "BOOL", "shape": [8], "data_offsets": [32, 40]}}
VALID_DATA = struct.pack("<4q", 0, 1, 1, 3) + bytes([1, 0, 1, 1, 0, 0, 1, 0])  # draft 0..3 -> target 0, 2, 3, 6


@st.composite
def mutated_safetensors(draw: Callable, header: dict[str, Any] = VALID_HEADER, data: bytes = VALID_DATA) -> bytes:
    """A valid file with its header JSON mutated, its length field lied about, or its bytes cut."""
    how = draw(st.sampled_from(["header", "header", "length", "truncate", "bytes", "flip"]))
    if how == "header":
        text = draw(mutated_json(header)).encode("utf-8", "surrogatepass")
        return struct.pack("<Q", len(text)) + text + data
    blob = safetensors_bytes(header, data)
    if how == "length":
        return struct.pack("<Q", draw(st.sampled_from([0, 1, 2**60, 2**64 - 1, len(blob), 100 * 2**20]))) + blob[8:]
    if how == "truncate":
        return blob[: draw(st.integers(0, len(blob) - 1))]
    if how == "flip":
        at = draw(st.integers(0, len(blob) - 1))
        return blob[:at] + bytes([blob[at] ^ (1 << draw(st.integers(0, 7)))]) + blob[at + 1:]
    return draw(st.binary(max_size=64))


def jsonl(rows: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """A few lines (mutated rows, raw bytes, blank lines) joined into one JSONL file."""
    line = st.one_of(rows.map(lambda s: s.encode("utf-8", "surrogatepass")), st.binary(max_size=16), st.just(b""))
    return st.lists(line, min_size=1, max_size=4).map(lambda lines: b"\n".join(lines))


# --- targets -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    name: str  # the reader, as the RESULTS.md table names it
    strategy: st.SearchStrategy
    run: Callable[[Path, Any], Any]  # (a fresh empty folder, the drawn input) -> the reader's result


def _write(folder: Path, name: str, content: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    return path


def _header(folder: Path, blob: bytes) -> Any:
    from draftlab.checkpoint.safetensors_header import read_header

    return read_header(_write(folder, "model.safetensors", blob))


TARGET_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                 "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8,
                 "intermediate_size": 128, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
                 "rope_theta": 10000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
DRAFTER_CONFIG = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 64,
                  "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8,
                  "draft_vocab_size": 4, "intermediate_size": 128, "max_position_embeddings": 2048,
                  "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "target_hidden_size": 64,
                  "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]},
                  "speculators_config": {"verifier": {"name_or_path": "t", "architectures": ["LlamaForCausalLM"]}},
                  "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _configs(folder: Path, text: str) -> Any:
    """config.json through open_checkpoint (read_json) and both config readers."""
    from draftlab.checkpoint.configs import drafter_config, target_config
    from draftlab.checkpoint.reader import open_checkpoint

    _write(folder, "model.safetensors", safetensors_bytes(VALID_HEADER, VALID_DATA))
    _write(folder, "config.json", text)
    ckpt = open_checkpoint(folder)
    return target_config(ckpt), drafter_config(ckpt)


VALID_INDEX = {"metadata": {"total_size": 40}, "weight_map": {"d2t": "model-00001-of-00002.safetensors",
                                                              "t2d": "model-00002-of-00002.safetensors"}}


def _index(folder: Path, text: str) -> Any:
    from draftlab.checkpoint.reader import open_checkpoint

    _write(folder, "config.json", json.dumps(DRAFTER_CONFIG))
    _write(folder, "model-00001-of-00002.safetensors",
           safetensors_bytes({"d2t": VALID_HEADER["d2t"]}, VALID_DATA[:32]))
    _write(folder, "model-00002-of-00002.safetensors",
           safetensors_bytes({"t2d": {"dtype": "BOOL", "shape": [8], "data_offsets": [0, 8]}}, VALID_DATA[32:]))
    _write(folder, "model.safetensors.index.json", text)
    return open_checkpoint(folder).tensors


PROMPT_ROWS = [{"input_ids": [1, 2, 3]}, {"prompt": "hello"}, {"messages": [{"role": "user", "content": "hi"}]}]


def _prompts(folder: Path, blob: bytes) -> Any:
    from draftlab.decode.prompts import read_prompts

    return read_prompts(_write(folder, "prompts.jsonl", blob), tokenizer_dir=folder, vocab_size=8)


DATA_ROWS = [{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]},
             {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
             {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
             {"text": "plain"}]


def _vocab_count(folder: Path, blob: bytes) -> Any:
    from draftlab.vocab.count import count_tokens

    return count_tokens([_write(folder, "data.jsonl", blob)], None, vocab_size=8, workers=1)


def _train_rows(folder: Path, blob: bytes) -> Any:
    from draftlab.train.data import tokenized_rows

    return tokenized_rows(_write(folder, "data.jsonl", blob), None, 8, 16)


def _feature_blob(data: dict[str, Any]) -> bytes:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(data, buf)
    return buf.getvalue()


@st.composite
def feature_files(draw: Callable) -> tuple[str, bytes]:
    """A feature file in one of the three layouts, with its tensors' shapes, dtypes or bytes off."""
    import torch

    from draftlab.checkpoint.arrays import save_arrays  # noqa: F401  (safetensors files come from safetensors)

    n = draw(st.integers(0, 5))
    widths = draw(st.sampled_from([(8, 3), (8, 2), (7, 3), (8, 4)]))  # (hidden, layers) vs the drafter's (8, 3)
    hidden, layers = widths
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.int64]))
    m = draw(st.sampled_from([n, n + 1, max(0, n - 1)]))  # rows of features vs tokens
    ids = torch.arange(n) if draw(st.booleans()) else torch.arange(n).float()
    layout = draw(st.sampled_from(["specforge", "speculators", "hs"]))
    if layout == "specforge":
        data: dict[str, Any] = {"input_ids": ids, "loss_mask": torch.ones(draw(st.sampled_from([n, n + 2]))),
                                "aux_hidden_state": torch.zeros(1, m, hidden * layers, dtype=dtype),
                                "hidden_state": torch.zeros(draw(st.sampled_from([(1, m, hidden), (m,)])))}
        name = "data_0.ckpt"
    elif layout == "speculators":
        data = {"input_ids": ids, "hidden_states": [torch.zeros(m, hidden, dtype=dtype) for _ in range(layers)]}
        name = "data_0.pt"
    else:
        from safetensors.torch import save

        blob = save({"token_ids": torch.arange(n), "hidden_states": torch.zeros(m, layers, hidden)})
        return "hs_0.safetensors", draw(st.one_of(st.just(blob), mutated_bytes(blob)))
    drop = draw(st.sampled_from([None, *data]))
    if drop is not None:
        del data[drop]
    blob = _feature_blob(data)
    return name, draw(st.one_of(st.just(blob), st.just(blob), mutated_bytes(blob)))


def mutated_bytes(blob: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(st.integers(0, len(blob) - 1).map(lambda k: blob[:k]),
                     st.tuples(st.integers(0, len(blob) - 1), st.integers(1, 255)).map(
                         lambda t: blob[:t[0]] + bytes([blob[t[0]] ^ t[1]]) + blob[t[0] + 1:]))


def _features(folder: Path, named: tuple[str, bytes]) -> Any:
    from draftlab.probe.features import feature_files as files
    from draftlab.probe.features import read_sample

    name, blob = named
    _write(folder, name, blob)
    return [read_sample(p, hidden_size=8, num_aux=3) for p in files(folder)]


def _mapping(folder: Path, blob: bytes) -> Any:
    from draftlab.checkpoint.d2t import validate_d2t
    from draftlab.vocab.mapping import load_mapping

    mapping = load_mapping(_write(folder, "d2t.safetensors", blob))
    return validate_d2t(mapping.d2t, mapping.t2d, 8)


def _drafter_mapping(folder: Path, blob: bytes) -> Any:
    """d2t/t2d inside a drafter folder, read the way check does (Checkpoint.read_ints, arrays)."""
    from draftlab.checkpoint.arrays import read_arrays
    from draftlab.checkpoint.d2t import validate_d2t
    from draftlab.checkpoint.reader import open_checkpoint

    _write(folder, "config.json", json.dumps(DRAFTER_CONFIG))
    ckpt = open_checkpoint(_write(folder, "model.safetensors", blob))
    out = []
    if "d2t" in ckpt.tensors:
        out.append(validate_d2t(ckpt.read_ints("d2t"), ckpt.read_ints("t2d") if "t2d" in ckpt.tensors else None, 8))
    out.append({k: v.sum() for k, v in read_arrays(ckpt).items()})
    return out


VALID_PROFILE = {"format": "draftlab-profile/1", "model": {"hidden_size": 64, "num_layers": 4},
                 "verify": [{"batch_size": 1, "tokens": 1, "median_ms": 2.0, "p10_ms": 1.9, "p90_ms": 2.1},
                            {"batch_size": 1, "tokens": 4, "median_ms": 2.5}],
                 "draft_step": [{"batch_size": 1, "tokens": 1, "median_ms": 0.5}],
                 "draft_extend": [{"batch_size": 1, "tokens": 4, "median_ms": 0.6}],
                 "allreduce": None, "overhead_ms": 0.1, "context_tokens": 256, "timer": "cuda-event",
                 "warmup": 3, "repeats": 10, "environment": {"gpu": "H200"}}
VALID_PROBE = {"config": {"steps": 3, "topk": 1, "num_draft_tokens": 4}, "mean_accept_length": 2.5,
               "batch_size": 1, "target": {"name": "t"}}


def _profile(folder: Path, text: str) -> Any:
    from draftlab.cost.profile import load_profile

    return load_profile(_write(folder, "PROFILE.json", text))


def _probes(folder: Path, text: str) -> Any:
    from draftlab.cost.probes import load_probes

    return load_probes([_write(folder, "probe.json", text)])


VALID_ACCEPTANCE = {"schema_version": "1.0", "measured": True, "num_speculative_tokens": 3,
                    "marginal_accept_rates": [0.6, 0.3, 0.0], "conditional_accept_rates": [0.6, 0.5, 0.0],
                    "mean_accept_length": 1.9, "accept_length_model": "chain_analytic",
                    "accept_length_by_k": {"3": 1.9}, "acceptance_length_histogram": {"1": 40, "2": 30, "3": 30},
                    "speculation_config": {"steps": 3, "topk": 1, "num_draft_tokens": 4}}


def _acceptance(folder: Path, text: str) -> Any:
    """speculation_profile.json as plan --profile and --synthetic-acceptance read it, mapped onto a few configs."""
    from draftlab.acceptance.synthetic import parse_synthetic
    from draftlab.cost.model import SpecConfig
    from draftlab.cost.probes import profile_accept_lengths

    path = _write(folder, "speculation_profile.json", text)
    synthetic = parse_synthetic(str(path))
    return profile_accept_lengths(path, [SpecConfig(3, 1, 4), SpecConfig(1, 1, 2)]), synthetic.record(2)


def _row(valid: list[dict]) -> st.SearchStrategy[str]:
    return st.sampled_from(valid).flatmap(mutated_json)


TARGETS = [
    Target("safetensors header", mutated_safetensors(), _header),
    Target("config.json (target, drafter)", st.sampled_from([TARGET_CONFIG, DRAFTER_CONFIG]).flatmap(mutated_json),
           _configs),
    Target("model.safetensors.index.json", mutated_json(VALID_INDEX), _index),
    Target("prompts (decode/prompts.py)", jsonl(_row(PROMPT_ROWS)), _prompts),
    Target("vocab count rows (vocab/rows.py)", jsonl(_row(DATA_ROWS)), _vocab_count),
    Target("train rows (train/data.py)", jsonl(_row(DATA_ROWS)), _train_rows),
    Target("feature files (probe/features.py)", feature_files(), _features),
    Target("d2t/t2d mapping file (vocab/mapping.py)", mutated_safetensors(), _mapping),
    Target("drafter d2t/t2d (reader, arrays.py, d2t.py)", mutated_safetensors(), _drafter_mapping),
    Target("PROFILE.json (plan)", mutated_json(VALID_PROFILE), _profile),
    Target("speculation_profile.json (plan --profile, --synthetic-acceptance)", mutated_json(VALID_ACCEPTANCE),
           _acceptance),
    Target("probe JSON (plan)", st.one_of(mutated_json(VALID_PROBE), mutated_json([VALID_PROBE, VALID_PROBE])),
           _probes),
]
BY_NAME = {t.name: t for t in TARGETS}


def run_target(target: Target, value: Any) -> Any:
    """Run one input in a fresh folder; a DraftlabError propagates, as anything else does."""
    with tempfile.TemporaryDirectory() as folder:
        return target.run(Path(folder), value)
