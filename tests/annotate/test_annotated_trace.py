"""What the annotated sample_t39_tp2 holds, as Perfetto reads it: per rank one "GPU idle
(tokentrace)" track in the rank's GPU process with one slice per gap_causes row, named by the
cause; the injected stalls (the truth sidecars) under stall slices with a flow from the host's
time.sleep; no import problem; and every bundled query answers exactly as on the plain file."""

from __future__ import annotations

import pandas as pd

from support.trace_files import load_json
from tokentrace.annotate import CATEGORY, FLOW_NAME, TRACK_NAME, annotation_record, gap_url, read_tail
from tokentrace.catalog import list_queries, run_query

TRACKS_SQL = f"""
SELECT p.pid, t.tid, t.name AS thread, p.name AS process, s.ts, s.dur, s.depth, s.name,
  s.category, s.arg_set_id
FROM slice AS s JOIN thread_track AS tt ON s.track_id = tt.id
JOIN thread AS t USING (utid) JOIN process AS p USING (upid)
WHERE t.name GLOB '{TRACK_NAME}*' ORDER BY p.pid, s.ts, s.depth
"""


def _args(engine, arg_set_id) -> dict:
    rows = engine.query(f"SELECT key, display_value FROM args WHERE arg_set_id = {int(arg_set_id)}")
    return {k.removeprefix("args."): v for k, v in zip(rows["key"], rows["display_value"])}


def test_one_track_per_rank_in_its_gpu_process(annotated_t39, merged_t39):
    result, engine = annotated_t39
    slices = engine.query(TRACKS_SQL)
    ranks = engine.query("SELECT EXTRACT_ARG(arg_set_id, 'args.rank') AS rank, "
                         "EXTRACT_ARG(arg_set_id, 'args.gpu_pid') AS gpu_pid FROM slice "
                         "WHERE name = 'tokentrace.rank' ORDER BY rank")
    tracks = slices.groupby(["pid", "tid", "thread", "process"]).size().reset_index()
    assert tracks.thread.tolist() == [TRACK_NAME, TRACK_NAME]
    assert tracks.pid.tolist() == ranks.gpu_pid.tolist()
    assert tracks.process.tolist() == ["TP0 Proton (GPU)", "TP1 Proton (GPU)"]
    record = annotation_record(result.path)
    assert record["ranks"] == {r: {"tids": [int(t)]} for r, t in zip(["TP0", "TP1"], tracks.tid)}
    assert (slices.category == CATEGORY).all()


def test_a_slice_per_gap_named_by_its_cause(annotated_t39, merged_t39):
    result, engine = annotated_t39
    _, plain = merged_t39
    gaps = run_query(plain, "gap_causes", {"min_gap_us": 100})
    slices = engine.query(TRACKS_SQL)
    top = slices[slices.depth == 0]
    assert result.slices == len(gaps) == len(top) == 975
    expected = sorted(zip(gaps.ts, gaps.dur))
    assert sorted(zip(top.ts, top.dur)) == expected  # exact ns: µs text written from integers
    named = dict(zip(zip(top.ts, top.dur), top.name))
    for row in gaps.itertuples():
        name = named[(row.ts, row.dur)]
        if pd.isna(row.cause_kind):
            assert name == row.gap_class
        else:
            assert name == f"{row.cause_kind}: {row.cause_function}"
    stall = gaps[gaps.is_stall == 1].iloc[0]
    args = _args(engine, top[(top.ts == stall.ts)].arg_set_id.iloc[0])
    assert args["gap_class"] == "host_late" and args["cause_thread"] == "MainThread"
    assert args["cause_call"] == "time.sleep" and args["cause_frame"].startswith("host_stall (")
    assert args["duration_ms"] == f"{stall.dur / 1e6:.3f}" and args["stall"] == "true"


def test_injected_stalls_have_a_flow_from_the_host_sleep(annotated_t39, sample_t39):
    result, engine = annotated_t39
    origin = read_tail(result.path).block["time_origin_unix_ns"]
    slices = engine.query(TRACKS_SQL)
    flows = engine.query(f"""
        SELECT so.name AS out_name, ot.name AS out_thread, op.name AS out_process,
          si.name AS in_name, si.ts AS in_ts, si.dur AS in_dur, it.name AS in_thread
        FROM flow AS f
        JOIN slice AS so ON so.id = f.slice_out JOIN thread_track AS ott ON so.track_id = ott.id
        JOIN thread AS ot ON ot.utid = ott.utid JOIN process AS op ON op.upid = ot.upid
        JOIN slice AS si ON si.id = f.slice_in JOIN thread_track AS itt ON si.track_id = itt.id
        JOIN thread AS it ON it.utid = itt.utid
        WHERE EXTRACT_ARG(f.arg_set_id, 'name') = '{FLOW_NAME}'""")
    assert result.stalls == result.flows == len(flows) == 8
    assert set(flows.out_name) == {"time.sleep"} and set(flows.in_name) == {"host: time.sleep"}
    assert set(flows.out_thread) == {"MainThread"} and set(flows.in_thread) == {TRACK_NAME}
    assert set(flows.out_process) == {"TP0 host", "TP1 host"}
    stalls = slices[(slices.depth == 0) & (slices.name == "blocking: host_stall")]
    for path in sorted(sample_t39.glob("*.truth.json.gz")):
        truth = load_json(path)
        pid = slices[slices.process == f"TP{truth['rank']} Proton (GPU)"].pid.iloc[0]
        mine = stalls[stalls.pid == pid]
        for stall in truth["stalls"]:
            start, end = stall["start_ns"] - origin, stall["end_ns"] - origin
            # the GPU went idle during the sleep: the stall slice covers most of it
            hits = mine[(mine.ts < end) & (mine.ts + mine.dur > start)]
            assert len(hits) == 1, stall
            overlap = min(end, hits.ts.iloc[0] + hits.dur.iloc[0]) - max(start, hits.ts.iloc[0])
            assert overlap >= 0.9 * (end - start)
    nested = slices[slices.depth == 1]
    assert len(nested) == 8 and set(nested.name) == {"host: time.sleep"}


def test_annotated_trace_loads_without_problems(annotated_t39):
    _, engine = annotated_t39
    assert engine.stats_problems().empty


def test_every_bundled_query_answers_the_same(annotated_t39, merged_t39):
    _, annotated = annotated_t39
    _, plain = merged_t39
    specs = list_queries()
    assert len(specs) >= 14
    for spec in specs:
        before, after = run_query(plain, spec), run_query(annotated, spec)
        pd.testing.assert_frame_equal(before, after, check_exact=True, obj=spec.name)


def test_gap_links_select_the_annotation(annotated_t39):
    result, _ = annotated_t39
    stall = next(g for g in result.gaps if g.is_stall)
    url = gap_url(stall.ts_ns, stall.dur_ns, "http://127.0.0.1:9001/")
    pad = stall.dur_ns // 2
    assert url == (f"http://127.0.0.1:9001/#!/?visStart={stall.ts_ns - pad}"
                   f"&visEnd={stall.ts_ns + stall.dur_ns + pad}&ts={stall.ts_ns}&dur={stall.dur_ns}")
    clipped = gap_url(10, 100, bounds=(0, 120))
    assert clipped == "http://127.0.0.1:9001/#!/?visStart=0&visEnd=120&ts=10&dur=100"
