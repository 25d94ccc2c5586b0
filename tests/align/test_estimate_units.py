"""Offset estimator on tiny hand-written traces (no files except the reader tests)."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import pytest

from tokentrace.align.estimate import (
    OffsetEstimate,
    check_anchor,
    estimate_from_events,
    estimate_offset,
    is_triton_kernel_name,
)
from tokentrace.sources.host_calls import HostCall, HostEvents, read_host_events

TRUE_OFFSET = 5_000_000_000  # viz_ns = proton_ns + TRUE_OFFSET
LATENCY = 30_000  # launch begin -> kernel start
STEP = 1_000_000


def step_starts(steps: int, periodic: bool = False) -> list[int]:
    """Host start of each step: irregular by up to 600 us (scheduler work varies), or not."""
    starts, t0 = [], 10_000_000
    for step in range(steps):
        starts.append(t0)
        t0 += STEP + (0 if periodic else (step * 7919 % 13) * 50_000)
    return starts


def synthetic(steps: int = 10, lag: int = 0, periodic: bool = False):
    """A decode loop: per step three Triton launches, a library kernel after each, one wait.

    Returns host events (VizTracer ns) and kernels (Proton ns, stream 7). ``lag`` delays every
    kernel (a busier GPU), which must keep the true offset inside the interval.
    """
    launches, waits, kernels = [], [], []
    for t0 in step_starts(steps, periodic):
        for j, name in enumerate(("rms_kernel", "silu_kernel", "rms_kernel")):
            begin = t0 + j * 100_000
            launches.append(HostCall("cuda_utils.launch", begin, begin + 10_000))
            start = begin + LATENCY + lag - TRUE_OFFSET
            # A library kernel launched just before, overlapping the Triton kernel (Hopper PDL).
            kernels.append(("_ZN2at6native_gemm", start - 20_000, start + 15_000, 7))
            kernels.append((name, start, start + 5_000, 7))
        last_end = max(k[2] for k in kernels[-2:]) + TRUE_OFFSET
        wait_begin = t0 + 300_000
        waits.append(HostCall("Tensor.cpu", wait_begin, max(wait_begin, last_end) + 20_000))
    return HostEvents(tuple(launches), tuple(waits)), kernels


def assert_contains_truth(est: OffsetEstimate) -> None:
    assert not est.refused, est.reason
    assert est.lo_ns <= TRUE_OFFSET <= est.hi_ns
    assert est.lo_ns <= est.offset_ns <= est.hi_ns


def test_perfect_match_brackets_truth():
    host, kernels = synthetic()
    est = estimate_from_events(host, kernels)
    assert_contains_truth(est)
    assert est.lo_ns == TRUE_OFFSET - LATENCY  # the smallest latency is exactly LATENCY
    assert abs(est.offset_ns - TRUE_OFFSET) <= 10_000
    assert (est.n_launch_pairs, est.n_waits, est.shift) == (30, 10, 0)
    assert est.n_matches == 40 and est.method == "launch-order+sync"


def test_perfectly_periodic_trace_is_ambiguous():
    # Every step identical: matching launch k with the kernel one step later fits as well.
    host, kernels = synthetic(periodic=True)
    est = estimate_from_events(host, kernels)
    assert est.refused and "ambiguous" in est.reason


def test_streams_tighten_upper_bound():
    host, kernels = synthetic()
    without = estimate_from_events(host, [k[:3] for k in kernels])
    with_streams = estimate_from_events(host, kernels)
    # With streams the overlapping library kernel before the last Triton kernel counts
    # (stream order): it ends 10 us later, so the bound is 10 us tighter.
    assert without.hi_ns - with_streams.hi_ns == 10_000
    assert_contains_truth(with_streams)
    assert_contains_truth(without)


def test_other_stream_kernels_are_not_awaited_by_stream_wait():
    host, kernels = synthetic()
    # A long kernel on another stream, started before a wait: Tensor.cpu does not drain it.
    wait = host.waits[3]
    side_start = wait.begin_ns - TRUE_OFFSET - 200_000
    kernels = sorted(kernels + [("_Zside", side_start, side_start + 5_000_000, 9)],
                     key=lambda k: k[1])
    est = estimate_from_events(host, kernels)
    assert_contains_truth(est)
    assert est.n_waits == 10 and est.n_waits_ignored == 0


def test_lagging_gpu_still_brackets_truth():
    host, kernels = synthetic(lag=150_000)
    est = estimate_from_events(host, kernels)
    assert_contains_truth(est)
    assert est.lo_ns == TRUE_OFFSET - LATENCY - 150_000


def test_overflowed_host_trace_matches_from_the_end():
    host, kernels = synthetic()
    kept = replace(host, launches=host.launches[7:], waits=host.waits[3:], overflow=True)
    est = estimate_from_events(kept, kernels)
    assert_contains_truth(est)
    assert est.shift == 7 and est.n_launch_pairs == 23
    assert "overflowed" in est.reason


def test_unlaunched_kernels_and_missing_tail():
    host, kernels = synthetic()
    warmup = [("rms_kernel", kernels[0][1] - 900_000 - i * 10_000, 0, 7) for i in range(2)]
    warmup = [(n, s, s + 5_000, st) for n, s, _, st in warmup]
    # Two warm-up Triton kernels before the host trace, the last step's launches not in Proton.
    est = estimate_from_events(host, sorted(warmup + kernels[:-6], key=lambda k: k[1]))
    assert_contains_truth(est)
    assert est.shift == 2


def test_inconsistent_evidence_is_refused():
    host, kernels = synthetic()
    # The Proton clock jumps by 2 ms half-way: the later waits return before their kernels end.
    middle = kernels[len(kernels) // 2][1]
    jumped = [(n, s + 2_000_000, e + 2_000_000, st) if s >= middle else (n, s, e, st)
              for n, s, e, st in kernels]
    est = estimate_from_events(host, jumped)
    assert est.refused and est.offset_ns is None and est.lo_ns is None
    assert est.method == "refused" and "inconsistent" in est.reason
    assert check_anchor(est, TRUE_OFFSET) is None


def test_one_non_gpu_wait_is_ignored_not_fatal():
    host, kernels = synthetic(steps=20)
    # Step 5's kernels run 500 us late (busy GPU) and a .cpu() of a host tensor returns at once
    # after the last launch: it cannot have waited for them.
    late = range(6 * 5, 6 * 6)
    kernels = [(n, s + 500_000, e + 500_000, st) if i in late else (n, s, e, st)
               for i, (n, s, e, st) in enumerate(kernels)]
    launch = host.launches[3 * 5 + 2]
    waits = list(host.waits)
    waits[5] = HostCall("Tensor.cpu", launch.end_ns + 1_000, launch.end_ns + 3_000)
    est = estimate_from_events(replace(host, waits=tuple(waits)), kernels)
    assert_contains_truth(est)
    assert est.n_waits_ignored == 1 and "ignored" in est.reason


def test_too_little_evidence_is_refused():
    host, kernels = synthetic(steps=2)
    est = estimate_from_events(host, kernels)
    assert est.refused and "too little evidence" in est.reason


def test_no_wait_is_refused():
    host, kernels = synthetic()
    est = estimate_from_events(replace(host, waits=()), kernels)
    assert est.refused and "no GPU wait" in est.reason


def test_check_anchor():
    host, kernels = synthetic()
    est = estimate_from_events(host, kernels)
    assert check_anchor(est, TRUE_OFFSET) is True
    assert check_anchor(est, TRUE_OFFSET + 5_000_000) is False
    assert check_anchor(est, TRUE_OFFSET - 5_000_000) is False
    assert check_anchor(est, est.hi_ns + 1_000, tolerance_ns=0) is False


@pytest.mark.parametrize("name, triton", [
    ("rmsnorm_kernel", True), ("_attn_fwd", True), ("triton_poi_fused_add_0", True),
    ("_ZN2at6native18elementwise_kernel", False), ("nvjet_sm90_tst_64x8", False),
    ("sm90_xmma_gemm_bf16", False), ("ampere_sgemm_128x64_nn", False),
    ("void foo<int>(int)", False),
])
def test_triton_kernel_names(name, triton):
    assert is_triton_kernel_name(name) is triton


def _write_viz(path, events, gz=False):
    text = json.dumps({"traceEvents": events,
                       "viztracer_metadata": {"version": "1.1.1", "overflow": True}})
    opener = gzip.open if gz else open
    with opener(path, "wt") as handle:
        handle.write(text)


@pytest.mark.parametrize("gz", [False, True])
def test_reader_picks_only_launches_and_waits(tmp_path, gz):
    events = [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "Tensor.cpu"}}]
    for i in range(50):
        events.append({"pid": 1, "tid": 1, "ts": 1000.5 + i, "ph": "X", "dur": 0.25,
                       "name": "cuda_utils.launch", "cat": "FEE"})
        events.append({"pid": 1, "tid": 1, "ts": 2000 + i, "ph": "X", "dur": 3.0,
                       "name": "Tensor.cpu (/x.py:3)", "cat": "FEE"})
    events.append({"pid": 1, "tid": 1, "ts": 3000.001, "ph": "X", "dur": 12.5,
                   "name": "Tensor.item", "cat": "FEE", "args": {"a": {"b": 1}}})
    events.append({"pid": 1, "tid": 1, "ts": 4000, "ph": "X", "dur": 1e-05,
                   "name": "torch._C._cuda_synchronize", "cat": "FEE"})
    path = tmp_path / ("viz.json.gz" if gz else "viz.json")
    _write_viz(path, events, gz)
    host = read_host_events(path, chunk_bytes=97)  # tiny chunks: events cut at every boundary
    assert len(host.launches) == 50 and host.overflow is True and host.unparsed == 0
    assert host.launches[0] == HostCall("cuda_utils.launch", 1_000_500, 1_000_750)
    assert [w.name for w in host.waits] == ["Tensor.item", "torch._C._cuda_synchronize"]
    assert host.waits[0].begin_ns == 3_000_001 and host.waits[0].end_ns == 3_012_501
    assert host.waits[1].waits_for_device and host.waits[1].end_ns == 4_000_000


def test_estimate_offset_reads_the_file(tmp_path):
    host, kernels = synthetic()
    events = [{"pid": 1, "tid": 1, "ts": c.begin_ns / 1000, "ph": "X",
               "dur": (c.end_ns - c.begin_ns) / 1000, "name": c.name, "cat": "FEE"}
              for c in host.launches + host.waits]
    _write_viz(tmp_path / "v.json", events)
    est = estimate_offset(tmp_path / "v.json", kernels)
    assert est == estimate_from_events(replace(host, overflow=True), kernels)


@pytest.mark.parametrize("chunk_bytes", [97, 1 << 20])
def test_copy_feeds_the_same_calls_as_reading(tmp_path, chunk_bytes):
    """The merge's copy hands its ranges to the extraction: same calls as a separate read, with
    the copy's chunks cut anywhere (97 bytes: events cut at every boundary)."""
    from tokentrace.merge.host_copy import _copy
    from tokentrace.options import RawOptions
    from tokentrace.sources.backend import reading

    events = [{"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "Tensor.cpu"}}]
    for i in range(40):
        events.append({"pid": 1, "tid": 1, "ts": 1000.5 + i, "ph": "X", "dur": 0.25,
                       "name": "cuda_utils.launch", "cat": "FEE", "args": {"i": {"j": i}}})
        events.append({"pid": 1, "tid": 1, "ts": 900 + i, "ph": "X", "dur": 3.0,
                       "name": "Tensor.tolist", "cat": "FEE"})
    path = tmp_path / "viz.json"
    _write_viz(path, events)
    copied = []
    with reading(RawOptions(chunk_bytes=chunk_bytes, hold_bytes=min(chunk_bytes, 1 << 20))):
        info, host = _copy(path, copied.append, collect=True)
    expected = read_host_events(path, chunk_bytes=chunk_bytes)
    assert host.launches == expected.launches and host.waits == expected.waits
    assert len(host.launches) == 40 and info.first_ts_ns == 900_000 and info.overflow
    assert len(json.loads(b"[" + b"".join(copied) + b"]")) == len(events)
