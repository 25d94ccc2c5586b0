"""Issue 45, item 2: traces recorded with the wrong settings are refused, or warned about, by name
with the setting that fixes them.

* Proton's tree data (a hatchet profile): Proton's default (``data="tree"``) and tokenspeed's
  (``TOKENSPEED_KERNEL_PROFILE_DATA`` defaults to ``tree``, tokenspeed-kernel ``profiling.py`` at
  f4d8ec6e). Proton writes it as ``<name>[.part_<N>].hatchet`` (``output.dump(4)`` of a JSON array:
  the root frame, then the device object; ``TreeDataDump.cpp``, ``TreeDataHatchetDump.cpp``) or
  binary ``.hatchet_msgpack``. tokenspeed names it ``<profile_id>-<tag><stage>.proton.hatchet``.
* A VizTracer report recorded with ``min_duration`` > 0 (tokenspeed's default is 100 µs:
  ``TOKENSPEED_VIZTRACER_MIN_DURATION_US``): VizTracer writes no ``min_duration`` in its report, so
  ``trace_health`` finds the floor under the host slices and the report says what to set.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from support.hostile import age, one_error_line, sample_rank
from tokentrace.cli import app
from tokentrace.errors import DiscoveryError, InputError
from tokentrace.sources.detect import TraceKind, sniff
from tokentrace.sources.discover import discover, parse_name

RUNNER = CliRunner()
PROFILE_ID = "20260822-110335"  # tokenspeed's default profile id: time.strftime("%Y%m%d-%H%M%S")
SETTINGS = ('data="trace"', '"chrome_trace"', "TOKENSPEED_KERNEL_PROFILE_DATA=trace",
            "TOKENSPEED_KERNEL_PROFILE_OUTPUT_FORMAT=chrome_trace")


def _hatchet(path: Path) -> Path:
    """A hatchet profile as Proton's TreeData writes it: ``"\\n" + json.dump(4) + "\\n"`` of
    ``[root frame, devices]``, keys sorted (nlohmann's map), KernelMetric's hatchet values (``count``,
    ``time (ns)``, ``device_id``, ``device_type``) on the kernels, zeroed sums on the root."""
    kernel = {"count": 40, "device_id": "0", "device_type": "CUDA", "time (ns)": 1_834_112}
    tree = [
        {"children": [
            {"children": [{"children": [], "frame": {"name": "_rmsnorm_kernel", "type": "function"},
                           "metrics": kernel}],
             "frame": {"name": "norm.prefill", "type": "function"}, "metrics": {}},
        ], "frame": {"name": "ROOT", "type": "function"}, "metrics": {"count": 0, "time (ns)": 0}},
        {"CUDA": {"0": {"arch": "90", "bus_width": 5120, "clock_rate": 1980000,
                        "memory_clock_rate": 2619000, "num_sms": 132}}},
    ]
    path.write_text("\n" + json.dumps(tree, indent=4, sort_keys=True) + "\n")
    return age(path)


def _tokenspeed_rank(folder: Path, tag: str = "TP0") -> Path:
    """A rank as tokenspeed's /start_profile {"activities": ["VIZTRACER", "PROTON"]} writes it with
    its defaults: the VizTracer report and Proton's hatchet profile."""
    viz, proton = sample_rank(folder, PROFILE_ID, tag)
    proton.unlink()
    _hatchet(folder / f"{PROFILE_ID}-{tag}.proton.hatchet")
    return viz


def _cli(*args) -> tuple[int, str]:
    result = RUNNER.invoke(app, [*map(str, args)])
    return result.exit_code, result.stderr.strip()


def test_hatchet_names_are_proton_files_of_the_rank(tmp_path):
    named = parse_name(Path(f"{PROFILE_ID}-DP1-TP0-DECODE.proton.part_2.hatchet"))
    assert (named.profile_id, str(named.tag), named.kind, named.part) == (PROFILE_ID, "DP1-TP0-DECODE", "hatchet", 2)
    assert parse_name(Path(f"{PROFILE_ID}-TP0.proton.hatchet_msgpack")).kind == "hatchet"
    assert parse_name(Path(f"{PROFILE_ID}-TP0.proton.chrome_trace")).kind == "proton"
    assert sniff(_hatchet(tmp_path / "x.proton.hatchet")) is TraceKind.PROTON_HATCHET


@pytest.mark.parametrize("command", ["analyze", "merge"])
def test_a_hatchet_file_in_a_tokenspeed_folder_is_named_with_its_settings(tmp_path, command):
    folder = tmp_path / "profile"
    _tokenspeed_rank(folder)
    extra = ["-o", tmp_path / "out"]
    code, err = _cli(command, folder, *extra)
    one_error_line(code, err, f"{PROFILE_ID}-TP0.proton.hatchet is a Proton hatchet profile", *SETTINGS)
    assert "no Proton file" not in err


def test_every_rank_with_a_hatchet_file_is_refused_the_same_way(tmp_path):
    for tag in ("TP0", "TP1"):
        _tokenspeed_rank(tmp_path, tag)
    with pytest.raises(DiscoveryError) as caught:
        discover(tmp_path)
    message = str(caught.value)
    assert "\n" not in message and "hatchet profile" in message
    assert all(setting in message for setting in SETTINGS)


def test_a_proton_only_folder_of_hatchet_parts(tmp_path):
    # /start_profile {"activities": ["PROTON"]}: no VizTracer report; Proton's phases as parts
    for part in (0, 1):
        _hatchet(tmp_path / f"{PROFILE_ID}-TP0.proton.part_{part}.hatchet")
    with pytest.raises(DiscoveryError, match="hatchet profile") as caught:
        discover(tmp_path)
    assert "TOKENSPEED_KERNEL_PROFILE_DATA=trace" in str(caught.value)
    assert "no VizTracer file" not in str(caught.value)


def test_proton_default_name_alone_in_a_folder(tmp_path):
    # TOKENSPEED_KERNEL_PROFILE=1 without an output: Proton's `profile` -> profile.hatchet
    _hatchet(tmp_path / "profile.hatchet")
    code, err = _cli("analyze", tmp_path, "-o", tmp_path / "out")
    one_error_line(code, err, "profile.hatchet is a Proton hatchet profile", *SETTINGS)


def test_a_binary_hatchet_msgpack_is_named_by_its_name(tmp_path):
    viz, proton = sample_rank(tmp_path, PROFILE_ID)
    proton.unlink()
    packed = tmp_path / f"{PROFILE_ID}-TP0.proton.hatchet_msgpack"
    packed.write_bytes(b"\x92\x83\xa8children\x90\xa5frame\x82\xa4name\xa4ROOT")  # msgpack [ {...
    age(packed)
    assert sniff(packed) is TraceKind.PROTON_HATCHET
    with pytest.raises(DiscoveryError, match="hatchet_msgpack is a Proton hatchet profile"):
        discover(tmp_path)
    code, err = _cli("merge", viz, packed, "-o", tmp_path / "out.json")  # given explicitly
    one_error_line(code, err, "hatchet_msgpack is a Proton hatchet profile", *SETTINGS)


def test_a_hatchet_file_given_explicitly(tmp_path):
    viz = _tokenspeed_rank(tmp_path)
    code, err = _cli("merge", viz, tmp_path / f"{PROFILE_ID}-TP0.proton.hatchet", "-o", tmp_path / "out.json")
    one_error_line(code, err, "hatchet profile", *SETTINGS)


def test_a_stale_hatchet_file_beside_the_chrome_trace_is_left_alone(tmp_path):
    viz, proton = sample_rank(tmp_path, PROFILE_ID)
    _hatchet(tmp_path / f"{PROFILE_ID}-TP0.proton.hatchet")
    (rank,) = discover(tmp_path)
    assert (rank.viztracer, rank.gpu) == (viz, (proton,))


def test_the_hatchet_message_is_one_line_for_analyze_of_the_file(tmp_path):
    path = _hatchet(tmp_path / f"{PROFILE_ID}-TP0.proton.hatchet")
    code, err = _cli("analyze", path, "-o", tmp_path / "out")
    one_error_line(code, err, "hatchet profile", *SETTINGS)
    with pytest.raises(InputError):
        from tokentrace.sources.detect import require_kind

        require_kind(path, TraceKind.PROTON)
