"""tokenspeed's link starts read from a real serving report, each chunk searched in place: the
plain and the gzip report give what a full parse counts, whatever the chunks cut (a link's name,
an event)."""

from __future__ import annotations

import gzip
import shutil

import orjson
import pytest

from tokentrace.options import RawOptions
from tokentrace.sources import links
from tokentrace.sources._raw import LinkStarts, find_link_starts
from tokentrace.sources._raw.links import LINK_NEEDLE
from tokentrace.sources.backend import reading


@pytest.fixture(scope="module")
def linked_report(shared_traces, tmp_path_factory):
    """engine_graph TP0's report, gzip (as shared) and plain, with its link starts' ids."""
    packed = shared_traces / "engine_graph" / "eng-TP0.viztracer.json.gz"
    plain = tmp_path_factory.mktemp("links") / "eng-TP0.viztracer.json"
    with gzip.open(packed, "rb") as source, open(plain, "wb") as target:
        shutil.copyfileobj(source, target)
    events = orjson.loads(plain.read_bytes())["traceEvents"]
    ids = {e["id"] for e in events if e.get("name") == links.LINK_NAME and e.get("ph") == "s"}
    assert len(ids) > 1000
    return packed, plain, ids


def test_plain_and_gzip_reports_give_every_link_start(linked_report):
    packed, plain, ids = linked_report
    assert find_link_starts(plain) == find_link_starts(packed)
    assert find_link_starts(plain).ids == ids and find_link_starts(plain).unparsed == 0


def test_chunks_that_cut_names_and_events_lose_no_start(linked_report):
    packed, plain, ids = linked_report
    data = plain.read_bytes()
    first = data.index(LINK_NEEDLE)
    # chunks ending inside the first link's name, just after its first byte, inside its event
    for size in (first + 5, first + 1, first + len(LINK_NEEDLE) + 20, 4096, 1 << 20):
        for report in (plain, packed):
            with reading(RawOptions(chunk_bytes=size)):
                found = find_link_starts(report)
            assert found.ids == ids and found.unparsed == 0, (size, report)


def test_an_empty_file_has_no_starts(tmp_path):
    empty = tmp_path / "empty.viztracer.json"
    empty.write_bytes(b"")
    assert find_link_starts(empty) == LinkStarts()
