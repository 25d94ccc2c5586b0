"""Steps found from the torch profiler's own evidence (`tokentrace.steps`), on a cut-down copy of
a real trace of another project: vLLM eager decode on a B200, torch profiler with `with_stack`
(TraceLens's test data `tests/traces/b200/eager_trace.json.gz`, MIT License, Copyright (c) 2024 -
2025 Advanced Micro Devices, Inc.; see tests/data/README.md).

The cut (`tests/data/peers/step_tracelens__b200__eager_trace.json.gz`) keeps the trace's header,
its three user annotations (host and GPU copies; vLLM's `execute_context_1(888_788544)_
generation_0(0)` around the whole step), and up to the start of the model's 9th layer (its 9th
`ModuleList.__getitem__` call) its kernels, copies, runtime and driver calls (args: correlation,
stream, device) and its Python calls at depth <= 8 or on a `Tensor` (args dropped); flows, `cpu_op`
events and the rest are left out. 175 kernels, 224 launch calls, 8 `__getitem__` calls.

On this cut (as on the whole trace, 36 layers) the step finder used to pick a torch frame run
once per layer (`ModuleList.__getitem__` / `Module.__getattr__` of torch/nn/modules); the trace
holds one engine step, which vLLM's annotation marks. Variants of the cut, edited here, check the
order of evidence: torch's `ProfilerStep#N` markers over annotations, numbered annotations of one
shape as one step name, and no step at all rather than a library frame.
"""

from __future__ import annotations

import gzip
import json

import pytest

from support.paths import DATA
from tokentrace.catalog import open_trace
from tokentrace.merge import merge

CUT = DATA / "peers" / "step_tracelens__b200__eager_trace.json.gz"
STEP = "execute_context_1(888_788544)_generation_0(0)"
pytestmark = pytest.mark.slow  # a real trace, if a small one

FOUND = "SELECT rank, source, step_name, step_index, ts, step_dur, open FROM tt_steps!('')"


def _events():
    with gzip.open(CUT) as f:
        return json.load(f)


def _steps(tmp_path, trace=None):
    """The found steps and `tt_auto_steps` of the cut (or of ``trace``, an edited copy)."""
    source = CUT
    if trace is not None:
        source = tmp_path / "edited.json"
        source.write_text(json.dumps(trace))
    merged = merge([source], tmp_path / "merged")
    with open_trace(merged.outputs[0], warn=False) as engine:
        engine.query("INCLUDE PERFETTO MODULE tokentrace.steps;")
        return (engine.query(FOUND), engine.query("SELECT * FROM tt_auto_steps"),
                engine.query("SELECT * FROM tt_auto_annotation_steps"))


def _annotation(trace, name=STEP):
    return next(e for e in trace["traceEvents"] if e.get("cat") == "user_annotation" and e["name"] == name)


def _launches(trace):
    return sorted((e for e in trace["traceEvents"] if e.get("cat") in ("cuda_runtime", "cuda_driver")
                   and any(word in e["name"] for word in ("Launch", "Memcpy", "Memset"))),
                  key=lambda e: e["ts"])


def test_vllm_step_annotation_is_the_step(tmp_path):
    trace = _events()
    launches = _launches(trace)
    found, frames, annotations = _steps(tmp_path)
    assert found[["rank", "source", "step_name", "step_index", "open"]].values.tolist() == [
        ["TP0", "annotation", "execute_context_N(N_N)_generation_N(N)", 1, 0]]
    step = _annotation(trace)
    assert found.step_dur[0] == round(step["dur"] * 1000)  # 87,412,863 ns, the annotation's own
    # it encloses every launch call of its lane (the kept ones: up to layer 9)
    assert annotations[["shape", "depth", "calls", "launches"]].values.tolist() == [
        ["execute_context_N(N_N)_generation_N(N)", 0, 1, len(launches)]]
    assert len(launches) == 224
    # no frame of torch (nn.Module containers, __getattr__, ...) is a step, even as a fallback
    assert frames.empty


def test_profiler_step_markers_come_first(tmp_path):
    trace = _events()
    step = _annotation(trace)
    half = step["dur"] / 2
    for number, start in ((7, step["ts"]), (8, step["ts"] + half)):
        trace["traceEvents"].append({**step, "name": f"ProfilerStep#{number}", "ts": start, "dur": half})
    found, _, _ = _steps(tmp_path, trace)
    assert found[["source", "step_name", "step_index"]].values.tolist() == [
        ["profiler", "ProfilerStep#N", 1], ["profiler", "ProfilerStep#N", 2]]


def test_numbered_annotations_are_one_step_name(tmp_path):
    """The annotation cut in three at the 75th and 150th launch calls, each named for its batch as
    vLLM names its steps."""
    trace = _events()
    step = _annotation(trace)
    trace["traceEvents"].remove(step)
    launches = _launches(trace)
    bounds = [step["ts"], launches[75]["ts"], launches[150]["ts"], step["ts"] + step["dur"]]
    for index in range(3):
        trace["traceEvents"].append({**step, "name": f"execute_context_{index}({index * 7}_1)_generation_1(1)",
                                     "ts": bounds[index], "dur": bounds[index + 1] - bounds[index]})
    found, _, annotations = _steps(tmp_path, trace)
    assert found[["source", "step_name", "step_index"]].values.tolist() == [
        ["annotation", "execute_context_N(N_N)_generation_N(N)", index] for index in (1, 2, 3)]
    assert annotations.calls.tolist() == [3]


def test_annotations_around_a_few_launches_and_library_frames_are_no_step(tmp_path):
    """Without vLLM's annotation: `## Call CompiledFxGraph ... ##` encloses 1 of 224 launch calls,
    `nccl:_all_gather_base` none; the frames run once per layer are torch's: no step is found."""
    trace = _events()
    trace["traceEvents"].remove(_annotation(trace))
    found, frames, annotations = _steps(tmp_path, trace)
    assert found.empty and frames.empty and annotations.empty
