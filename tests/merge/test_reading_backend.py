"""The reading configuration (:mod:`tokentrace.sources.backend`) is chosen in one place and
reaches every reader: the host copy's forked child and its thread, and a merge's ranks, which
read as their ``MergeOptions.raw`` says whatever was in force around the merge."""

from __future__ import annotations

import warnings

import pytest

from support.paths import DATA
from tokentrace.merge import merge
from tokentrace.merge.host_copy import HostCopy
from tokentrace.options import MergeOptions, RawOptions
from tokentrace.runtime.processes import can_fork
from tokentrace.sources import backend
from tokentrace.sources.backend import reading, recording_passes

REPORT = DATA / "sample_t39_tp2" / "sample-TP0.viztracer.json.gz"
FALLBACK = RawOptions(fast_path=False)


def test_reading_sets_the_configuration_for_its_block_only():
    assert backend.current() == RawOptions()
    with reading(FALLBACK):
        assert backend.current() is FALLBACK
        with reading(RawOptions(chunk_bytes=64)) as inner:
            assert backend.current() is inner
        assert backend.current() is FALLBACK
    assert backend.current() == RawOptions()


@pytest.mark.parametrize("raw", [RawOptions(), FALLBACK], ids=["fast path", "fallback"])
@pytest.mark.parametrize("variant", ["thread", "forked child"])
def test_the_host_copy_reads_as_the_configuration_where_it_was_made(tmp_path, raw, variant):
    if variant == "forked child" and not can_fork():
        pytest.skip("no fork here")
    written: list = []
    with open(tmp_path / "out.json", "wb") as out, reading(raw):
        # the thread variant: no output file to share with a child
        with HostCopy(REPORT, written.append, out if variant == "forked child" else None) as copy:
            found = copy.result()
    assert found.viz.streamed is raw.fast_path  # the fallback parses the report whole
    assert found.viz.has_events and (variant == "forked child" or written)


def test_a_merge_reads_as_its_options_say(tmp_path):
    """The ranks read as ``MergeOptions.raw`` says, not as the configuration around the merge."""
    small = RawOptions(piecewise_bytes=1000, piece_bytes=20_000)
    folder = DATA / "sample_t39_tp2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with reading(FALLBACK), recording_passes() as passes:
            merge([folder], tmp_path / "a", MergeOptions(raw=small))
        with recording_passes() as default:
            merge([folder], tmp_path / "b", MergeOptions())
    assert [p.piecewise for p in passes] == [True, True]  # each rank's Proton trace, in pieces
    assert [p.piecewise for p in default] == [False, False]
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in files:  # the fast path (MergeOptions' own), not the fallback around it
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
