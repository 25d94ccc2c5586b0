"""A gap's cause is what the host did during it (issue 29): a decode loop that waits for every
step (`tokens.cpu()`) and then, every 4th step, detokenizes for 5 ms before it launches again.
The sync drained the pipeline, but the host spent the gap in `detokenize_responses`: each of
the 20 stalls is `busy` there, and the budget charges busy, not sync (before: 17 of 20 were
`sync in Tensor.cpu` in `decode_loop`, and host_sync was 40 % of the idle time). The loop's
own catch-up after a sync stays `sync` (engine_mixed's `log_batch_stats`: test_serving_truth)."""

from __future__ import annotations

from support.trace_files import load_json
from tokentrace.catalog import run_query


def test_busy_work_after_a_sync_is_busy(merged_sets):
    folder, _, engine = merged_sets("sim_busy_t36")
    causes = run_query(engine, "gap_causes")
    (truth,) = [load_json(p) for p in folder.glob("*.truth.json.gz")]
    assert len(truth["stalls"]) == 20
    for stall in truth["stalls"]:
        start, end = stall["start_ns"], stall["end_ns"]
        overlap = ((causes.unix_ts + causes.dur).clip(upper=end) - causes.unix_ts.clip(lower=start)).clip(lower=0)
        row = causes.loc[overlap.idxmax()]
        where = f"step {stall['step']}: {row.cause_kind} {row.cause_function} ({row.cause_call})"
        assert overlap.max() >= 0.9 * (end - start) and row.by_host == 1, where
        assert (row.cause_kind, row.cause_function) == ("busy", "detokenize_responses"), where
    budget = run_query(engine, "idle_budget").set_index("category")
    assert budget.idle_ns.get("host_busy", 0) > 10 * budget.idle_ns.get("host_sync", 0)
