"""Kineto traces told apart by content (sniff) and paired from explicit files; PP/EP/DCP rank tags."""

import gzip
import json
from pathlib import Path

import pytest

from tokentrace.errors import DiscoveryError
from tokentrace.sources.detect import TraceKind, sniff
from tokentrace.sources.discover import GpuFormat, pair_explicit
from tokentrace.sources.rank_tags import RankTag


@pytest.fixture(scope="module")
def real(shared_traces) -> dict[str, Path]:
    return {
        "trace": shared_traces / "engine_kineto" / "engk-TP0.trace.json.gz",
        "stack": shared_traces / "engine_kineto_stack" / "engs-TP0.trace.json.gz",
        "viz": shared_traces / "engine_kineto" / "engk-TP0.viztracer.json.gz",
        "proton": shared_traces / "engine_graph" / "eng-TP0.proton.chrome_trace.gz",
        "proton36": shared_traces / "t36_tp2" / "run3-TP0.proton.chrome_trace.gz",
    }


def _as(tmp_path: Path, source: Path, name: str) -> Path:
    (tmp_path / name).symlink_to(source)
    return tmp_path / name


def test_sniff_real_files(real):
    assert [sniff(real[k]) for k in ("trace", "stack", "viz", "proton", "proton36")] == [
        TraceKind.KINETO, TraceKind.KINETO, TraceKind.VIZTRACER, TraceKind.PROTON, TraceKind.PROTON]


def test_sniff_rewritten_kineto(tmp_path, real):
    """A Kineto trace re-serialised with sorted keys (baseTimeNanoseconds first, as Proton's) or
    cut to its events is still told by its keys or its categories."""
    with gzip.open(real["trace"], "rt") as handle:
        trace = json.load(handle)
    sorted_keys = tmp_path / "sorted.json"
    sorted_keys.write_text(json.dumps(trace, sort_keys=True))
    events = tmp_path / "events.json"
    events.write_text(json.dumps({"traceEvents": trace["traceEvents"][:50]}))
    assert list(json.loads(sorted_keys.read_text()))[0] == "baseTimeNanoseconds"
    assert (sniff(sorted_keys), sniff(events)) == (TraceKind.KINETO, TraceKind.KINETO)


@pytest.mark.parametrize("order", [("viz", "trace"), ("trace", "viz")])
def test_explicit_viz_and_kineto_by_content(tmp_path, real, order):
    files = {"viz": _as(tmp_path, real["viz"], "host.json.gz"), "trace": _as(tmp_path, real["trace"], "gpu.json.gz")}
    (rank,) = pair_explicit([files[k] for k in order])
    assert (rank.viztracer, rank.gpu, rank.gpu_format) == (files["viz"], (files["trace"],), GpuFormat.KINETO)
    assert (rank.profile_id, rank.tag) == ("host", RankTag(tp=0))


def test_explicit_kineto_alone_keeps_its_name(tmp_path, real):
    path = _as(tmp_path, real["stack"], "prof-1733011200-TP-1-DP-0.trace.json.gz")
    (rank,) = pair_explicit([path])
    assert (rank.viztracer, rank.gpu, rank.gpu_format) == (None, (path,), GpuFormat.KINETO)
    assert (rank.profile_id, str(rank.tag)) == ("prof-1733011200", "DP0-TP1")


def test_explicit_unnamed_viz_takes_the_trace_name(tmp_path, real):
    viz = _as(tmp_path, real["viz"], "report.json.gz")
    trace = _as(tmp_path, real["trace"], "run_dp0_pp0_tp3_dcp0_ep0_rank3.1733011200000000000.pt.trace.json.gz")
    (rank,) = pair_explicit([viz, trace])
    assert (rank.profile_id, str(rank.tag), rank.tag.global_rank, rank.viztracer) == ("run", "DP0-PP0-TP3-DCP0-EP0", 3, viz)


