"""`tokentrace analyze` writes the annotated traces (issue 29, item 8): per rank
`OUT/annotated/<name>.annotated.json`, listed in `annotated/index.json` and in the console,
drawn from the run's own gap_causes rows (no second load of a trace), that Perfetto loads with
one "GPU idle (tokentrace)" slice per gap_causes row of the run and a flow per stall; and the
files are as private as the merged traces they copy. Uses the session's analyze run."""

from __future__ import annotations

import json
import os
import shutil
import stat
import warnings
from pathlib import Path

import pandas as pd
import pytest

from tokentrace.annotate import FLOW_NAME, TRACK_NAME, annotation_record
from tokentrace.annotate.gaps import gap_name
from tokentrace.annotate.outputs import INDEX, TraceToAnnotate, write_annotated_traces
from tokentrace.catalog import open_trace
from tokentrace.errors import InputError, TokentraceWarning

TRACKS_SQL = f"""
SELECT p.pid, t.name AS thread, s.ts, s.dur, s.depth, s.name,
  EXTRACT_ARG(s.arg_set_id, 'args.gap_index') AS gap_index
FROM slice AS s JOIN thread_track AS tt ON s.track_id = tt.id
JOIN thread AS t USING (utid) JOIN process AS p USING (upid)
WHERE t.name GLOB '{TRACK_NAME}*' ORDER BY s.ts, s.depth
"""
FLOWS_SQL = f"""
SELECT so.name AS out_name, si.name AS in_name FROM flow AS f
JOIN slice AS so ON so.id = f.slice_out JOIN slice AS si ON si.id = f.slice_in
WHERE EXTRACT_ARG(f.arg_set_id, 'name') = '{FLOW_NAME}'
"""


def _manifest(out) -> dict:
    """The manifest of the cache entry the run annotated (other tests of the session may add
    entries beside it: a combined merge of the same folder)."""
    index = json.loads((out / "annotated" / "index.json").read_text())
    (entry,) = {Path(t["merged"]).parent for t in index["traces"]}
    return json.loads((entry / "manifest.json").read_text())


def test_analyze_lists_an_annotated_trace_per_rank(analyzed_t39):
    out = analyzed_t39.output
    assert analyzed_t39.exit_code == 0, analyzed_t39.stdout
    index = json.loads((out / "annotated" / INDEX).read_text())
    assert [(t["file"], t["ranks"]) for t in index["traces"]] == [
        ("sample-TP0.annotated.json", ["TP0"]), ("sample-TP1.annotated.json", ["TP1"])]
    assert sum(t["slices"] for t in index["traces"]) == 975 and sum(t["flows"] for t in index["traces"]) == 8
    console = " ".join(analyzed_t39.stdout.split())  # rich wraps long lines
    assert "annotated traces" in console and "sample-TP1.annotated.json" in console
    for trace in index["traces"]:
        record = annotation_record(out / "annotated" / trace["file"])
        assert record["min_gap_us"] == 100 and record["stall_min_us"] == 2000
        assert list(record["ranks"]) == trace["ranks"]


def test_the_annotated_traces_hold_the_runs_gaps_and_causes(analyzed_t39):
    out = analyzed_t39.output
    gaps = pd.read_parquet(out / "tables" / "gap_causes.parquet")
    for rank, name, shift in _manifest(out)["ranks"]:
        mine = gaps[gaps["rank"] == rank]
        path = out / "annotated" / name.replace(".merged.json", ".annotated.json")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TokentraceWarning)
            engine = open_trace(path, warn=False)
        with engine:
            assert engine.stats_problems().empty
            slices = engine.query(TRACKS_SQL)
            flows = engine.query(FLOWS_SQL)
        top = slices[slices.depth == 0]
        assert set(top.thread) == {TRACK_NAME}
        # every gap of the run's table, exactly (its times less the rank's shift), named by its cause
        expected = sorted((int(r.gap_index), int(r.ts) - shift, int(r.dur), gap_name(r._asdict()))
                          for r in mine.itertuples())
        found = sorted(zip(top.gap_index.astype(int), top.ts, top.dur, top.name))
        assert len(found) == len(mine) > 0 and found == expected
        stalls = int(mine.is_stall.sum())
        assert len(flows) == stalls == 4 and set(flows.out_name) == {"time.sleep"}
        assert set(flows.in_name) == {"host: time.sleep"}


def test_they_are_written_from_the_rows_without_loading_a_trace(analysis_t39, analyzed_t39, tmp_path, monkeypatch):
    """The same bytes again from the gap_causes rows and the step's support rows, with every way
    to load a trace taken away; from a 0600 merged file, a 0600 file in a 0700 folder."""
    from tokentrace.annotate import api
    from tokentrace.report.pipeline import ANNOTATION_TABLE, with_annotation_step

    out = analyzed_t39.output
    tables = analysis_t39.run_many(with_annotation_step([("gap_causes", "gap_causes", {})]))
    support = tables[ANNOTATION_TABLE]
    assert set(support.kind) == {"gpu", "id", "source"} and (support.kind == "source").sum() == 8

    def no_load(*args, **kwargs):
        raise AssertionError("a trace was loaded again")

    monkeypatch.setattr(api, "open_trace", no_load)
    monkeypatch.setattr("tokentrace.catalog.open_trace", no_load)
    private = tmp_path / "in"
    private.mkdir(mode=0o700)
    traces = []
    for trace in analysis_t39.ranks.traces:
        copy = private / trace.path.name
        shutil.copyfile(trace.path, copy)
        os.chmod(copy, 0o600)
        traces.append(TraceToAnnotate(copy, trace.shift_ns, (trace.rank,)))
    written = write_annotated_traces(tmp_path / "out" / "annotated", traces, tables["gap_causes"], support,
                                     min_gap_us=100, stall_min_us=2000)
    for result in written:
        assert result.path.read_bytes() == (out / "annotated" / result.path.name).read_bytes()
        assert stat.S_IMODE(result.path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "out" / "annotated").stat().st_mode) == 0o700


def test_view_of_the_analyze_output(analyzed_t39, tmp_path, monkeypatch):
    """`tokentrace view OUT`: one annotated trace is served as it is (nothing written, not even
    the user cache); several (one per rank) are named, with the profile folder for all ranks."""
    from tokentrace.view import prepare_trace

    monkeypatch.setenv("TOKENTRACE_CACHE_DIR", str(tmp_path / "cache"))
    out = analyzed_t39.output
    with pytest.raises(InputError, match="2 annotated traces, one per rank") as error:
        prepare_trace(out)
    assert "sample-TP0.annotated.json" in str(error.value) and str(analyzed_t39.source.resolve()) in str(error.value)
    one = tmp_path / "one"
    (one / "annotated").mkdir(parents=True)
    shutil.copyfile(out / "annotated" / "sample-TP1.annotated.json", one / "annotated" / "sample-TP1.annotated.json")
    index = json.loads((out / "annotated" / INDEX).read_text())
    index["traces"] = index["traces"][1:]
    (one / "annotated" / INDEX).write_text(json.dumps(index))
    served = prepare_trace(one)
    assert served.path == one / "annotated" / "sample-TP1.annotated.json" and served.annotated
    assert not (tmp_path / "cache").exists()
