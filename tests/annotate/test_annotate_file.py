"""annotate_file as a file operation: the events are inserted, not re-serialised (the plain
bytes come back when the annotations are removed), annotating again is idempotent, other
settings replace the earlier annotations, gzip stays gzip, in-place writes are atomic, and what is
not a merged trace is refused with one clear message."""

from __future__ import annotations

import gzip
import shutil

import orjson
import pytest

from tokentrace.annotate import annotate_file, annotation_record, read_tail, remove_annotations
from tokentrace.catalog import open_trace
from tokentrace.errors import InputError


def test_inserted_before_the_array_end_the_rest_kept(annotated_t39, merged_t39):
    result, _ = annotated_t39
    plain, _ = merged_t39
    before, after = plain.read_bytes(), result.path.read_bytes()
    end = read_tail(plain).array_end
    assert after[:end] == before[:end]  # every original event, byte for byte
    assert after.endswith(b"}\n") and after.count(b"\n],\n") == before.count(b"\n],\n")
    assert read_tail(result.path).members == read_tail(plain).members  # kept members as they were
    block = read_tail(result.path).block
    assert {k: v for k, v in block.items() if k != "annotated"} == read_tail(plain).block
    assert block["annotated"]["bytes"] == len(after) - len(before) - (
        len(orjson.dumps(block, option=orjson.OPT_SORT_KEYS)) - len(plain_block_text(plain)))
    assert orjson.loads(after)["displayTimeUnit"] == "ns"  # still one JSON document


def plain_block_text(path) -> bytes:
    return orjson.dumps(read_tail(path).block, option=orjson.OPT_SORT_KEYS)


def test_annotating_again_is_idempotent(annotated_t39, tmp_path):
    result, _ = annotated_t39
    copy = tmp_path / "again.json"
    shutil.copy(result.path, copy)
    stamp = copy.stat().st_mtime_ns
    again = annotate_file(copy)
    assert not again.written and again.slices == result.slices and again.flows == result.flows
    assert copy.stat().st_mtime_ns == stamp and copy.read_bytes() == result.path.read_bytes()


def test_other_settings_replace_the_annotations(annotated_t39, merged_t39, tmp_path):
    result, _ = annotated_t39
    plain, _ = merged_t39
    fresh = annotate_file(plain, tmp_path / "fresh.json", min_gap_us=1000)
    replaced = annotate_file(result.path, tmp_path / "replaced.json", min_gap_us=1000)
    assert replaced.written and replaced.slices == fresh.slices < result.slices
    assert replaced.path.read_bytes() == fresh.path.read_bytes()
    assert annotation_record(replaced.path)["min_gap_us"] == 1000


def test_removing_gives_the_plain_bytes_back(annotated_t39, merged_t39, tmp_path):
    result, _ = annotated_t39
    plain, _ = merged_t39
    out = remove_annotations(result.path, tmp_path / "plain.json")
    assert out.read_bytes() == plain.read_bytes()
    assert annotation_record(out) is None


def test_in_place_and_gzip(merged_t39, annotated_t39, tmp_path):
    plain, _ = merged_t39
    result, _ = annotated_t39
    packed = tmp_path / "sample.merged.json.gz"
    with open(plain, "rb") as source, gzip.open(packed, "wb", compresslevel=1) as sink:
        shutil.copyfileobj(source, sink)
    done = annotate_file(packed)
    assert done.path == packed and done.written
    assert packed.read_bytes()[:2] == b"\x1f\x8b"  # in place: compressed as it was
    assert gzip.decompress(packed.read_bytes()) == result.path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample.merged.json.gz"]  # no temp left
    plain_copy = annotate_file(packed, tmp_path / "out.json")  # a .json name: plain output
    assert plain_copy.path.read_bytes() == result.path.read_bytes()


def test_a_per_rank_file(merged_t39, tmp_path):
    plain, _ = merged_t39
    rank_file = plain.parent / "sample-TP1.merged.json"
    done = annotate_file(rank_file, tmp_path / "tp1.json")
    assert done.ranks == ("TP1",) and done.flows == done.stalls == 4
    with open_trace(done.path, warn=False) as engine:
        assert engine.stats_problems().empty
        pids = engine.query("SELECT p.pid FROM thread AS t JOIN process AS p USING (upid) "
                            "WHERE t.name = 'GPU idle (tokentrace)'").pid.tolist()
    assert pids == [read_tail(rank_file).block["ranks"][0]["gpu_pid"]]


def test_not_a_merged_trace(sample_t39, tmp_path):
    raw = sample_t39 / "sample-TP0.proton.chrome_trace.gz"
    with pytest.raises(InputError, match="not a merged trace"):
        annotate_file(raw, tmp_path / "x.json")
    with pytest.raises(InputError, match="no such file"):
        annotate_file(tmp_path / "missing.json")
    cut = tmp_path / "cut.json"
    cut.write_bytes(b'{"traceEvents": [\n{"ph": "X"}')
    with pytest.raises(InputError, match="not a merged trace"):
        annotate_file(cut)
    assert not (tmp_path / "x.json").exists()


def test_the_array_end_is_found_past_look_alikes(tmp_path):
    """A pretty-printed kept member holding a raw '\\n],\\n' (not what the merge writes, but a
    hand-edited file could): the real end is the last one whose remainder parses."""
    tail = (b'\n],\n"file_info": {"files": [\n1\n],\n"x": 2},\n"displayTimeUnit": "ns",\n'
            b'"tokentrace": {"ranks": [{"rank": "TP0"}], "version": "0"}}\n')
    body = b'{"traceEvents": [\n{"ph": "i", "pid": 1, "tid": 1, "ts": 1, "name": "a"}' + tail
    path = tmp_path / "look.json"
    path.write_bytes(body)
    found = read_tail(path)
    assert found.array_end == body.index(b"\n],\n") and not found.empty_array
    assert found.file_info == {"files": [1], "x": 2} and found.block["ranks"] == [{"rank": "TP0"}]
    (tmp_path / "look.json.gz").write_bytes(gzip.compress(body))
    assert read_tail(tmp_path / "look.json.gz").array_end == found.array_end
    empty = tmp_path / "empty.json"
    empty.write_bytes(b'{"traceEvents": [\n\n],\n"displayTimeUnit": "ns",\n"tokentrace": {"ranks": []}}\n')
    assert read_tail(empty).empty_array
