"""Issue 45, one bounded cache: every derived file goes to the user cache ($TOKENTRACE_CACHE_DIR),
never into a profile folder; the cache stays under its bound in bytes (least recently used merges
go first, only entries a merge wrote); ``tokentrace cache list|clear``."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time

import pytest
from typer.testing import CliRunner

from support.folder_state import folder_state
from tokentrace.cli import app
from tokentrace.errors import InputError
from tokentrace.merge import cache, cache_size
from tokentrace.runtime.files import CACHE_ENV, cache_root


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    """A fresh user cache holding this machine's compiled engine (copied: no compile here)."""
    compiled = cache_root() / "wasm"
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    if compiled.is_dir():
        shutil.copytree(compiled, root / "wasm")
        os.chmod(root / "wasm", 0o700)
    monkeypatch.setenv(CACHE_ENV, str(root))
    monkeypatch.delenv(cache_size.SIZE_ENV, raising=False)
    return root


def _entry(root, key: str, size: int, used: float, marked: bool = True):
    """A complete merge entry as a merge writes it (mark, manifest, one file of ``size`` bytes);
    not ``marked``: a folder of the user's named like one (its manifest names another key)."""
    entry = root / key
    entry.mkdir(parents=True)
    if marked:
        (entry / cache.ENTRY_MARK).write_text(key)
    (entry / "run-TP0.merged.json").write_bytes(b"x" * size)
    (entry / cache.MANIFEST).write_text(json.dumps({"key": key if marked else "f" * 16,
                                                    "source": f"/profiles/{key}"}))
    os.utime(entry / cache.MANIFEST, (used, used))
    return entry


def test_sizes_are_read_with_units(monkeypatch):
    assert cache_size.parse_size("2G") == 2 << 30
    assert cache_size.parse_size("500 MiB") == 500 << 20
    assert cache_size.parse_size("1.5g") == 3 << 29
    assert cache_size.parse_size("4096") == 4096
    with pytest.raises(InputError, match="TOKENTRACE_CACHE_SIZE"):
        cache_size.parse_size("lots")
    monkeypatch.delenv(cache_size.SIZE_ENV, raising=False)
    assert cache_size.cache_limit() == cache_size.DEFAULT_LIMIT_BYTES == 2 << 30
    monkeypatch.setenv(cache_size.SIZE_ENV, "300M")
    assert cache_size.cache_limit() == 300 << 20


def test_trim_drops_least_recently_used_entries_it_wrote(user_cache):
    root = cache_size.merged_root()
    now = time.time()
    old = _entry(root, "0" * 16, 4000, now - 300)
    middle = _entry(root, "1" * 16, 4000, now - 200)
    kept = _entry(root, "2" * 16, 4000, now - 400)  # the oldest, but the one just used
    newest = _entry(root, "3" * 16, 4000, now - 100)
    foreign = _entry(root, "4" * 16, 4000, now - 900, marked=False)  # no mark: not a merge's
    (root / "notes.txt").write_text("mine")
    base = cache_size.tree_bytes(user_cache) - 5 * 4000  # the compiled engine, marks, manifests
    removed = cache_size.trim(root, base + 3 * 4000 + 2000, keep=kept)
    assert removed == [old, middle]  # LRU order, the kept one skipped, until under the bound
    assert kept.is_dir() and newest.is_dir() and foreign.is_dir() and (root / "notes.txt").is_file()
    assert cache_size.tree_bytes(user_cache) <= base + 3 * 4000 + 2000


def test_trim_drops_what_killed_merges_left_under_the_bound_too(user_cache):
    root = cache_size.merged_root()
    now = time.time()
    complete = _entry(root, "8" * 16, 10, now - 7200)
    left, growing = root / ("9" * 16), root / ("a" * 16)
    for entry in (left, growing):  # marked, no manifest: a merge killed outright, one running
        entry.mkdir()
        (entry / cache.ENTRY_MARK).write_text(entry.name)
        (entry / "run-TP0.merged.json.tmp").write_bytes(b"x" * 100)
    old = now - cache_size.STALE_SECONDS - 60
    os.utime(growing, (old, old))  # the folder is old, its temp file is being written now
    for path in (left, left / cache.ENTRY_MARK, left / "run-TP0.merged.json.tmp"):
        os.utime(path, (old, old))
    listed = {e.path: e.stale for e in cache_size.entries(root)}
    assert listed == {complete: False, left: True, growing: False}
    assert cache_size.trim(root, 1 << 40) == [left]
    assert complete.is_dir() and growing.is_dir() and not left.exists()


