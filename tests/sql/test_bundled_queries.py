"""The bundled SQL on real samples: merged (rank instants) and raw (one rank per process)."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pandas as pd

from tokentrace.catalog import (
    apply_declared_types,
    find_query,
    list_queries,
    render_sql,
    run_queries,
    run_query,
)
from tokentrace.catalog.functions import find_function, inline_call
from tokentrace.catalog.headers import module_sources
from tokentrace.catalog.identity import IDENTITY_SQL, with_rank_identity
from tokentrace.catalog.run import render_parts, run_map


def _proton_kernel_count(path) -> int:
    with gzip.open(path, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    return sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "kernel")


def test_kernel_summary_counts_equal_proton_input(merged_t39, sample_t39):
    _, engine = merged_t39
    summary = run_query(engine, "kernel_summary")
    per_rank = summary.groupby("rank")["count"].sum().to_dict()
    expected = {f"TP{r}": _proton_kernel_count(sample_t39 / f"sample-TP{r}.proton.chrome_trace.gz")
                for r in (0, 1)}
    assert per_rank == expected
    assert summary.tp.tolist() == sorted(summary.tp.tolist())  # ordered by rank
    shares = summary.groupby("rank")["gpu_time_share"].sum()
    assert all(abs(share - 1.0) < 1e-9 for share in shares)
    row = summary.iloc[0]
    assert row.min_dur_ns <= row.p50_dur_ns <= row.max_dur_ns
    assert str(summary.total_dur_ns.dtype) == "int64"


def test_kernel_summary_glob_parameter(merged_t39):
    _, engine = merged_t39
    nvjet = run_query(engine, "kernel_summary.sql", {"name_glob": "nvjet*"})
    assert len(nvjet) > 0 and nvjet.kernel.str.startswith("nvjet").all()
    none = run_query(engine, "kernel_summary", {"name_glob": "it's not there'; DROP"})
    assert none.empty  # the quote is data, not SQL


def test_trace_health_merged(merged_t39, sample_t39):
    _, engine = merged_t39
    health = run_query(engine, "trace_health")
    assert health["rank"].tolist() == ["TP0", "TP1"]
    assert (health.is_merged == 1).all() and (health.align_method == "anchors").all()
    assert (health.stats_errors == 0).all() and (health.stats_data_loss == 0).all()
    assert (health.kernels == health.proton_kernels).all()
    assert (health.kernels_with_flow + health.kernels_without_flow == health.kernels).all()
    assert health.offset_ns.notna().all()


def test_raw_trace_fallback(raw_proton_t39):
    health = run_query(raw_proton_t39, "trace_health")
    assert len(health) == 1 and health.is_merged[0] == 0 and health["rank"][0] == "Trace"
    assert health.stats_problems[0] == ("flow_duplicate_id=2360; "
                                        "slice_drop_overlapping_complete_event=4")
    assert health.kernels[0] == 2717 and health.kernels_with_flow[0] == 2716
    assert str(health.dp.dtype) == "Int64"  # documented INT, all NULL here


def test_several_queries_one_load(raw_proton_t39):
    results = run_queries(raw_proton_t39, [("kernel_summary", {}), ("trace_health", {})])
    assert list(results) == ["kernel_summary", "trace_health"]
    assert results["kernel_summary"]["count"].sum() == results["trace_health"].kernels[0]


def test_every_bundled_query_documents_its_columns(raw_proton_t39):
    specs = list_queries()
    assert {s.name for s in specs} >= {"kernel_summary", "trace_health"}
    for spec in specs:
        frame = run_query(raw_proton_t39, spec)
        assert [c.name for c in spec.columns] == list(frame.columns), spec.name
        assert spec.purpose and all(c.type and c.doc for c in spec.columns)


def test_ranks_module_usable_from_user_sql(merged_t39):
    _, engine = merged_t39
    ranks = engine.query("INCLUDE PERFETTO MODULE tokentrace.ranks; "
                         "SELECT rank, tp, host_upid, gpu_upid, host_main_utid FROM tt_ranks")
    assert ranks["rank"].tolist() == ["TP0", "TP1"]
    assert ranks.notna().all().all() and (ranks.host_upid != ranks.gpu_upid).all()
    roles = engine.query("SELECT role, COUNT(*) AS n FROM tt_rank_processes GROUP BY role "
                         "ORDER BY role")
    assert dict(zip(roles.role, roles.n)) == {"gpu": 2, "host": 2}
    threads = engine.query("SELECT t.name FROM tt_ranks r JOIN thread t ON t.utid = "
                           "r.host_main_utid ORDER BY r.rank")
    assert threads.name.tolist() == ["MainThread", "MainThread"]


def test_find_query_names():
    assert find_query("kernel_summary").name == find_query("kernel_summary.sql").name


def test_bundled_queries_are_typed_functions():
    # Each runnable file is one call of its module's function (a cross-rank one: of its map);
    # a duration is µs for people (x_us) and ns in the signature (x_ns DURATION).
    for spec in list_queries():
        function = find_function(spec.call.function, list(module_sources().values()), spec.name)
        assert spec.call.function == f"tt_query_{spec.name}" + ("_map" if spec.is_cross_rank else "")
        assert [a.name for a in function.args] == [p.sql_name for p in spec.params], spec.name
        for arg, param in zip(function.args, spec.params):
            assert (arg.type == "DURATION") == (param.type == "DURATION_US") == param.name.endswith("_us")
        assert spec.columns and all(c.doc for c in spec.columns), spec.name
    assert find_query("gpu_gaps").param("min_gap_us").default == 100  # µs


def test_duration_units_equivalent_in_sql(merged_t39):
    _, engine = merged_t39
    as_us = run_query(engine, "gpu_gaps", {"min_gap_us": 2000})
    as_ms = run_query(engine, "gpu_gaps", {"min_gap_us": "2ms"})
    assert len(as_us) > 0 and as_us.equals(as_ms) and as_us.dur.min() >= 2_000_000


def test_running_inline_is_calling_the_function(merged_t39):
    # tokentrace runs a bundled function's body with the literals (the engine would prepare it
    # twice through a call); a person runs the file itself, the call: the rows must be the same,
    # once the runner has added the rank identity (tokentrace.catalog.identity).
    _, engine = merged_t39
    for spec in list_queries():
        given = {"min_gap_us": 50} if spec.param("min_gap_us") else {}
        inline = run_map(engine, spec, given)
        map_sql = render_sql(spec, given).split("\n-- @reduce\n")[0]
        assert "CREATE" not in render_parts(spec, given)[0] and "SELECT * FROM tt_query_" in map_sql
        called = with_rank_identity(engine.query(map_sql), engine.query(IDENTITY_SQL))
        if not spec.is_cross_rank:
            called = apply_declared_types(called, spec)
        assert len(inline) > 0 or spec.name in ("collective_skew", "collective_wait"), spec.name
        pd.testing.assert_frame_equal(inline, called, obj=spec.name)


def test_inline_run_leaves_comments_and_strings_alone(merged_t39):
    # The one expansion (docs/engine.md): an argument $name becomes its literal, as the engine
    # binds it in a call; a $name in a comment or in quoted text stays as written. Run through
    # the runner, on a bundled query whose function body says so.
    _, engine = merged_t39
    spec = find_query("gpu_busy")
    body = ("SELECT '$rank' AS quoted, 'it''s $rank' AS doubled, $rank AS given, -- $rank '\n"
            "  /* $rank ' ; ) */ '-- $rank' AS dashes")
    mine = dataclasses.replace(spec, function=dataclasses.replace(spec.function, body=body))
    assert render_parts(mine, {"rank": "TP1"})[0].endswith(body.replace("$rank AS given", "'TP1' AS given"))
    rows = run_query(engine, mine, {"rank": "TP1"})
    assert rows.to_dict("records") == [{"quoted": "$rank", "doubled": "it's $rank", "given": "TP1",
                                        "dashes": "-- $rank"}]
    # a negative literal stays one value after a minus sign (1-$n, not the comment 1--5)
    minus = dataclasses.replace(spec.function, body="SELECT 1-$n AS d")
    assert engine.query(inline_call(minus, {"n": "-5"})).d.tolist() == [6]
