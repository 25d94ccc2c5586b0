"""Issue 31: a re-recorded trace copied over the old one with its size and mtime kept (``cp -p``,
``rsync -t``) must merge again, not be answered from the old merge: the cache key holds a
digest of each input's content, not only path, size and mtime."""

from __future__ import annotations

import gzip
import os
import shutil

from support.hostile import VIZ_TS, sample_rank
from tokentrace.merge import find_profile
from tokentrace.merge.cache import cache_key, merged_folder
from tokentrace.options import MergeOptions


def _copy_over_keeping_stamp(path, data: bytes) -> None:
    """What ``cp -p new old`` does when both have one size: new bytes, the old mtime."""
    stat = path.stat()
    assert len(data) == stat.st_size
    path.write_bytes(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _rerecorded(data: bytes) -> bytes:
    """The same trace with its first host event 1 µs later: one digit changed, same size."""
    changed = VIZ_TS[:-1] + bytes([VIZ_TS[-1] ^ 1])
    assert VIZ_TS in data
    return data.replace(VIZ_TS, changed, 1)


def test_a_same_size_copy_with_the_old_mtime_merges_again(tmp_path, sample_t39):
    folder = shutil.copytree(sample_t39, tmp_path / "profile")
    first = merged_folder(folder, tmp_path / "cache", combined=False)
    viz = folder / "sample-TP0.viztracer.json.gz"
    _copy_over_keeping_stamp(viz, _same_size_gzip(viz))
    again = merged_folder(folder, tmp_path / "cache", combined=False)
    assert not again.reused and again.folder != first.folder


def _same_size_gzip(viz) -> bytes:
    """The re-recorded report gzip-compressed to exactly the old file's size (level, then
    filename padding in the header: gzip's FNAME field)."""
    size = viz.stat().st_size
    raw = _rerecorded(gzip.decompress(viz.read_bytes()))
    for level in range(9, 0, -1):
        body = gzip.compress(raw, compresslevel=level, mtime=0)
        pad = size - len(body)
        if pad >= 2:  # FLG.FNAME: a zero-terminated name after the 10-byte header
            return body[:3] + bytes([body[3] | 0x08]) + body[4:10] + b"x" * (pad - 1) + b"\0" + body[10:]
    raise AssertionError("cannot compress to the old size")


def test_a_large_plain_file_changed_at_either_end_changes_the_key(tmp_path):
    viz, _ = sample_rank(tmp_path / "in")
    data = viz.read_bytes()
    assert len(data) > 12 << 20  # sampled, not read whole: both ends always count
    key = cache_key(find_profile(viz.parent), MergeOptions())
    _copy_over_keeping_stamp(viz, _rerecorded(data))
    assert cache_key(find_profile(viz.parent), MergeOptions()) != key
    _copy_over_keeping_stamp(viz, data[:-100] + b" " + data[-99:])
    assert cache_key(find_profile(viz.parent), MergeOptions()) != key
    _copy_over_keeping_stamp(viz, data)
    assert cache_key(find_profile(viz.parent), MergeOptions()) == key