def test_reuse_marks_an_entry_as_recently_used(user_cache):
    entry = _entry(cache_size.merged_root(), "5" * 16, 10, time.time() - 3600)
    before = (entry / cache.MANIFEST).stat().st_mtime
    cache_size.touch(entry)
    assert (entry / cache.MANIFEST).stat().st_mtime > before + 3000


def test_cache_list_and_clear(user_cache):
    root = cache_size.merged_root()
    _entry(root, "6" * 16, 1 << 20, time.time() - 120)
    foreign = root / ("7" * 16)
    foreign.mkdir()  # a folder named like an entry, without the mark: the user's
    (user_cache / "annotated").mkdir()
    copy = user_cache / "annotated" / f"run.{'a' * 16}.json"
    copy.write_text("{}")
    (user_cache / "annotated" / "keep.json").write_text("{}")
    listed = CliRunner().invoke(app, ["cache", "list"])
    assert listed.exit_code == 0, listed.output
    assert str(user_cache) in listed.output and "of 2.0 GiB" in listed.output
    assert f"merged/{'6' * 16}" in listed.output and "1.0 MiB" in listed.output
    assert "/profiles/" + "6" * 16 in listed.output and "2 min ago" in listed.output
    assert "7" * 16 not in listed.output
    cleared = CliRunner().invoke(app, ["cache", "clear"])
    assert cleared.exit_code == 0, cleared.output
    assert "removed 2 cache entries" in cleared.output
    assert not (root / ("6" * 16)).exists() and not copy.exists()
    assert foreign.is_dir() and (user_cache / "annotated" / "keep.json").is_file()
    assert (user_cache / "wasm").is_dir() or not (cache_root() / "wasm").exists()  # kept without --all


def test_a_bad_size_setting_is_refused_before_any_merge(user_cache, tmp_path, monkeypatch):
    monkeypatch.setenv(cache_size.SIZE_ENV, "big")
    with pytest.raises(InputError, match="TOKENTRACE_CACHE_SIZE='big'"):
        cache.merged_folder(tmp_path / "no-such-profile")
    assert not cache_size.merged_root().exists() or not any(cache_size.merged_root().iterdir())


def _read_only_copy(sample, tmp_path):
    profile = shutil.copytree(sample, tmp_path / "profile")
    for path in [*profile.iterdir(), profile]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return profile


def test_read_only_profile_folder_is_left_as_it_was(sample_t39, user_cache, tmp_path):
    """open, analyze and view's preparation of a read-only profile folder work, and its file
    list (names, sizes, mtimes) is unchanged after them (checked by content too: a test run as
    root writes through the mode); analyze -o holds its outputs, no copy of the merge."""
    import warnings

    import tokentrace
    from tokentrace.errors import TokentraceWarning
    from tokentrace.view.prepare import prepare_trace

    profile = _read_only_copy(sample_t39, tmp_path)
    before = folder_state(profile)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TokentraceWarning)
            with tokentrace.open(profile) as trace:
                assert trace.merged.folder.parent == user_cache / "merged"
                assert set(trace.kernel_summary()["rank"]) == {"TP0", "TP1"}
        assert folder_state(profile) == before
        out = tmp_path / "out"
        run = CliRunner().invoke(app, ["analyze", str(profile), "-o", str(out), "--no-plots", "--quiet"])
        assert run.exit_code == 0, run.output
        assert folder_state(profile) == before
        assert sorted(p.name for p in out.iterdir()) == ["annotated", "report.html", "tables"]
        report = (out / "report.html").read_text(encoding="utf-8")
        annotated = out / "annotated" / "sample-TP0.annotated.json"
        assert f"tokentrace view {annotated}" in report  # the instant one: served as it is
        assert f"tokentrace view {profile}" in report  # every rank on one timeline
        served = prepare_trace(profile)
        assert served.merged and served.path.is_relative_to(user_cache / "merged")
        assert folder_state(profile) == before
        entries = cache_size.entries()
        assert len(entries) == 2  # per rank (open, analyze: one entry), combined (view)
    finally:
        for path in [profile, *profile.iterdir()]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
