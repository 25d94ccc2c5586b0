"""Issue 13, the property: for any input the merge either exits 0 with a file Perfetto loads
with zero error stats, or exits 1 with one ``error:`` line and leaves the output folder as it
was. Seeded random hostile edits of a small real rank (a fuzzer in the hypothesis style, without
its dependency); ``TOKENTRACE_FUZZ_CASES`` raises the count.

The edits are those the merge promises to catch: a VizTracer report cut anywhere or with a
hostile ``ts`` value (its events are copied raw: the scan checks every ``ts``, and NaN and
Infinity anywhere, not every brace; see docs/merge.md), and a Proton trace cut, with a byte inserted or deleted
anywhere, or with a hostile ``ts``/``tid``/``dur`` (it is parsed whole)."""

from __future__ import annotations

import os
import random
import re
import warnings

import pytest
from typer.testing import CliRunner

from support.hostile import age, small_rank, tree
from tokentrace.catalog import open_trace
from tokentrace.cli import app
from tokentrace.errors import TokentraceWarning

CASES = int(os.environ.get("TOKENTRACE_FUZZ_CASES", "24"))
STATS_LOST = "SELECT name, value FROM stats WHERE severity IN ('error', 'data_loss') AND value > 0"
HOSTILE = [b"NaN", b"Infinity", b"-Infinity", b"1 2", b'"abc"', b"null", b"true", b"[]", b"{}", b"1e30",
           b"-1", b"0", b"1e400", b"01", b"9007199254740993", b"-0.0", b'"12"', b"1.5e3"]
_VALUE = {"viz": re.compile(rb'"ts": (-?[0-9.eE+-]+)'),
          "proton": re.compile(rb'"(?:ts|tid|dur)":(-?[0-9.eE+-]+)')}


def _edit(rng: random.Random, data: bytes, side: str) -> tuple[str, bytes]:
    kinds = ["cut", "value"] + (["insert", "delete"] if side == "proton" else [])
    kind = rng.choice(kinds)
    if kind == "cut":
        at = rng.randrange(len(data))
        return f"cut at {at}", data[:at]
    if kind in ("insert", "delete"):
        at = rng.randrange(len(data))
        if kind == "delete":
            return f"delete byte {at}", data[:at] + data[at + 1:]
        byte = rng.choice([b",", b"}", b"{", b'"', b"]", b"[", b" 1", b":", b"x"])
        return f"insert {byte!r} at {at}", data[:at] + byte + data[at:]
    matches = list(_VALUE[side].finditer(data, 0, len(data) // 2 if side == "viz" else len(data)))
    match = rng.choice(matches)
    value = rng.choice(HOSTILE)
    return f"{match.group(0)[:12]!r} -> {value!r} at {match.start(1)}", data[:match.start(1)] + value + data[match.end(1):]


@pytest.fixture(scope="module")
def rank_bytes(tmp_path_factory):
    viz, proton = small_rank(tmp_path_factory.mktemp("rank"))
    return viz.read_bytes(), proton.read_bytes()


def _loads_clean(path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        with open_trace(path, warn=False) as trace:
            lost = trace.query(STATS_LOST)
    assert lost.empty, lost.to_dict("records")


@pytest.mark.parametrize("case", range(CASES))
def test_a_hostile_input_either_merges_cleanly_or_fails_in_one_line(tmp_path, rank_bytes, case):
    rng = random.Random(1300 + case)
    side = "viz" if case % 2 == 0 else "proton"
    viz_bytes, proton_bytes = rank_bytes
    what, edited = _edit(rng, viz_bytes if side == "viz" else proton_bytes, side)
    folder = tmp_path / "in"
    folder.mkdir()
    viz, proton = folder / "s-TP0.viztracer.json", folder / "s-TP0.proton.chrome_trace"
    viz.write_bytes(edited if side == "viz" else viz_bytes)
    proton.write_bytes(edited if side == "proton" else proton_bytes)
    age(viz), age(proton)
    out = tmp_path / "out"
    out.mkdir()
    (out / "s-TP0.merged.json").write_bytes(b"an earlier merge")
    before = tree(out)
    result = CliRunner().invoke(app, ["merge", str(folder), "-o", str(out)])
    err = result.stderr.strip()
    if result.exit_code == 0:
        _loads_clean(out / "s-TP0.merged.json")
    else:
        assert result.exit_code == 1, (what, err, result.exception)
        assert len(err.splitlines()) == 1 and err.startswith("error: "), (what, err)
        assert tree(out) == before, what
