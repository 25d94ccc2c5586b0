"""Issue 5 item 3 and acceptance: anchors are checked against the estimator's interval;
without anchors ``--align auto`` estimates (warning + interval) and ``--align anchors`` refuses."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
import warnings
from pathlib import Path

import orjson
from typer.testing import CliRunner

from tokentrace.cli.app import app
from tokentrace.errors import TokentraceWarning
from tokentrace.merge import merge
from tokentrace.options import MergeOptions

SHIFT_NS = 5_000_000  # 5 ms, far outside any real interval (lo..hi is 0.2-1.8 ms wide)


def _aged_copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    stamp = time.time() - 10
    os.utime(dst, (stamp, stamp))
    return dst


def _shifted_rank0(sample_t39: Path, folder: Path, shift_ns: int) -> tuple[Path, Path]:
    """Rank 0 of the t39 sample with the Proton anchor moved by ``shift_ns``."""
    viz = _aged_copy(sample_t39 / "sample-TP0.viztracer.json.gz", folder / "s-TP0.viztracer.json.gz")
    doc = json.loads(gzip.decompress((sample_t39 / "sample-TP0.proton.chrome_trace.gz").read_bytes()))
    doc["baseTimeNanoseconds"] += shift_ns
    proton = folder / "s-TP0.proton.chrome_trace"
    proton.write_text(json.dumps(doc))
    os.utime(proton, (time.time() - 10, time.time() - 10))
    return viz, proton


def _merge_record(viz: Path, proton: Path, out: Path, **options) -> tuple[dict, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TokentraceWarning)
        merge([viz, proton], out, MergeOptions(**options))
    record = orjson.loads(out.read_bytes())["tokentrace"]["ranks"][0]
    return record, [str(w.message) for w in caught if issubclass(w.category, TokentraceWarning)]


def test_anchor_shifted_by_5ms_is_inconsistent(sample_t39, tmp_path):
    viz, proton = _shifted_rank0(sample_t39, tmp_path, SHIFT_NS)
    record, messages = _merge_record(viz, proton, tmp_path / "m.json")
    assert record["anchor_consistent"] is False
    assert record["offset_lo_ns"] <= record["offset_hi_ns"] < record["offset_ns"]
    assert any("clocks of the two files disagree" in m and "TP0" in m and "outside" in m for m in messages), messages


def test_unshifted_anchors_are_consistent(sample_t39, tmp_path):
    viz, proton = _shifted_rank0(sample_t39, tmp_path, 0)
    record, messages = _merge_record(viz, proton, tmp_path / "m.json")
    assert record["anchor_consistent"] is True
    assert record["offset_lo_ns"] <= record["offset_ns"] <= record["offset_hi_ns"] + 20_000
    assert not any("disagree" in m for m in messages), messages


def test_rank_instant_carries_the_check(sample_t39, tmp_path):
    viz, proton = _shifted_rank0(sample_t39, tmp_path, SHIFT_NS)
    _merge_record(viz, proton, tmp_path / "m.json")
    events = orjson.loads((tmp_path / "m.json").read_bytes())["traceEvents"]
    args = next(e["args"] for e in events if e.get("name") == "tokentrace.rank")
    assert args["anchor_consistent"] is False and args["offset_lo_ns"] is not None


def test_no_check_anchors_skips_the_estimator(sample_t39, tmp_path):
    viz, proton = _shifted_rank0(sample_t39, tmp_path, SHIFT_NS)
    record, messages = _merge_record(viz, proton, tmp_path / "m.json", check_anchors=False)
    assert record["anchor_consistent"] is None and record["offset_lo_ns"] is None
    assert not any("disagree" in m for m in messages)


RUNNER = CliRunner()


def test_cli_t36_auto_estimates_with_interval(sample_t36, tmp_path):
    result = RUNNER.invoke(app, ["merge", str(sample_t36), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    assert "offset estimated from the traces" in result.stderr and "true offset in [" in result.stderr
    assert "matches" in result.stderr
    record = orjson.loads((tmp_path / "sample-TP0.merged.json").read_bytes())["tokentrace"]["ranks"][0]
    assert record["align_method"] == "estimated"
    assert record["offset_lo_ns"] <= record["offset_ns"] <= record["offset_hi_ns"]


def test_cli_t36_anchors_refuses_then_offset_merges(sample_t36, tmp_path):
    result = RUNNER.invoke(app, ["merge", str(sample_t36), "--align", "anchors", "-o", str(tmp_path)])
    assert result.exit_code == 1
    error = result.stderr.strip()
    assert len(error.splitlines()) == 1 and "sample-TP0.proton.chrome_trace.gz has no clock anchor" in error
    assert "triton <= 3.8" in error and "--offset-us" in error and "--align auto" in error
    result = RUNNER.invoke(app, ["merge", str(sample_t36), "--offset-us", "150926783.883", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.stderr


def test_no_check_anchors_still_estimates_without_a_host_anchor(sample_t39, tmp_path):
    """``align`` decides itself when it needs the estimate: with ``--no-check-anchors`` and only
    the Proton anchor, ``auto`` estimates (it used to run the estimator without kernels)."""
    doc = json.loads(gzip.decompress((sample_t39 / "sample-TP0.viztracer.json.gz").read_bytes()))
    del doc["viztracer_metadata"]["baseTimeNanoseconds"]
    viz = tmp_path / "s-TP0.viztracer.json"
    viz.write_text(json.dumps(doc))
    proton = _aged_copy(sample_t39 / "sample-TP0.proton.chrome_trace.gz", tmp_path / "s-TP0.proton.chrome_trace.gz")
    os.utime(viz, (time.time() - 10, time.time() - 10))
    record, messages = _merge_record(viz, proton, tmp_path / "m.json", check_anchors=False)
    assert record["align_method"] == "estimated" and record["offset_lo_ns"] <= record["offset_ns"] <= record["offset_hi_ns"]
    assert any("offset estimated from the traces" in m for m in messages), messages


def test_align_takes_a_request_and_the_rank_evidence(tmp_path):
    """The policy alone: the user's offset wins, anchors without the check need no evidence,
    a missing anchor under ``--align anchors`` names the file."""
    import pytest

    from tokentrace.align.policy import AlignRequest, RankEvidence, align
    from tokentrace.errors import AlignmentError
    from tokentrace.options import AlignMode

    evidence = RankEvidence("TP0", tmp_path / "v.json", 1_000, tmp_path / "p.json", 5_000)
    assert align(AlignRequest(offset_us=2.5), evidence).offset_ns == 2_500
    anchored = align(AlignRequest(check_anchors=False), evidence)
    assert (anchored.method, anchored.offset_ns, anchored.anchor_consistent) == ("anchors", 4_000, None)
    missing = RankEvidence("TP0", tmp_path / "v.json", 1_000, tmp_path / "p.json", None)
    with pytest.raises(AlignmentError, match="p.json has no clock anchor"):
        align(AlignRequest(AlignMode.ANCHORS), missing)
    assert AlignRequest(AlignMode.ANCHORS).requires_anchors() and not AlignRequest().requires_anchors()
    assert not AlignRequest(offset_us=1.0).may_estimate() and AlignRequest(check_anchors=False).may_estimate()
    assert not AlignRequest(AlignMode.ANCHORS, check_anchors=False).may_estimate()