def test_explicit_named_ranks_pair_by_name(tmp_path, real):
    paths = [_as(tmp_path, real["trace"], f"r_dp0_pp0_tp{t}_dcp0_ep0_rank{t}.1733011200000000000.pt.trace.json.gz")
             for t in (1, 0)]
    viz = _as(tmp_path, real["viz"], "r_dp0_pp0_tp1_dcp0_ep0_rank1.viztracer.json.gz")
    ranks = pair_explicit([*paths, viz])
    assert [(str(r.tag), r.viztracer) for r in ranks] == [("DP0-PP0-TP0-DCP0-EP0", None), ("DP0-PP0-TP1-DCP0-EP0", viz)]


@pytest.mark.parametrize("names, message", [
    ((("trace", "a.json.gz"), ("proton", "b.chrome_trace.gz")), "a.json.gz is a torch-profiler trace and b.chrome_trace.gz is not"),
    ((("trace", "a.json.gz"), ("viz", "v.json.gz"), ("proton", "p-TP0.proton.chrome_trace.gz")),
     "a rank takes one GPU trace"),
    ((("trace", "a.json.gz"), ("viz", "v.json.gz"), ("viz", "w.json.gz")), "two VizTracer reports (v.json.gz, w.json.gz)"),
    ((("trace", "1733011199.5-host.trace.json.gz"),), "TokenizerManager"),
    ((("viz", "v.json.gz"),), "explicit files: give one VizTracer report"),
])
def test_explicit_ambiguity_is_an_error(tmp_path, real, names, message):
    paths = [_as(tmp_path, real[source], name) for source, name in names]
    with pytest.raises(DiscoveryError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        pair_explicit(paths)


def test_empty_named_kineto_goes_to_the_kineto_reader(tmp_path):
    path = tmp_path / "p-TP0.trace.json.gz"
    path.write_bytes(b"")
    (rank,) = pair_explicit([path])
    assert (rank.gpu_format, rank.viztracer) == (GpuFormat.KINETO, None)


def test_tag_forms_order_and_args():
    tags = [RankTag.parse(t) for t in ("DP0-PP1-TP2-EP0", "TP-1-DP-0", "DP0-TP1", "PP0-TP0", "DP0-PP0-CP1-TP0-DCP1-EP3-DECODE")]
    assert [str(t) for t in tags] == ["DP0-PP1-TP2-EP0", "DP0-TP1", "DP0-TP1", "PP0-TP0", "DP0-PP0-CP1-TP0-DCP1-EP3-DECODE"]
    assert tags[1] == tags[2] and len({tags[1], tags[2]}) == 1  # SGLang's spelling, the same rank
    assert [str(t) for t in sorted(tags)] == ["PP0-TP0", "DP0-TP1", "DP0-TP1", "DP0-PP0-CP1-TP0-DCP1-EP3-DECODE",
                                              "DP0-PP1-TP2-EP0"]
    assert set(RankTag().as_args()) == {"rank", "dp", "pp", "cp", "tp", "dcp", "ep", "stage", "global_rank"}
    assert RankTag(tp=1, global_rank=5) == RankTag(tp=1)  # the coordinates are the identity
    assert RankTag.parse("TP0-prefill").stage == "EXTEND"
    for bad in ("DP0-TP1-DP-2", "TP", "EP0", "TP0-EP"):
        with pytest.raises(ValueError, match="not a rank tag"):
            RankTag.parse(bad)


def test_two_unnamed_explicit_traces_are_two_ranks_with_a_warning(tmp_path, real):
    # neither names a rank (no tag, no distributedInfo): ranks by their order, and a warning
    # names the files (before: refused as "several torch-profiler traces for one rank")
    paths = [_as(tmp_path, real["trace"], "a.json.gz"), _as(tmp_path, real["stack"], "b.json.gz")]
    with pytest.warns(Warning, match=r"a\.json\.gz"):
        ranks = pair_explicit(paths)
    assert [(str(r.tag), r.gpu[0].name) for r in ranks] == [("TP0", "a.json.gz"), ("TP1", "b.json.gz")]
