"""The raw path's scan (:mod:`tokentrace.sources._raw.scan`) on hand-written bytes: the
earliest-ts regex, the rare-letter word search, and the framing checks across copied ranges."""

from __future__ import annotations

import re

import pytest

from tokentrace.sources._raw.scan import Scan, not_above, positions


def test_earliest_ts_pattern_is_exact():
    """The 'not above' regex of the earliest-ts scan matches exactly the integers <= the bound."""
    for bound in (b"0", b"7", b"10", b"101", b"999", b"1000", b"137050390"):
        pattern = re.compile(rb"(?:" + not_above(bound) + rb")\Z")
        for value in [*range(0, 1200), 137050389, 137050390, 137050391, 99999999, 1000000000]:
            assert bool(pattern.match(str(value).encode())) == (value <= int(bound)), (bound, value)


@pytest.mark.parametrize("letters_per_word", [0, 3, 5000])  # rare, then dense: the whole-word search
def test_positions_finds_a_word_wholly_inside_the_range(letters_per_word):
    word = b'"Tensor.cpu"'
    data = b"".join(b"T" * letters_per_word + b" x " + word for _ in range(300)) + b' "Tens'
    expected = [i for i in range(len(data)) if data.startswith(word, i)]
    assert list(positions(data, word, 1, 0, len(data))) == expected
    end = expected[-1] + 5  # a word cut by the range's end is not in it
    assert list(positions(data, word, 1, 0, end)) == expected[:-1]
    assert list(positions(data, word, 1, expected[1], end)) == expected[1:-1]


@pytest.mark.parametrize("joint", [b" ", b"\n", b"", b", x, ", b"x, ", b", , "])
def test_broken_framing_across_copied_ranges_is_a_suspect(joint):
    """A range ends after a ``}``; a missing comma or stray bytes just after it, at the start
    of the next range, are seen (the copy cuts its 4 MB chunks there)."""
    event = b'{"pid": 1, "tid": 1, "ts": %d.5, "ph": "X", "dur": 0.25, "name": "f", "cat": "FEE"}'
    first = event % 10 + b", " + event % 11
    second = joint + event % 12 + b", " + event % 13
    seen = []
    scan = Scan(confirm=seen.append)
    scan.feed(first)
    scan.feed(second)
    assert seen, joint
    sound = Scan(confirm=seen.append)
    seen.clear()
    sound.feed(first)
    sound.feed(b", " + event % 12 + b", " + event % 13)
    assert not seen
