"""Discovery of torch-profiler (Kineto) ranks under tokenspeed, vLLM and SGLang names.

The shared `engine_kineto*` traces are linked into tmp_path under the names each engine writes
(vLLM: get_worker_rank_suffix + torch's tensorboard_trace_handler; SGLang: _ProfilerTorch.stop and
HostProfilerMixin.stop_host_profile), so the content is real where sniffing matters.
"""

from pathlib import Path

import pytest

from tokentrace.errors import DiscoveryError
from tokentrace.sources.discover import GpuFormat, discover
from tokentrace.sources.rank_tags import RankTag

NS = "1733011200000000000"


@pytest.fixture(scope="module")
def kineto(shared_traces) -> dict[str, Path]:
    """The real torch-profiler trace and VizTracer report of engine_kineto, and a Proton file."""
    folder = shared_traces / "engine_kineto"
    return {
        "trace": folder / "engk-TP0.trace.json.gz",
        "viz": folder / "engk-TP0.viztracer.json.gz",
        "proton": shared_traces / "engine_graph" / "eng-TP0.proton.chrome_trace.gz",
    }


def _link(folder: Path, **names: Path) -> Path:
    """Links ``{new name: source}`` into ``folder`` (keyword names are given through a dict)."""
    for name, source in names.items():
        (folder / name).symlink_to(source)
    return folder


def _summary(ranks) -> list[tuple]:
    return [(str(r.tag), r.profile_id, r.gpu_format, r.viztracer and r.viztracer.name, [p.name for p in r.gpu])
            for r in ranks]


@pytest.mark.parametrize("folder, profile_id, viz_name", [
    ("engine_kineto", "engk", "engk-TP0.viztracer.json.gz"),
    ("engine_mixed_kineto", "mixk", "mixk-TP0.viztracer.json.gz"),
    ("engine_kineto_stack", "engs", None),
])
def test_tokenspeed_kineto_folders_as_recorded(shared_traces, folder, profile_id, viz_name):
    (rank,) = discover(shared_traces / folder)  # the .truth.json.gz beside them is ignored
    assert (rank.profile_id, rank.tag, rank.gpu_format) == (profile_id, RankTag(tp=0), GpuFormat.KINETO)
    assert [p.name for p in rank.gpu] == [f"{profile_id}-TP0.trace.json.gz"]
    assert (rank.viztracer.name if rank.viztracer else None) == viz_name
    assert rank.first_input == (rank.viztracer or rank.gpu[0])


def test_proton_folders_unchanged(shared_traces):
    ranks = discover(shared_traces / "engine_mixed")
    assert [(str(r.tag), r.gpu_format, r.viztracer.name) for r in ranks] == [
        ("DP0-TP0", GpuFormat.PROTON, "mix-DP0-TP0.viztracer.json.gz"),
        ("DP1-TP0", GpuFormat.PROTON, "mix-DP1-TP0.viztracer.json.gz"),
    ]


