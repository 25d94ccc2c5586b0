"""Proton chrome traces written as several concatenated JSON documents (triton 3.6, one per
CUDA stream), read in one pass, on a cut of the real ``compile_proton`` trace (tests/data)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from tokentrace.errors import InputError
from tokentrace.options import RawOptions
from tokentrace.sources import proton
from tokentrace.sources.backend import reading
from tokentrace.sources.proton import read_proton

CUT = Path(__file__).resolve().parents[1] / "data" / "compile_proton_cut" / "cgp-TP0.proton.chrome_trace.gz"


def documents(text: str) -> list[dict]:
    """The documents of ``text``, decoded one after the other by the standard library."""
    decoder, found, pos = json.JSONDecoder(), [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return found
        doc, pos = decoder.raw_decode(text, pos)
        found.append(doc)


@pytest.fixture(scope="module")
def text() -> str:
    return gzip.decompress(CUT.read_bytes()).decode()


def write(tmp_path: Path, data: str, name: str = "x.proton.chrome_trace") -> Path:
    path = tmp_path / name
    path.write_text(data)
    return path


def expected_kernels(docs: list[dict]) -> list[tuple]:
    rows = [(e["name"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000), e["tid"])
            for doc in docs for e in doc["traceEvents"]]
    return sorted(rows, key=lambda row: (row[1], row[2]))


def test_every_document_of_the_real_cut_is_read(text: str) -> None:
    docs = documents(text)
    assert len(docs) == 2 and {e["tid"] for e in docs[1]["traceEvents"]} == {30}
    trace = read_proton([CUT])
    assert trace.n_kernels == sum(len(d["traceEvents"]) for d in docs)
    assert trace.kernels() == expected_kernels(docs)
    assert trace.base_ns is None and trace.dialect == "3.8"


@pytest.mark.parametrize("joint", ["", " ", "\r\n\t  ", "\n\n"])
def test_any_whitespace_between_documents(tmp_path: Path, text: str, joint: str) -> None:
    one, two = text.strip().split("\n")
    trace = read_proton([write(tmp_path, one + joint + two)])
    assert trace.kernels() == expected_kernels(documents(text))


def test_a_joint_inside_a_string_is_no_document_boundary(tmp_path: Path) -> None:
    name = "weird} \n{kernel"
    doc = {"displayTimeUnit": "us", "traceEvents": [
        {"cat": "kernel", "name": name, "ph": "X", "tid": 7, "ts": 1.0, "dur": 2.0},
        {"cat": "kernel", "name": "k", "ph": "X", "tid": 7, "ts": 4.0, "dur": 1.0}]}
    second = {"displayTimeUnit": "us", "traceEvents": [
        {"cat": "kernel", "name": "s}{", "ph": "X", "tid": 30, "ts": 3.0, "dur": 1.0}]}
    data = json.dumps(doc) + "\n" + json.dumps(second) + "\n"
    trace = read_proton([write(tmp_path, data)])
    assert [k[0] for k in trace.kernels()] == [name, "s}{", "k"]


def test_a_document_cut_short_names_the_document(tmp_path: Path, text: str) -> None:
    one, two = text.strip().split("\n")
    path = write(tmp_path, one + "\n" + two[: len(two) // 2])
    os.utime(path, (1, 1))  # not being written: the message says truncated
    with pytest.raises(InputError, match=r"JSON document 2 ends early; the file is truncated"):
        read_proton([path])


def test_a_broken_first_document_is_named(tmp_path: Path, text: str) -> None:
    one, two = text.strip().split("\n")
    broken = one.replace('"dur":', '"dur"=', 1)
    with pytest.raises(InputError, match=r"JSON document 1: not valid JSON"):
        read_proton([write(tmp_path, broken + "\n" + two)])


def test_a_bad_event_names_its_document(tmp_path: Path, text: str) -> None:
    docs = documents(text)
    docs[1]["traceEvents"][1]["ts"] = "late"
    data = "\n".join(json.dumps(d) for d in docs)
    with pytest.raises(InputError, match=r"\(JSON document 2\): traceEvents\[1\] .* has ts 'late'"):
        read_proton([write(tmp_path, data)])


def test_large_documents_are_read_piece_by_piece(tmp_path: Path, text: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    split: list[int] = []
    real = proton.split_document
    monkeypatch.setattr(proton, "split_document", lambda raw: split.append(len(raw)) or real(raw))
    with reading(RawOptions(piecewise_bytes=100)):
        trace = read_proton([CUT])
    assert len(split) == 2 and trace.kernels() == expected_kernels(documents(text))


def test_trailing_garbage_is_not_a_document(tmp_path: Path, text: str) -> None:
    with pytest.raises(InputError, match="not valid JSON"):
        read_proton([write(tmp_path, text.strip() + "\nxyz")])
