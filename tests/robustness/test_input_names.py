"""Issue 31: bytes that are not UTF-8 in a VizTracer name must not be copied raw into the merged
trace (invalid JSON, exit 0): they are replaced by U+FFFD."""

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


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_a_name_that_is_not_utf8_gives_valid_json(tmp_path, compressed):
    viz, proton = sample_rank(tmp_path / "in")
    _bad_name(viz)
    if compressed:
        gz = viz.with_name(viz.name + ".gz")
        gz.write_bytes(gzip.compress(viz.read_bytes()))
        viz.unlink()
        age(gz)
        viz = gz
    out = tmp_path / "out.json"
    code, err = run_cli("merge", viz, proton, "-o", out)
    assert code == 0, err
    text = out.read_bytes().decode("utf-8")  # strict: raises on any byte that is not UTF-8
    doc = json.loads(text)
    assert any("\ufffd" in str(e.get("name", "")) for e in doc["traceEvents"])
