"""Issue 13, item 5: a cache entry (``merged/`` of the user cache, where open, analyze, view and
diff merge; a ``cache_dir=`` folder; earlier releases' ``OUT/merged`` and ``.tokentrace-cache``)
is complete with its manifest, written last, or absent; a named cache folder keeps its newest
entries only."""

from __future__ import annotations

import gzip
import json
import os
import time

import pytest

from support.hostile import age, aged_sample
from tokentrace.errors import InputError
from tokentrace.merge import cache, cache_size
from tokentrace.options import MergeOptions


@pytest.fixture()
def profile(tmp_path):
    return aged_sample(tmp_path)


def test_a_failed_merge_leaves_no_entry(profile, tmp_path):
    proton = profile / "sample-TP1.proton.chrome_trace.gz"
    raw = gzip.decompress(proton.read_bytes())
    proton.unlink()
    (profile / "sample-TP1.proton.chrome_trace").write_bytes(raw[: len(raw) // 2])
    age(profile / "sample-TP1.proton.chrome_trace")
    with pytest.raises(InputError, match="ends early"):
        cache.merged_folder(profile, tmp_path / "merged")
    assert list((tmp_path / "merged").iterdir()) == []  # before: an entry with TP0's file


def test_the_manifest_is_last_and_a_failure_before_it_removes_the_entry(profile, tmp_path, monkeypatch):
    written = []
    real = cache.write_bytes

    def failing(path, data):
        if path.name != cache.MANIFEST:
            return real(path, data)
        written.append(sorted(p.name for p in path.parent.iterdir()))
        raise KeyboardInterrupt  # a signal at the last step

    monkeypatch.setattr(cache, "write_bytes", failing)
    with pytest.raises(KeyboardInterrupt):
        cache.merged_folder(profile, tmp_path / "merged", combined=False)
    assert written == [[cache.ENTRY_MARK, "sample-TP0.merged.json", "sample-TP1.merged.json"]]  # merged first
    assert list((tmp_path / "merged").iterdir()) == []
    monkeypatch.setattr(cache, "write_bytes", real)
    entry = cache.merged_folder(profile, tmp_path / "merged", combined=False)
    assert (entry.folder / cache.MANIFEST).is_file() and not entry.reused


def _entry(root, name, age_s, manifest=True):
    """An entry as a merge leaves it: named by its key, marked first, the manifest last."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / cache.ENTRY_MARK).write_text(name)
    path = folder / (cache.MANIFEST if manifest else "sample-TP0.merged.json")
    path.write_text("{}")
    stamp = time.time() - age_s
    for written in (path, folder / cache.ENTRY_MARK, folder):
        os.utime(written, (stamp, stamp))
    return folder


def test_prune_keeps_the_newest_complete_entries(tmp_path):
    root = tmp_path / "merged"
    complete = [_entry(root, f"{i:016x}", age_s=100 * i) for i in range(6)]
    old_partial = _entry(root, "a" * 16, age_s=cache_size.STALE_SECONDS + 60, manifest=False)
    young_partial = _entry(root, "b" * 16, age_s=1, manifest=False)  # being written
    removed = cache.prune(root, keep=4)
    assert sorted(removed) == sorted([complete[4], complete[5], old_partial])
    assert sorted(p.name for p in root.iterdir()) == [*(f"{i:016x}" for i in range(4)), "b" * 16]
    assert young_partial.is_dir()


@pytest.mark.slow
def test_an_analyze_cache_is_pruned_after_each_merge(profile, tmp_path):
    root = tmp_path / "merged"
    for offset in range(cache.KEEP_ENTRIES + 2):  # each offset: another key, another entry
        options = MergeOptions(align="offset", offset_us=72198000000.0 + offset)
        cache.merged_folder(profile, root, options, combined=False)
        time.sleep(0.02)
    entries = [p for p in root.iterdir() if p.is_dir()]
    assert len(entries) == cache.KEEP_ENTRIES
    assert all(json.loads((p / cache.MANIFEST).read_text())["key"] == p.name for p in entries)
