"""Issue 31: bytes that are not UTF-8 in a VizTracer name must not be copied raw into the merged
trace (invalid JSON, exit 0): they are replaced by U+FFFD, and the user is told, once per rank,
how many strings of which file changed (also when a forked child made the copy)."""

from __future__ import annotations

import gzip
import json

import pytest

from support.hostile import VIZ_TS, age, run_cli, sample_rank


def _bad_name(viz) -> None:
    """Puts ``\\xff\\xfe`` into the name of the report's first X event (raw bytes, as a name
    taken from a file name or C string that is not UTF-8 is written)."""
    data = viz.read_bytes()
    at = data.index(VIZ_TS)
    begin = data.rindex(b"{", 0, at)
    name = data.index(b'"name": "', begin) + len(b'"name": "')
    assert name < data.index(b"}", at)
    viz.write_bytes(data[:name] + b"\xff\xfe" + data[name:])
    age(viz)


@pytest.mark.parametrize("packed_output", [False, True], ids=["to-plain", "to-gzip"])
@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
@pytest.mark.slow
def test_a_name_that_is_not_utf8_gives_valid_json(tmp_path, compressed, packed_output):
    viz, proton = sample_rank(tmp_path / "in")
    _bad_name(viz)
    if compressed:
        gz = viz.with_name(viz.name + ".gz")
        gz.write_bytes(gzip.compress(viz.read_bytes()))
        viz.unlink()
        age(gz)
        viz = gz
    # a plain output is written by a forked child (its warnings never reached the user), a
    # gzip one by a thread
    out = tmp_path / ("out.json.gz" if packed_output else "out.json")
    code, err = run_cli("merge", viz, proton, "-o", out)
    assert code == 0, err
    raw = gzip.decompress(out.read_bytes()) if packed_output else out.read_bytes()
    text = raw.decode("utf-8")  # strict: raises on any byte that is not UTF-8
    doc = json.loads(text)
    assert any("\ufffd" in str(e.get("name", "")) for e in doc["traceEvents"])
    warned = [line for line in err.splitlines() if "not UTF-8" in line]
    assert warned == [f"warning: {viz}: 1 event string (names, arguments) held bytes that are not "
                      "UTF-8; they were replaced by U+FFFD in the merged trace (fix the names at "
                      "their source to keep them)"], err
    assert [w for w in doc["tokentrace"]["ranks"][0]["warnings"] if "not UTF-8" in w] == [warned[0][9:]]


@pytest.mark.slow
def test_each_rank_warns_once_with_its_count(tmp_path):
    """Two ranks, one with three bad strings: one warning for it (also with --combine, which
    reads the report again), none for the clean rank."""
    folder = tmp_path / "in"
    viz, _ = sample_rank(folder, tag="TP0")
    sample_rank(folder, tag="TP1", source="TP1")
    for _ in range(3):
        _bad_name(viz)  # the same name again: one string
    data = viz.read_bytes()
    for key in (b'"name": "', b'"cat": "'):  # two more strings, in later events
        at = data.index(key, data.index(VIZ_TS) + 4096) + len(key)
        data = data[:at] + b"\xc3" + data[at:]
    viz.write_bytes(data)
    age(viz)
    code, err = run_cli("merge", folder, "--combine", "-o", tmp_path / "all.json")
    assert code == 0, err
    warned = [line for line in err.splitlines() if "not UTF-8" in line]
    assert len(warned) == 1 and f"{viz}: 3 event strings" in warned[0], err
