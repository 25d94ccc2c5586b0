"""The estimator's calls come out of the host copy the same wherever they are picked out: in the
forked child's copy (not asked beside), in this process beside the child (asked; a plain or a
gzip report), or in the copy thread (no output file to share), on a real report of the sample
set; and a merge asks beside only where a plain report is much the larger input."""

from __future__ import annotations

import gzip
import os
import shutil

import pytest

from support.paths import DATA
from tokentrace.merge.host_copy import HostCopy
from tokentrace.runtime.processes import can_fork
from tokentrace.sources.host_calls import read_host_events

REPORT = DATA / "sample_t39_tp2" / "sample-TP0.viztracer.json.gz"


@pytest.fixture(scope="module")
def plain_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("plain") / "sample-TP0.viztracer.json"
    with gzip.open(REPORT, "rb") as source, open(path, "wb") as target:
        shutil.copyfileobj(source, target)
    return path


@pytest.mark.parametrize("read_beside", [True, False], ids=["links read beside", "no read beside"])
@pytest.mark.parametrize("variant", ["plain, forked child, beside", "plain, forked child", "gzip, forked child, beside",
                                     "plain, thread"])
def test_the_calls_are_the_same_wherever_they_are_picked_out(tmp_path, plain_report, variant, read_beside):
    if "forked" in variant and not can_fork():
        pytest.skip("no fork here")
    report = plain_report if variant.startswith("plain") else REPORT
    expected = read_host_events(report)
    assert len(expected.launches) > 400 and expected.waits  # the sample launches and waits
    written: list = []
    with open(tmp_path / "out.json", "wb") as out:
        with HostCopy(report, written.append, out if "forked" in variant else None, collect=True,
                      beside="beside" in variant) as copy:
            links = copy.read_beside(True) if read_beside else None
            found = copy.result()
        out.flush()
        copied = (tmp_path / "out.json").read_bytes() if "forked" in variant else b"".join(written)
    assert found.calls.launches == expected.launches and found.calls.waits == expected.waits
    assert found.calls.unparsed == expected.unparsed and found.calls.overflow == expected.overflow
    assert copied.count(b'"cuda_utils.launch"') == len(expected.launches)  # the events were copied
    if links is not None:
        assert links.unparsed == 0


def test_no_calls_are_picked_out_unless_asked(tmp_path, plain_report):
    with open(tmp_path / "out.json", "wb") as out:
        with HostCopy(plain_report, lambda data: None, out if can_fork() else None) as copy:
            assert copy.read_beside(False).ids == frozenset()
            assert copy.result().calls is None


def test_a_merge_picks_the_calls_out_beside_only_for_a_report_much_larger_than_its_gpu_trace(tmp_path):
    from tokentrace.merge.rank import CALLS_BESIDE_RATIO, _calls_beside
    from tokentrace.sources.discover import RankFiles

    report, gpu = tmp_path / "r.viztracer.json", tmp_path / "r.proton.chrome_trace"
    gpu.write_bytes(b"{" + b" " * 998 + b"}")
    for size, beside in ((CALLS_BESIDE_RATIO * 1000 + 1, True), (CALLS_BESIDE_RATIO * 1000, False)):
        report.write_bytes(b" " * size)
        assert _calls_beside(RankFiles("r", None, report, (gpu,))) is beside
    gpu.write_bytes(gzip.compress(b"{}"))  # the parent would inflate it: its side is the longer
    assert not _calls_beside(RankFiles("r", None, report, (gpu,)))
    gpu.write_bytes(b"{" + b" " * 998 + b"}")
    report.write_bytes(gzip.compress(os.urandom(CALLS_BESIDE_RATIO * 1000 + 1)))  # inflated once, in the child
    assert not _calls_beside(RankFiles("r", None, report, (gpu,)))