def test_vllm_names(tmp_path, kineto):
    _link(tmp_path, **{
        f"myrun_dp0_pp0_tp0_dcp0_ep0_rank0.{NS}.pt.trace.json.gz": kineto["trace"],
        "myrun_dp0_pp0_tp1_dcp0_ep0_rank1.1733011200000000777.pt.trace.json.gz": kineto["trace"],
        "myrun_dp0_pp0_tp1_dcp0_ep0_rank1.viztracer.json.gz": kineto["viz"],
        f"myrun_dp1_pp0_tp0_dcp0_ep1_rank2.{NS}.pt.trace.json": kineto["trace"],
    })
    (tmp_path / "profiler_out_0.txt").write_text("table")
    ranks = discover(tmp_path)
    assert _summary(ranks) == [
        ("DP0-PP0-TP0-DCP0-EP0", "myrun", GpuFormat.KINETO, None,
         [f"myrun_dp0_pp0_tp0_dcp0_ep0_rank0.{NS}.pt.trace.json.gz"]),
        ("DP0-PP0-TP1-DCP0-EP0", "myrun", GpuFormat.KINETO, "myrun_dp0_pp0_tp1_dcp0_ep0_rank1.viztracer.json.gz",
         ["myrun_dp0_pp0_tp1_dcp0_ep0_rank1.1733011200000000777.pt.trace.json.gz"]),
        ("DP1-PP0-TP0-DCP0-EP1", "myrun", GpuFormat.KINETO, None, [f"myrun_dp1_pp0_tp0_dcp0_ep1_rank2.{NS}.pt.trace.json"]),
    ]
    assert [r.tag.global_rank for r in ranks] == [0, 1, 2]
    assert ranks[2].tag.as_args() == {"rank": "DP1-PP0-TP0-DCP0-EP1", "dp": 1, "pp": 0, "cp": None, "tp": 0,
                                      "dcp": 0, "ep": 1, "stage": "", "global_rank": 2}


def test_vllm_without_prefix_and_underscored_prefix(tmp_path, kineto):
    _link(tmp_path, **{f"dp0_pp0_tp0_dcp0_ep0_rank0.{NS}.pt.trace.json.gz": kineto["trace"]})
    assert _summary(discover(tmp_path))[0][:2] == ("DP0-PP0-TP0-DCP0-EP0", "vllm")
    other = tmp_path / "other"
    other.mkdir()
    _link(other, **{f"my_bench_run_dp0_pp1_tp0_dcp0_ep0_rank4.{NS}.pt.trace.json.gz": kineto["trace"]})
    (rank,) = discover(other)
    assert (rank.profile_id, str(rank.tag), rank.tag.pp, rank.tag.global_rank) == ("my_bench_run", "DP0-PP1-TP0-DCP0-EP0", 1, 4)


def test_sglang_names_and_host_trace(tmp_path, kineto):
    _link(tmp_path, **{
        "prof-1733011200.25-TP-0-DP-0.trace.json.gz": kineto["trace"],
        "prof-1733011200.25-TP-1-DP-0.trace.json.gz": kineto["trace"],
        "prof-1733011200.25-TP-1-DP-0.viztracer.json.gz": kineto["viz"],
        "prof-1733011200.25-TP-0-DP-1.trace.json.gz": kineto["trace"],
        "1733011199.5-host.trace.json.gz": kineto["trace"],  # TokenizerManager: not a rank, not an id
    })
    (tmp_path / "1733011200.9-TP-0-memory.pickle").write_bytes(b"\x80")
    ranks = discover(tmp_path)
    assert [(str(r.tag), r.profile_id, r.viztracer and r.viztracer.name) for r in ranks] == [
        ("DP0-TP0", "prof-1733011200.25", None),
        ("DP0-TP1", "prof-1733011200.25", "prof-1733011200.25-TP-1-DP-0.viztracer.json.gz"),
        ("DP1-TP0", "prof-1733011200.25", None),
    ]
    assert all(r.gpu_format is GpuFormat.KINETO for r in ranks)


def test_sglang_pp_ep_and_stages(tmp_path, kineto):
    _link(tmp_path, **{
        "1733011200.5-TP-0-PP-1-EP-0-EXTEND.trace.json.gz": kineto["trace"],
        "1733011200.5-TP-0-PP-1-EP-0-DECODE.trace.json.gz": kineto["trace"],
        "1733011200.5-TP-1-PP-0-EP-1-prefill.trace.json.gz": kineto["trace"],  # SGLANG_PROFILE_V2 stage names
    })
    assert [str(r.tag) for r in discover(tmp_path)] == ["PP0-TP1-EP1-EXTEND", "PP1-TP0-EP0-DECODE", "PP1-TP0-EP0-EXTEND"]


