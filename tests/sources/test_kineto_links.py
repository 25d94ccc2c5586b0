"""Launch arrows from correlation ids, on real torch-profiler traces of other projects (copies in
tests/data/peers/, from HTA's and TraceLens's test data; see tests/data/README.md): Kineto of
2022 (`Kernel`/`Runtime` categories, `async_gpu` flows), ROCm (`hipLaunchKernel`,
`hipExtModuleLaunchKernel`, a `hipGraphLaunch` with no flow start for its replay), Triton's
`cuLaunchKernel`, and `cuda_sync` events that the arrows of sync calls point at.

The expected figures are the peers README's (computed from the raw JSON apart from tokentrace):
GPU events (kernel, gpu_memcpy, gpu_memset, any case) and the share of them whose
`args.correlation` is a runtime or driver call's."""

from __future__ import annotations

import gzip
import json

import pytest

from support.paths import DATA
from tokentrace.sources.kineto import read_kineto
from tokentrace.sources.kineto_links import with_arrows

PEERS = DATA / "peers"
pytestmark = pytest.mark.slow  # real traces, if small ones

# file -> (GPU events, of them linked by correlation id, graph-launched kernels)
FIGURES = {
    "hta__trace_file_list__inference_rank_1.json.gz": (4, 4, 0),
    "hta__critical_path__cuda_event_sync__event_sync_trace.json.gz": (5, 5, 0),
    "hta__triton_example__triton_example.json.gz": (1, 1, 0),
    "tracelens__mi210__gpu_only_trace__gpu_only_trace.json.gz": (562, 562, 0),
    "tracelens__sglang_decode__sglang_Qwen3-8B_decode.json.gz": (558, 558, 544),
    "tracelens__vllm_decode_full__graph_execution.json.gz": (434, 434, 421),
}
_ACTIVITY = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}


def _raw(name):
    with gzip.open(PEERS / name) as f:
        return json.load(f)["traceEvents"]


def _calls(raw):
    return {e["args"]["correlation"]: e for e in raw
            if e.get("ph") == "X" and str(e.get("cat")).lower() in ("cuda_runtime", "cuda_driver", "runtime")}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_every_gpu_activity_is_linked_to_the_call_with_its_correlation(name):
    events, linked, _ = FIGURES[name]
    raw = _raw(name)
    activities = [e for e in raw if e.get("ph") == "X" and str(e.get("cat")).lower() in _ACTIVITY]
    assert len(activities) == events
    calls = _calls(raw)
    syncs = [e for e in raw if e.get("cat") == "cuda_sync" and e["args"].get("correlation") in calls]
    trace = read_kineto(PEERS / name).gpu
    assert trace.n_flows == len(trace.launch_pairs) == linked + len(syncs)
    assert trace.unpaired_flows == events - linked
    # each arrow starts at its call and ends at its activity: the pairs' times are theirs
    arrows = with_arrows(trace.events, trace.launch_pairs)
    starts = {e.flow_pair: e for e in arrows if e.ph == "s"}
    finishes = [e for e in arrows if e.ph == "f"]
    assert sorted(starts) == sorted(e.flow_pair for e in finishes) == list(range(trace.n_flows))
    base_ns = min(round(e["ts"] * 1000) for e in activities)
    expected = sorted((round(calls[e["args"]["correlation"]]["ts"] * 1000) - base_ns,
                       round(e["ts"] * 1000) - base_ns) for e in activities + syncs
                      if e["args"].get("correlation") in calls)
    trace_base = min(e.ts_ns for e in trace.events if e.ph == "X" and e.raw.get("cat") in ("kernel", "gpu_memcpy",
                                                                                              "gpu_memset"))
    found = sorted((starts[f.flow_pair].ts_ns - trace_base, f.ts_ns - trace_base) for f in finishes)
    assert found == expected


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_graph_launches_of_cuda_and_hip_are_replays(name):
    _, _, replayed = FIGURES[name]
    trace = read_kineto(PEERS / name).gpu
    kernels = sum(1 for e in trace.events if e.ph == "X" and e.raw.get("cat") == "kernel")
    assert kernels - len(trace.kernels()) == replayed  # a graph's kernels are no launch evidence


def test_old_categories_get_todays_names():
    trace = read_kineto(PEERS / "hta__trace_file_list__inference_rank_1.json.gz")
    cats = {e.raw.get("cat") for e in with_arrows(trace.gpu.events, trace.gpu.launch_pairs)}
    assert {"kernel", "cuda_runtime", "ac2g"} <= cats
    assert not cats & {"Kernel", "Runtime", "async_gpu"}
    assert trace.launch_tid is not None  # the thread of the runtime calls, by today's category


def test_sync_events_get_a_lane_of_their_own():
    trace = read_kineto(PEERS / "hta__critical_path__cuda_event_sync__event_sync_trace.json.gz").gpu
    sync_lanes = {e.lane for e in trace.events if e.ph == "X" and e.raw.get("cat") == "cuda_sync"}
    kernel_lanes = {e.lane for e in trace.events if e.ph == "X" and e.raw.get("cat") == "kernel"}
    assert sync_lanes and not sync_lanes & kernel_lanes
    assert {trace.lane_names[lane] for lane in sync_lanes} == {"GPU Stream 7 syncs", "GPU syncs"}
