"""Merging the serving-engine traces (CUDA-graph decode, tokenspeed-style linked kernel scopes,
two DP ranks recorded one after the other): nothing Perfetto reports as lost, one arrow per
`viztracer->proton` link start, and the reports' `viztracer_metadata` and `file_info` kept."""

from __future__ import annotations

import pytest

from support.merged_fixtures import PROTON_ENGINE_SETS, serving_sets
from support.trace_files import load_json

LINKED = [n for n in serving_sets() if n in PROTON_ENGINE_SETS]


@pytest.mark.parametrize("name", serving_sets())
def test_no_error_or_data_loss_stats(merged_sets, name):
    _, _, engine = merged_sets(name)
    problems = engine.query(
        "SELECT name, SUM(value) AS value FROM stats WHERE severity IN ('error', 'data_loss') "
        "AND value > 0 GROUP BY name")
    assert problems.empty, problems.to_dict("records")


@pytest.mark.parametrize("name", LINKED)
def test_every_link_start_gets_its_arrow(merged_sets, name):
    folder, combined, engine = merged_sets(name)
    starts = sum(
        sum(1 for e in load_json(path)["traceEvents"] if e.get("name") == "viztracer->proton")
        for path in folder.glob("*.viztracer.json.gz"))
    records = load_json(combined)["tokentrace"]["ranks"]
    assert sum(r["link_starts"] for r in records) == starts > 1000
    assert all(r["links"] == r["link_starts"] for r in records)
    drawn = engine.query(
        "SELECT COUNT(*) AS n, COUNT(DISTINCT s.name) AS sources FROM flow AS f "
        "JOIN slice AS s ON s.id = f.slice_out JOIN slice AS d ON d.id = f.slice_in "
        "WHERE d.category IN ('scope', 'metric') AND s.name GLOB '_LinkedScope.__enter__ (*'")
    assert drawn.n[0] == starts  # Python frame -> Proton scope, one arrow per start


@pytest.mark.parametrize("name", LINKED)
def test_report_metadata_and_file_info_are_kept(merged_sets, name):
    folder, combined, _ = merged_sets(name)
    inputs = {p.name.split(".")[0].split("-", 1)[1]: load_json(p) for p in folder.glob("*.viztracer.json.gz")}
    for path in combined.parent.glob("*-*.merged.json"):
        merged, tag = load_json(path), path.name.split(".")[0].split("-", 1)[1]
        assert merged["viztracer_metadata"] == inputs[tag]["viztracer_metadata"]
        assert merged["file_info"] == inputs[tag]["file_info"]
    doc = load_json(combined)
    meta = doc["viztracer_metadata"]
    assert meta["baseTimeNanoseconds"] == doc["tokentrace"]["time_origin_unix_ns"]
    assert meta["ranks"] == {tag: d["viztracer_metadata"] for tag, d in inputs.items()}
    files = set().union(*(d["file_info"]["files"] for d in inputs.values()))
    assert set(doc["file_info"]["files"]) == files
