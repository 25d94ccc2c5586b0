"""Rank tags and folder discovery (file names only; no trace content needed)."""

from pathlib import Path

import pytest

from tokentrace.errors import DiscoveryError
from tokentrace.sources.discover import discover, parse_name
from tokentrace.sources.rank_tags import RankTag


def test_tag_forms_and_order():
    tags = [RankTag.parse(t) for t in ("DP1-TP0", "TP1", "TP-0", "DP0-CP1-TP3", "TP0-DECODE")]
    assert [str(t) for t in sorted(tags)] == ["TP0", "TP0-DECODE", "TP1", "DP0-CP1-TP3", "DP1-TP0"]
    assert RankTag.parse("TP-1") == RankTag.parse("TP1")


def test_name_with_dashed_profile_id_and_parts():
    named = parse_name(Path("20260101-120000-DP0-TP3-DECODE.proton.part_2.chrome_trace.gz"))
    assert (named.profile_id, str(named.tag), named.kind, named.part) == ("20260101-120000", "DP0-TP3-DECODE", "proton", 2)
    assert parse_name(Path("run-TP-1.viztracer.json")).tag == RankTag(tp=1)
    assert parse_name(Path("run-TP1.truth.json.gz")) is None


def _touch(folder: Path, *names: str) -> Path:
    for name in names:
        (folder / name).write_text("{}")
    return folder


def test_discover_pairs_and_sorts(tmp_path):
    _touch(tmp_path, "p-TP1.viztracer.json", "p-TP1.proton.part_1.chrome_trace", "p-TP1.proton.part_0.chrome_trace",
           "p-TP0.viztracer.json.gz", "p-TP0.proton.chrome_trace.gz", "p-TP0.truth.json.gz")
    ranks = discover(tmp_path)
    assert [str(r.tag) for r in ranks] == ["TP0", "TP1"]
    assert [p.name for p in ranks[1].gpu] == ["p-TP1.proton.part_0.chrome_trace", "p-TP1.proton.part_1.chrome_trace"]


@pytest.mark.parametrize(
    "names, message",
    [
        (("a-TP0.viztracer.json", "a-TP0.proton.chrome_trace", "b-TP0.viztracer.json"), "several profile ids (a, b)"),
        (("a-TP0.viztracer.json",), "no Proton file for rank TP0"),
        (("a-TP0.proton.chrome_trace",), "no VizTracer file for rank TP0"),
        (("a-TP1.viztracer.json", "a-TP-1.viztracer.json.gz", "a-TP1.proton.chrome_trace"), "two VizTracer files claim rank TP1"),
        (("notes.txt",), "no trace files named"),
    ],
)
def test_discover_refuses_ambiguity(tmp_path, names, message):
    _touch(tmp_path, *names)
    with pytest.raises(DiscoveryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        discover(tmp_path)


def test_engine_names_win_over_content(tmp_path):
    """A folder with the engines' names is paired by name: a torch-default-named trace beside them
    is not read (the public behaviour for tokenspeed/vLLM/SGLang folders)."""
    _touch(tmp_path, "p-TP0.trace.json.gz", "node1_7.1765000000000000001.pt.trace.json.gz")
    assert [(str(r.tag), r.gpu[0].name) for r in discover(tmp_path)] == [("TP0", "p-TP0.trace.json.gz")]


def test_sglang_host_traces_alone_are_still_refused(tmp_path):
    _touch(tmp_path, "run-host.trace.json.gz")
    with pytest.raises(DiscoveryError, match="only SGLang host traces"):
        discover(tmp_path)
