"""Copies as private as their inputs (issue 31): traces that only their owner can read (0600 in a
0700 folder) give merged files, cache entries and annotated copies that only the owner can read,
in folders only the owner can enter, whatever the umask (022 here: what a shared machine has,
and what gave 0644 files in 0755 folders before). Inputs readable by all still give 0644."""

from __future__ import annotations

import os
import shutil
import stat
import warnings
from pathlib import Path

import pytest

import tokentrace
from tokentrace.errors import TokentraceWarning
from tokentrace.merge import merge
from tokentrace.options import MergeOptions
from tokentrace.runtime.files import cache_root, write_bytes
from tokentrace.view import prepare_trace


@pytest.fixture(autouse=True)
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        yield


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _private_copy(sample: Path, folder: Path, file_mode: int = 0o600, folder_mode: int = 0o700) -> Path:
    """The sample's traces copied into ``folder`` with ``file_mode``, the folder ``folder_mode``."""
    folder.mkdir()
    for path in sample.glob("*.gz"):
        if ".truth." in path.name:
            continue
        shutil.copyfile(path, folder / path.name)
        os.chmod(folder / path.name, file_mode)
    os.chmod(folder, folder_mode)
    return folder


def _modes_under(root: Path) -> dict[str, int]:
    """Every file and folder under ``root`` (itself included) and its mode."""
    found = {".": _mode(root)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = _mode(path)
    return found


def _open_to_others(modes: dict[str, int]) -> dict[str, str]:
    return {name: oct(mode) for name, mode in modes.items() if mode & 0o077}


def test_view_of_a_private_folder_caches_private_copies(sample_t39, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENTRACE_CACHE_DIR", str(tmp_path / "user"))
    folder = _private_copy(sample_t39, tmp_path / "profile")
    served = prepare_trace(folder)
    cache = tmp_path / "user" / "merged"  # the user cache: never the profile folder
    assert served.path.is_relative_to(cache) and not (folder / ".tokentrace-cache").exists()
    modes = _modes_under(cache)
    assert len(modes) >= 6  # the cache folder, the entry, its mark, manifest, ranks, combined
    assert _open_to_others(modes) == {}
    assert modes["."] == 0o700 and _mode(served.path) == 0o600


def test_an_annotated_copy_in_the_user_cache_is_private(merged_t39, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENTRACE_CACHE_DIR", str(tmp_path / "user" / "cache"))
    mine = tmp_path / "mine.merged.json"
    shutil.copyfile(merged_t39[0], mine)
    os.chmod(mine, 0o600)
    served = prepare_trace(mine)
    assert served.path.parent == tmp_path / "user" / "cache" / "annotated"
    modes = _modes_under(tmp_path / "user")
    assert _mode(served.path) == 0o600  # in folders made 0700 (the cache root, annotated/)
    assert [modes[p] for p in (".", "cache", "cache/annotated")] == [0o700] * 3


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_library_merge_writes_as_privately_as_its_inputs(sample_t39, tmp_path, jobs):
    folder = _private_copy(sample_t39, tmp_path / "profile")
    out = tmp_path / "out" / "merged"  # no journal open here: the outputs carry the mask
    merge([folder], out, MergeOptions(combine=True, jobs=jobs))
    modes = _modes_under(tmp_path / "out")
    assert len(modes) == 5  # out, merged, two ranks, the combined file
    assert _open_to_others(modes) == {}


def test_the_open_cache_of_a_private_folder_is_private(sample_t39, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENTRACE_CACHE_DIR", str(tmp_path / "user"))
    folder = _private_copy(sample_t39, tmp_path / "profile")
    with tokentrace.open(folder):
        pass
    assert not (folder / ".tokentrace-cache").exists()  # the user cache: never the profile folder
    modes = _modes_under(cache_root() / "merged")
    assert len(modes) >= 5 and _open_to_others(modes) == {}


def test_group_readable_inputs_give_group_readable_copies(sample_t39, tmp_path):
    folder = _private_copy(sample_t39, tmp_path / "profile", 0o640, 0o750)
    os.chmod(folder / "sample-TP1.proton.chrome_trace.gz", 0o644)  # the strictest input counts
    out = tmp_path / "out"
    merge([folder], out, MergeOptions(combine=True))
    modes = _modes_under(out)
    assert modes["."] == 0o750 and set(modes.values()) == {0o750, 0o640}


def test_public_inputs_still_give_the_umask_mode(tmp_path):
    from tokentrace.runtime.files import private_like

    public = tmp_path / "in.json"
    public.write_bytes(b"{}")
    os.chmod(public, 0o644)
    with private_like([public]):
        write_bytes(tmp_path / "new" / "out.json", b"{}")
    assert _mode(tmp_path / "new") == 0o755 and _mode(tmp_path / "new" / "out.json") == 0o644
    with private_like([tmp_path / "in.json", None]):
        os.chmod(public, 0o600)
        write_bytes(tmp_path / "new" / "out.json", b"{}")  # the mask is the inputs' at entry
    assert _mode(tmp_path / "new" / "out.json") == 0o644
    with private_like([public]):
        write_bytes(tmp_path / "new" / "out.json", b"{}")
    assert _mode(tmp_path / "new" / "out.json") == 0o600


def test_a_file_written_for_the_journal_elsewhere_gets_the_mask(tmp_path):
    # a merge worker that did not inherit the mask (a spawned or forkserver process) writes
    # its rank's file with the umask's mode; the command's journal tightens it when it commits
    from tokentrace.runtime.files import refuse_inputs
    from tokentrace.runtime.journal import journal

    private = tmp_path / "in.json"
    private.write_bytes(b"{}")
    os.chmod(private, 0o600)
    out, kept = tmp_path / "rank.merged.json", tmp_path / "kept.json"
    kept.write_bytes(b"the user's")
    os.chmod(kept, 0o644)
    with journal() as written:
        refuse_inputs([out], [private])
        written.track(out)
        written.track(kept)  # tracked, never written again: put back as it was
        out.write_bytes(b"{}")
        os.chmod(out, 0o644)
    assert _mode(out) == 0o600 and _mode(kept) == 0o644 and kept.read_bytes() == b"the user's"
