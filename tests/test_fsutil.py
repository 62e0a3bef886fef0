"""Outputs get the mode a plain write or mkdir gives under the user's umask (not tempfile's 0600/0700)."""

from __future__ import annotations

import os
import stat

import pytest
from builders import make_pair

from draftlab.compat import fix_pair
from draftlab.fsutil import atomic_dir, write_json_atomic


@pytest.fixture(params=[0o022, 0o027])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_file_and_folder_follow_the_umask(tmp_path, umask):
    write_json_atomic(tmp_path / "out.json", {"a": 1})
    with atomic_dir(tmp_path / "folder") as tmp:
        (tmp / "inner.txt").write_text("x")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain.txt").write_text("x")
    assert mode(tmp_path / "out.json") == mode(tmp_path / "plain.txt") == 0o666 & ~umask
    assert mode(tmp_path / "folder") == mode(tmp_path / "plain") == 0o777 & ~umask
    assert os.umask(umask) == umask  # the umask itself is left as it was


def test_fixed_drafter_is_readable_by_others(tmp_path, target_configs, umask):
    drafter, target = make_pair(tmp_path, target_configs["llama"], max_position_embeddings=1024)
    fix_pair(drafter, target, tmp_path / "fixed", "sglang")
    assert mode(tmp_path / "fixed") == 0o777 & ~umask
    assert mode(tmp_path / "fixed" / "config.json") == 0o666 & ~umask


def test_a_failed_write_names_what_failed_and_leaves_nothing(tmp_path, monkeypatch):
    import errno

    from draftlab.errors import DraftlabError
    from draftlab.fsutil import atomic_dir, write_text_atomic

    dest = tmp_path / "out"
    with pytest.raises(DraftlabError, match=r"No space left on device \(free some space"):
        with atomic_dir(dest) as tmp:
            (tmp / "a").write_text("x")
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "a"))
    with pytest.raises(DraftlabError, match=r"Permission denied \(/data/input.bin\); nothing was written"):
        with atomic_dir(dest):
            raise OSError(errno.EACCES, "Permission denied", "/data/input.bin")  # an input, named
    monkeypatch.setattr("draftlab.fsutil.tempfile.mkstemp", lambda **kw: (_ for _ in ()).throw(
        PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".f.json.x.tmp"))))
    with pytest.raises(DraftlabError, match=r"\(write somewhere you may write\)"):
        write_text_atomic(tmp_path / "f.json", "{}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("error", [
    "Error while serializing: I/O error: No space left on device (os error 28)",  # safetensors' SafetensorError
    "[enforce fail at inline_container.cc:672] . unexpected pos 9951234816 vs 9951234716",  # torch.save
])
def test_a_library_write_that_fails_mid_file_is_one_line_and_leaves_nothing(tmp_path, error):
    """safetensors and torch report a full disk as their own exception types (seen on the GPU machine's
    full disk during train): the atomic writers answer in one line and remove their temp files."""
    from draftlab.errors import DraftlabError
    from draftlab.fsutil import atomic_dir, atomic_path

    with pytest.raises(DraftlabError, match="cannot write: .*nothing was written"):
        with atomic_path(tmp_path / "model.safetensors") as tmp:
            tmp.write_bytes(b"partial")
            raise RuntimeError(error)
    with pytest.raises(DraftlabError, match="cannot write"):
        with atomic_dir(tmp_path / "out"):
            raise RuntimeError(error)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="something else"):  # other errors are not disguised
        with atomic_path(tmp_path / "x"):
            raise RuntimeError("something else")