def test_tokenspeed_kineto_beside_proton_ranks(tmp_path, kineto):
    """One folder may hold Proton ranks and Kineto ranks; each rank has one GPU trace."""
    _link(tmp_path, **{"p-TP0.proton.chrome_trace.gz": kineto["proton"], "p-TP0.viztracer.json.gz": kineto["viz"],
                       "p-TP1-DECODE.trace.json.gz": kineto["trace"]})
    assert [(str(r.tag), r.gpu_format) for r in discover(tmp_path)] == [
        ("TP0", GpuFormat.PROTON), ("TP1-DECODE", GpuFormat.KINETO)]


def test_torch_default_names_are_found_by_content(tmp_path, kineto):
    # tensorboard_trace_handler's <worker>.<ns>.pt.trace.json.gz carries no rank tag: the trace
    # is a rank by its content (before: "no trace files named ..."; tests/sources/test_discover_content.py)
    _link(tmp_path, **{"hostname_1234.1733011200000000000.pt.trace.json.gz": kineto["trace"]})
    assert [(str(r.tag), r.gpu_format) for r in discover(tmp_path)] == [("TP0", GpuFormat.KINETO)]


@pytest.mark.parametrize("names, message", [
    ({"p-TP0.trace.json.gz": "trace", "p-TP0.proton.chrome_trace.gz": "proton", "p-TP0.viztracer.json.gz": "viz"},
     "rank TP0 has both a Proton and a torch-profiler trace: p-TP0.trace.json.gz, p-TP0.proton.chrome_trace.gz"),
    ({f"r_dp0_pp0_tp0_dcp0_ep0_rank0.{NS}.pt.trace.json.gz": "trace",
      "r_dp0_pp0_tp0_dcp0_ep0_rank0.1733011299000000000.pt.trace.json.gz": "trace"},
     "several torch-profiler traces claim rank DP0-PP0-TP0-DCP0-EP0"),
    ({"p-TP-0.trace.json.gz": "trace", "p-TP0.trace.json": "trace"}, "several torch-profiler traces claim rank TP0"),
    ({f"a_dp0_pp0_tp0_dcp0_ep0_rank0.{NS}.pt.trace.json.gz": "trace",
      f"b_dp0_pp0_tp1_dcp0_ep0_rank1.{NS}.pt.trace.json.gz": "trace"}, "several profile ids (a, b)"),
    ({"s-TP-0.trace.json.gz": "trace", "t-TP-1.trace.json.gz": "trace"}, "several profile ids (s, t)"),
    ({"1733011199.5-host.trace.json.gz": "trace"}, "only SGLang host traces (1733011199.5-host.trace.json.gz)"),
    ({"p-TP0.trace.json.gz": "trace", "p-TP0.viztracer.json.gz": "viz", "p-TP-0.viztracer.json.gz": "viz"},
     "two VizTracer files claim rank TP0"),
    ({"p-TP0.proton.chrome_trace.gz": "proton"}, "no VizTracer file for rank TP0"),
    ({"p-TP1.viztracer.json.gz": "viz"}, "no Proton file for rank TP1"),
])
def test_ambiguity_is_an_error(tmp_path, kineto, names, message):
    _link(tmp_path, **{name: kineto[source] for name, source in names.items()})
    with pytest.raises(DiscoveryError, match=_literal(message)):
        discover(tmp_path)


def test_profile_id_chooses(tmp_path, kineto):
    _link(tmp_path, **{f"a_dp0_pp0_tp0_dcp0_ep0_rank0.{NS}.pt.trace.json.gz": kineto["trace"],
                       "b-TP-0.trace.json.gz": kineto["trace"]})
    assert [r.profile_id for r in discover(tmp_path, profile_id="b")] == ["b"]
    assert [str(r.tag) for r in discover(tmp_path, profile_id="a")] == ["DP0-PP0-TP0-DCP0-EP0"]


def _literal(text: str) -> str:
    return "".join("\\" + c if c in "()[].*+?" else c for c in text)
