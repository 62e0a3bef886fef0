from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .helpers import CHATML, CHATML_GENERATION, CHATML_THINKING, make_target, make_tokenizer

VOCAB = 320  # the target pads its vocabulary beyond the tokenizer's 300 tokens, as Qwen does


@pytest.fixture(scope="session")
def tokenizers_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tokenizers")
    make_tokenizer(root / "plain", None)
    make_tokenizer(root / "chatml", CHATML)
    make_tokenizer(root / "generation", CHATML_GENERATION)
    make_tokenizer(root / "thinking", CHATML_THINKING)
    return root


def _target_with_tokenizer(root: Path, dest: Path, kind: str) -> Path:
    make_target(dest, VOCAB)
    for f in (root / kind).iterdir():
        shutil.copy(f, dest / f.name)
    return dest


@pytest.fixture(scope="session")
def target_plain(tokenizers_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A target folder (config, weights, tokenizer) whose tokenizer has no chat template."""
    return _target_with_tokenizer(tokenizers_root, tmp_path_factory.mktemp("t") / "plain", "plain")


@pytest.fixture(scope="session")
def target_chat(tokenizers_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _target_with_tokenizer(tokenizers_root, tmp_path_factory.mktemp("t") / "chat", "chatml")


@pytest.fixture(scope="session")
def target_generation(tokenizers_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _target_with_tokenizer(tokenizers_root, tmp_path_factory.mktemp("t") / "gen", "generation")


@pytest.fixture(scope="session")
def target_thinking(tokenizers_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _target_with_tokenizer(tokenizers_root, tmp_path_factory.mktemp("t") / "think", "thinking")
