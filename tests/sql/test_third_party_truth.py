"""Ground truth on third-party engines (issue 28): transformers' continuous batching, whose
generation thread `Thread-1 (_run_generation_loop)` launches every kernel while MainThread waits
and a client thread `http-frontend` streams (`engine_cb_viz`: torch profiler + VizTracer;
`engine_cb_stack`: torch profiler alone, with_stack), and torch.compile's CUDA-graph decode
(`compile_kineto`).

Every injected stall lies on a host-caused gap named by its kind and frame: the generation
thread's sleep, busy and gc stalls on that thread (by its real name where the trace names
threads); the client's GIL hold as `gil` held by `http-frontend` in `render_chunk_payloads`; the
client's sleep between two waves of requests, while the engine waits for work, as `no_work`
naming `poll_request_queue` on the client thread. The engine's real stall, cuDNN attention's
~50 ms of host time per step, is the cause of the long gaps and the headline."""

from __future__ import annotations

import pytest

from support.merged_fixtures import THIRD_PARTY_SETS
from support.trace_files import load_json
from tokentrace.catalog import run_query

KINDS = {"sleep": "blocking", "busy": "busy", "gc": "gc", "gil": "gil"}
GENERATION = "Thread-1 (_run_generation_loop)"
SETS = [name for name, folder in THIRD_PARTY_SETS.items() if folder.is_dir()]


def _stalls(folder):
    for path in sorted(folder.glob("*.truth.json.gz")):
        truth = load_json(path)
        yield from (dict(stall, tag=truth["tag"]) for stall in truth["stalls"])


def _named(function, frame):
    """VizTracer names methods by their class (`StreamClient.render_chunk_payloads`)."""
    return function == frame or str(function).endswith("." + frame)


def _best(causes, stall):
    rows = causes[causes["rank"] == stall["tag"]]
    start, end = stall["start_ns"], stall["end_ns"]
    overlap = ((rows.unix_ts + rows.dur).clip(upper=end) - rows.unix_ts.clip(lower=start)).clip(lower=0)
    return rows.loc[overlap.idxmax()], overlap.max() / (end - start)


@pytest.mark.parametrize("name", SETS)
def test_every_stall_by_kind_frame_and_thread(merged_sets, name):
    folder, _, engine = merged_sets(name)
    causes = run_query(engine, "gap_causes")
    named_threads = name != "engine_cb_stack"  # the torch profiler names no thread
    stalls = list(_stalls(folder))
    assert len(stalls) >= 8
    for stall in stalls:
        row, covered = _best(causes, stall)
        where = (f"{name} step {stall['step']} {stall['kind']} {stall['frame']}: {row.cause_kind} "
                 f"{row.cause_function} ({row.cause_call}, {row.cause_thread}), covers {covered:.0%}")
        assert covered >= 0.5 and row.by_host == 1 and row.gap_class == "host_late", where
        assert _named(row.cause_function, stall["frame"]), where
        starving = stall["kind"] == "sleep" and stall["thread"] == "http-frontend"
        assert row.cause_kind == ("no_work" if starving else KINDS[stall["kind"]]), where
        if named_threads:
            assert row.cause_thread == stall["thread"], where
        if stall["kind"] == "gc":
            assert row.cause_call == "gc.collect", where


@pytest.mark.parametrize("name", [n for n in SETS if n.startswith("engine_cb")])
def test_cudnn_attention_is_the_long_gaps_and_the_headline(merged_sets, name):
    _, _, engine = merged_sets(name)
    causes = run_query(engine, "gap_causes")
    long = causes[(causes.dur > 40_000_000) & (causes.cause_kind == "busy")]
    attention = long[long.cause_function.map(lambda f: _named(f, "sdpa_attention_paged_forward"))
                     & long.cause_call.astype(str).str.endswith("scaled_dot_product_attention")]
    assert len(long) >= 90 and len(attention) >= 0.95 * len(long), long.cause_function.value_counts()
    assert not long.cause_function.astype(str).str.contains("nn.Module|_sample").any()
    summary = run_query(engine, "rank_summary")
    assert _named(summary.top_function.iloc[0].split(" (")[0], "sdpa_attention_paged_forward")


@pytest.mark.parametrize("name", [n for n in SETS if n.startswith("engine_cb")])
def test_the_generation_thread_launches_and_its_step_is_found(merged_sets, name):
    folder, _, engine = merged_sets(name)
    launcher = engine.query(
        "INCLUDE PERFETTO MODULE tokentrace.ranks; SELECT t.name FROM tt_ranks AS r "
        "JOIN thread AS t ON t.utid = r.host_main_utid").name[0]
    causes = run_query(engine, "gap_causes")
    on_generation = {_best(causes, s)[0].cause_thread for s in _stalls(folder) if s["thread"] == GENERATION}
    assert on_generation == {launcher} and launcher != "MainThread"
    if name == "engine_cb_viz":
        assert launcher == GENERATION
    steps = run_query(engine, "step_breakdown")
    assert len(steps) >= 90 and steps.step_name.str.contains("_generation_loop_body").all()
    assert (steps.dur >= 0).all()
    if name == "engine_cb_viz":  # VizTracer stopped by another thread mid-step: closed, marked
        assert steps.open.tolist()[-1] == 1 and steps.open.sum() == 1
    budget = run_query(engine, "idle_budget")
    assert "no_work" in set(budget.category)
    assert abs(budget.groupby("rank").share.sum() - 1).max() < 1e-9


def test_the_torch_op_that_launched_is_named(merged_sets):
    # compile_kineto (VizTracer + the torch profiler with CPU ops): each stall's gap names the
    # aten op whose CUDA runtime call launched the kernel after it
    if "compile_kineto" not in SETS:
        pytest.skip("compile_kineto not present")
    folder, _, engine = merged_sets("compile_kineto")
    causes = run_query(engine, "gap_causes")
    ops = [_best(causes, stall)[0].cause_op for stall in _stalls(folder)]
    assert ops and all(str(op).startswith("aten::") for op in ops), ops
    assert causes[causes.by_host == 0].cause_op.isna().all()


@pytest.mark.parametrize("name", [n for n in SETS if n in ("engine_cb_viz", "compile_kineto")])
def test_launch_latency_from_the_runtime_calls(merged_sets, name):
    # the torch profiler's CUDA runtime calls are exact launches (before: no row at all)
    _, _, engine = merged_sets(name)
    latency = run_query(engine, "launch_latency")
    exact = latency[latency.launch_source == "runtime_call"]
    assert len(exact) >= 5 and (exact.latency_kind == "exact").all()
    assert (exact.negatives == 0).all() and (exact.p50_ns > 0).all()
    kinds = dict(zip(latency.launch_source, latency.latency_kind))
    assert kinds.get("proton_scope", "upper_bound") == "upper_bound"
