"""An EAGLE-3 drafter for the toy DeepSeek-V3 target that ships an MTP head (:mod:`draftlab.toy.mtp`), so that
one target has both candidates (``assess`` weighs them; the GPU smoke run serves both), trained for a few seconds the way the toys train theirs (draftlab.toy.train): an MLA drafter like the MLA toy's, reading the
outputs of layers 0..2 as vLLM names them (the 4-layer target leaves SGLang no way to name them: an id list
starting with 1 is shifted), so that the target has both candidates, each accepting now and then."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from draftlab.checkpoint import DrafterConfig, TargetConfig
from draftlab.checkpoint.synth import mla_drafter_config
from draftlab.engines import written_aux_ids
from draftlab.models.drafter import Eagle3Drafter
from draftlab.models.target import TargetRunner
from draftlab.toy import mla, train
from draftlab.toy.corpus import stdlib_text
from draftlab.toy.mtp import MTP_TOY_VERSION
from draftlab.toy.pair import BATCH, DRAFT_VOCAB, LENGTH, TRAIN_BYTES, UNROLL, cache_root
from draftlab.toy.tokenizer import VOCAB_SIZE
from draftlab.vocab.build import build_mapping
from draftlab.vocab.counts import TokenCounts

STEPS, WINDOWS = 60, 96  # a few seconds on one CPU thread
VERSION = "1"  # bump when anything below changes what gets built
AUX_LAYERS = [0, 1, 2]


def cached_mtp_eagle3_drafter(target: Path) -> Path:
    """The drafter under the draftlab cache, built on first use (keyed by version and Python) for the cached
    toy MTP target ``target``."""
    key = f"toy-mtp-eagle3-v{VERSION}-toy{MTP_TOY_VERSION}-py{sys.version_info.major}{sys.version_info.minor}"
    folder = cache_root() / key
    if not (folder / "drafter" / "model.safetensors").is_file():
        build_mtp_eagle3_drafter(target, folder)
    return folder / "drafter"


def build_mtp_eagle3_drafter(target: Path, out: Path, *, seed: int = 0) -> Path:
    """Train and write the drafter into ``out`` (a new folder); returns it."""
    with train.building(out) as tmp, torch.no_grad():
        shape = json.loads((target / "config.json").read_text())
        ids = written_aux_ids("vllm", AUX_LAYERS, target=TargetConfig.from_dict(shape))
        config = {k: v for k, v in mla_drafter_config(shape, draft_vocab_size=DRAFT_VOCAB, torch_dtype="float32",
                                                      eagle_aux_hidden_state_layer_ids=ids).items() if v is not None}
        runner = TargetRunner.load(target, aux_layers=AUX_LAYERS)
        tokens = torch.frombuffer(bytearray(stdlib_text("train", TRAIN_BYTES)), dtype=torch.uint8).long()
        gen = torch.Generator().manual_seed(seed)
        windows = train.random_windows(tokens, WINDOWS, LENGTH, gen)
        feats, logits = train.target_features(runner, windows, lambda _: None)
        counts = TokenCounts.from_dense(torch.bincount(tokens, minlength=VOCAB_SIZE).numpy())
        mapping = build_mapping(counts, config["draft_vocab_size"], VOCAB_SIZE)
        t2d = torch.from_numpy(mapping.t2d)
        drafter = Eagle3Drafter(DrafterConfig.from_dict(config), embed_tokens=runner.embed_tokens)
        drafter.d2t.copy_(torch.from_numpy(mapping.d2t))
        with torch.enable_grad():
            train.train_drafter(drafter, windows, feats, logits, t2d, steps=STEPS, batch=BATCH, unroll=UNROLL,
                                lr=3e-3, gen=gen, progress=lambda _: None)
        mla._save(tmp / "drafter", config, drafter, t2d)
    return out / "drafter"
