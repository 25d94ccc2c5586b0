"""The scan: what the merge needs from the bytes of VizTracer events, found without parsing them.

pids and tids come from VizTracer's metadata events (it writes a ``process_name`` and a
``thread_name`` for every process and thread it traced); a report without them falls back to
scanning every ``"pid":``/``"tid":``. The earliest ``ts`` needs a full scan: VizTracer writes an
event when it ends, so the earliest start (the outermost call) is near the end of the file
(measured: t39_tp2).

Every scan takes a range ``data[start:end]`` (regex ``pos``/``endpos``, ``find`` bounds) so the
copy never slices its 4 MB chunks (a slice of ``bytes`` is a copy).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import orjson

from tokentrace.sources.event_fields import is_time
from tokentrace.units import us_to_ns

_PID_RE = re.compile(rb'"pid":\s*(\d+)')
_TID_RE = re.compile(rb'"tid":\s*(\d+)')
_META_RE = re.compile(rb'"ph":\s*"M",\s*"pid":\s*(\d+),\s*"tid":\s*(\d+)')
# A ts value as the scan accepts it without a second look: a plain non-negative JSON number
# (no exponent: VizTracer never writes one for a time).
_PLAIN_NUMBER = rb'(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+'
# What must follow a ts value (the slow path, at most once per event): VizTracer's layout
# (``, "ph": "X", "dur": D, "name": ...``) with a dur D that starts with a digit and holds no
# blank before its comma (NaN, text, null, a negative or ``1 2`` fail), or another layout; then
# the event's end (``}``; strings, nested objects' ``}`` and ``, "key": ...`` skipped) and
# ``, {`` or the range's end: a missing comma or stray bytes between events fail. Blanks around
# the separators are free: VizTracer writes ``}, {`` with the standard library, ``},{`` when
# orjson is installed (``,"ph":"X","dur":D``, checked alike).
_LAYOUT = rb', "ph": "X", "dur": '
_DUR = rb'[0-9][^ ]*+(?<=[0-9],) '
_DUR_COMPACT = rb'[0-9][^ ,]*+(?<=[0-9]),'  # orjson's layout: no blank after the comma
# Up to the end of an object, strings skipped whole: a ``}`` inside a name or an args repr
# (``log_func_args``: ``"{'lr': 0.1}"``) is no end.
_TO_BRACE = rb'(?:[^}"]++|"(?:[^"\\]++|\\.)*+")*+\}++'
_LAYOUT_COMPACT = rb',"ph":"X","dur":'
_REST = (rb'(?:' + _LAYOUT + _DUR + rb'|' + _LAYOUT_COMPACT + _DUR_COMPACT
         + rb'|\s*+(?=[,}\]])(?!' + _LAYOUT + rb'|' + _LAYOUT_COMPACT + rb'))'
         + _TO_BRACE + rb'(?:\s*+,\s*+"[^"]*+"\s*+:\s*+' + _TO_BRACE + rb')*+(?:\s*+,\s*+\{|\s*+\Z)')
_REST_RE = re.compile(_REST)
# The start of a range that follows a range ended by ``}``: what may follow an event's end.
_LEAD_RE = re.compile(rb'\s*+(?:,\s*+[{"]|[}\]]|\Z)')
# A metadata event (no ts: no run reaches past it) and what follows it.
_META_END_RE = re.compile(rb'"ph": "M"' + _TO_BRACE + rb'(?:, \{|\s*+\Z)')
# Suspects cleared by their own event's parse before the whole report is checked once instead
# (a layout other than VizTracer's makes every event a suspect, and a parse per event then
# costs more than one parse of the whole report).
_CLEARED_MAX = 1000


def ts_pattern(integer: bytes, compact: bool = False) -> re.Pattern:
    """One match per run of sound events, from a ``"ts":`` on, that ends with the first event
    it does not pass, whose ts is then captured as group 1 when it is a non-negative number
    with integer part matching ``integer`` (a regex); group 2 (empty) marks a suspect: a ts
    that is not a plain JSON number >= 0 followed by ``,``/``}``/``]`` (NaN, text, null,
    ``1 2``, an exponent, a negative time) or what follows it fails :data:`_REST`. With group
    1, the caller checks the rest (:func:`rest_is_sound`).

    A run's step reads one event of VizTracer's layout from its ts to the next event's ts: the
    ts (not matching ``integer``), the dur (two colons on, :data:`_DUR`), the event's end and
    ``}, {``, and the next event up to the first ``s": `` (its ts key: ``pid``/``tid`` hold no
    ``s``). sre's cost is per op and per byte, and the step reads the bytes the search would
    scan anyway, with possessive skips (no backtracking): a few ops more per event, where a
    pass of its own would read every byte again and reading on from each ts match would start
    a search per event. ``compact``: the same step for orjson's layout (VizTracer's when orjson
    is installed: ``},{``, no blanks).
    """
    value = integer + rb'(?:\.[0-9]++)?+'
    if compact:  # orjson's layout: no blanks (a blank inside the dur, "1 2", then fails)
        step = (rb'(?!' + value + rb'[,}\]\s])' + _PLAIN_NUMBER + rb',[^:]*+:[^:]*+:' + _DUR_COMPACT
                + rb'[^}]*+\},\{[^s]*+s":(?<="ts":)')
    else:
        step = (rb'(?!' + value + rb'[,}\]\s])' + _PLAIN_NUMBER + rb',[^:]*+:[^:]*+: ' + _DUR
                + rb'[^}]*+\}, \{[^s]*+s": (?<="ts": )')
    return re.compile(rb'"ts":\s*+(?:' + step + rb')*+(?:(' + value + rb')(?=\s*+[,}\]])|(?!'
                      + _PLAIN_NUMBER + _REST + rb')()|)')


def rest_is_sound(data: bytes, position: int, end: int) -> bool:
    """True when what follows a ts value ending at ``position`` passes :data:`_REST`."""
    return _REST_RE.match(data, position, end) is not None


_ANY_INTEGER = rb"(?:0|[1-9][0-9]*+)"
_TS_FIRST_RE = {False: ts_pattern(_ANY_INTEGER), True: ts_pattern(_ANY_INTEGER, compact=True)}


def not_above(number: bytes) -> bytes:
    """A regex (bytes) matching exactly the JSON integers ``<= number`` (no leading zeros).

    A trie over the digits, so a larger number fails at its first digit above ``number``'s
    (most ``ts`` share the leading digits), then the shorter integers.
    """
    width = len(number)
    shorter = [rb"(?!\d{%d})(?:0|[1-9]\d*)" % width] if width > 1 else []  # no leading zero
    return rb"(?:%s)" % rb"|".join([_not_above_from(number, 0)] + shorter)


def _not_above_from(number: bytes, place: int) -> bytes:
    """Digits ``place..`` of an integer of ``number``'s width that is ``<= number``."""
    if place == len(number):
        return b""
    digit = number[place] - ord("0")
    low = 1 if place == 0 and len(number) > 1 else 0  # no leading zero
    rest = len(number) - place - 1
    same = number[place:place + 1] + _not_above_from(number, place + 1)
    if digit <= low:
        return same
    smaller = (rb"[%d-%d]" % (low, digit - 1) if digit - 1 > low else rb"%d" % low) + rb"\d{%d}" % rest
    return rb"(?:%s|%s)" % (smaller, same)


class EarliestTs:
    """The smallest non-negative ``"ts"`` value over the ranges fed, exactly.

    After the first value, each range is searched only for values whose integer part is at most
    the current minimum's: a rare match, so the regex creates almost no objects (collecting
    every ``ts`` would make a match object and a number per event).
    """

    def __init__(self, suspect: Callable[[bytes, int, int, int], None] | None = None) -> None:
        self.best_ns: int | None = None
        self._whole: bytes | None = None  # integer part of the current minimum
        self.compact = False  # orjson's layout (set by the scan from the first range)
        self._pattern = _TS_FIRST_RE[False]
        self._suspect = suspect  # called with (data, start, end, position) of a bad-looking ts

    def feed(self, data: bytes, start: int, end: int) -> None:
        begin = start
        if self._whole is None:
            for first in _TS_FIRST_RE[self.compact].finditer(data, start, end):
                if first.group(1) is not None:
                    self._check_rest(data, start, end, first)
                    self._take([first.group(1)])
                    break
                if first.group(2) is not None:
                    self._flag(data, start, end, first.start(2))
            else:
                return
            begin = first.end()
        found = []
        for match in self._pattern.finditer(data, begin, end):
            if match.group(1) is not None:
                self._check_rest(data, start, end, match)
                found.append(match.group(1))
            elif match.group(2) is not None:
                self._flag(data, start, end, match.start(2))
        if found:
            self._take(found)

    def _check_rest(self, data: bytes, start: int, end: int, match: re.Match) -> None:
        """A ts taken for the minimum skipped the match's check of what follows it: done here."""
        if self._suspect is not None and not rest_is_sound(data, match.end(1), end):
            self._suspect(data, start, end, match.start(1))

    def _flag(self, data: bytes, start: int, end: int, position: int) -> None:
        if self._suspect is not None:
            self._suspect(data, start, end, position)

    def _take(self, texts: list[bytes]) -> None:
        best = min(texts, key=lambda text: us_to_ns(text.decode()))
        best_ns = us_to_ns(best.decode())
        if self.best_ns is None or best_ns < self.best_ns:
            self.best_ns = best_ns
        whole = best.split(b".")[0]
        if whole != self._whole:
            self._whole = whole
            self._pattern = ts_pattern(not_above(whole), self.compact)


class Scan:
    """Collects pids, tids and the earliest ts over the copied ranges with a few C-level scans,
    and checks on the way what Perfetto would refuse in the copied bytes (see :meth:`check`).

    Attributes:
        also: called with every range fed (the estimator's extraction rides on the copy).
        has_events: a ``{`` was seen (an event was copied).
        confirm: called with the byte offset (in the events) of a suspect that the event's own
            parse does not clear; it checks the whole report and raises, or returns when the
            report is sound (None: suspects are not looked into).
    """

    def __init__(self, also: Callable[[bytes, int, int], None] | None = None,
                 confirm: Callable[[int], None] | None = None) -> None:
        self.ids: list[tuple[bytes, bytes]] = []
        self.pids: set[bytes] = set()
        self.tids: set[bytes] = set()
        self.earliest = EarliestTs(self._suspect if confirm is not None else None)
        self.marker: bytes | None = None  # what every metadata event contains
        self.also = also
        self.has_events = False
        self.confirm = confirm
        self.offset = 0  # bytes fed before the current range
        self._sound = False  # the whole report was checked and found sound
        self._cleared = 0  # suspects their own event's parse cleared
        self._after_brace = False  # the last range fed ended with "}"

    def feed(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        end = len(data) if end is None else end
        if self.marker is None:  # VizTracer writes json.dumps' '": ' separators; else no shortcut
            spaced, tight = data.find(b'"ph": "', start, end) >= 0, data.find(b'"ph":"', start, end) >= 0
            self.marker = b'"ph": "M"' if spaced and not tight else b""
            self.earliest.compact = tight and not spaced
        if not self.has_events:
            self.has_events = data.find(b"{", start, end) >= 0
        meta = _first(data, self.marker, 7 if self.marker else 0, start, end)
        if meta >= 0:  # M events are few: skip the regex on ranges without
            self.ids.extend(_META_RE.findall(data, start, end))
            if self.marker and self.confirm is not None:
                self._check_meta(data, start, end, meta)
        if not self.ids:  # no metadata events (yet): scan every id, slower but complete
            self.pids.update(_PID_RE.findall(data, start, end))
            self.tids.update(_TID_RE.findall(data, start, end))
        self.earliest.feed(data, start, end)
        if self.confirm is not None:
            self.check(data, start, end)
            if self._after_brace and not self._sound and not _LEAD_RE.match(data, start, end):
                self._confirm(0)  # the event before this range is not followed by a comma
            self._after_brace = end > start and data[end - 1] == 0x7D  # "}"
        if self.also is not None:
            self.also(data, start, end)
        self.offset += end - start

    def check(self, data: bytes, start: int, end: int) -> None:
        """Flags the words no JSON number may be (``NaN``, ``Infinity``: what Python's json
        writes for floats JSON has not) in value position; the ts values are flagged by the
        earliest-ts match. A ``bytes.find`` per capital letter (memchr; the letters are rare in
        a report, so few hits are checked)."""
        for word in (b"NaN", b"Infinity"):
            for position in positions(data, word, 0, start, end):
                if _after_separator(data, start, position):
                    self._suspect(data, start, end, position)

    def _check_meta(self, data: bytes, start: int, end: int, first: int) -> None:
        """What follows each metadata event (from ``first``): no ts, so no run checks it."""
        for position in positions(data, self.marker, 7, first, end):
            if _META_END_RE.match(data, position, end) is None:
                self._suspect(data, start, end, position)

    def _suspect(self, data: bytes, start: int, end: int, position: int) -> None:
        if self._sound:
            return
        if event_is_sound(data, start, end, position):
            self._cleared += 1
            if self._cleared < _CLEARED_MAX:
                return
        self._confirm(position - start)

    def _confirm(self, at: int) -> None:
        """The whole report checked (``at``: the suspect's offset in the current range)."""
        self.confirm(self.offset + at)  # raises for a real fault
        self._sound = True  # a false alarm: the whole report parsed and checked

    def fill(self, info) -> None:
        """Sets ``pids``, ``tids``, ``main_pid``, ``first_ts_ns``, ``has_events`` and
        ``checked_whole`` of a VizInfo."""
        if self.ids:
            self.pids = {pid for pid, _ in self.ids}
            self.tids = {tid for _, tid in self.ids}
            info.main_pid = int(self.ids[0][0])
        info.pids = {int(p) for p in self.pids}
        info.tids = {int(t) for t in self.tids}
        if info.main_pid is None and info.pids:
            info.main_pid = min(info.pids)
        info.first_ts_ns = self.earliest.best_ns
        info.has_events = self.has_events
        info.checked_whole = self._sound


# A word's rare letter is followed while it is rare: past this many hits in a range, the search
# switches to the whole word once the hits are denser than one per _BYTES_PER_HIT bytes scanned
# (a hit is checked in Python, which costs about what a whole-word find costs over a KB or two
# of bytes: with denser hits the whole-word find is the cheaper).
_LETTER_HITS = 512
_BYTES_PER_HIT = 2048


def positions(data: bytes, word: bytes, rare: int, start: int, end: int) -> Iterator[int]:
    """Where ``word`` starts in ``data[start:end]``: found through its letter ``word[rare]``
    (``bytes.find`` of one byte is memchr, vectorised: about ten times faster than a find of a
    word with common letters such as ``"ph": "M"``, which they keep from skipping far),
    switching to ``bytes.find`` of the whole word once the letter is not rare here (see
    :data:`_BYTES_PER_HIT`)."""
    letter = word[rare:rare + 1]
    found = data.find(letter, start + rare, end)
    hits = 0
    while found >= 0:
        if data.startswith(word, found - rare, end):
            yield found - rare
        hits += 1
        if hits >= _LETTER_HITS and hits * _BYTES_PER_HIT > found - start:
            found = data.find(word, found - rare + 1, end)
            while found >= 0:
                yield found
                found = data.find(word, found + 1, end)
            return
        found = data.find(letter, found + 1, end)


def _first(data: bytes, word: bytes, rare: int, start: int, end: int) -> int:
    """The first position of ``word`` in ``data[start:end]`` (see :func:`positions`), -1 without."""
    if not word:
        return start
    return next(positions(data, word, rare, start, end), -1)


def _after_separator(data: bytes, start: int, position: int) -> bool:
    """True when ``data[position]`` starts a value: after ``:``, ``,`` or ``[`` (a ``-`` and
    blanks between allowed)."""
    index = position - 1
    while index >= start and data[index] in b" \t\r\n-":
        index -= 1
    return index >= start and data[index] in b":,["


def event_is_sound(data: bytes, start: int, end: int, position: int) -> bool:
    """True when the event around ``position`` parses on its own, its ``ts`` and ``dur`` (if
    any) are numbers Perfetto can hold and the next event follows it after a comma: the suspect
    was inside a string or a nested object.

    The event is cut at VizTracer's ``}, {`` separators; when that does not give one JSON
    object (a string holding ``}, {``, a missing comma, an event cut by the range), the answer
    is False and the caller checks the whole report.
    """
    first = data.rfind(b"}, {", start, position)
    first = start if first < 0 else first + 3
    last = data.find(b"}, {", position, end)
    last = end if last < 0 else last + 1
    piece = data[first:last].strip(b" \t\r\n,")
    try:
        event = orjson.loads(piece)
    except orjson.JSONDecodeError:
        return False
    return (isinstance(event, dict) and is_time(event.get("ts", 0)) and is_time(event.get("dur", 0))
            and _NEXT_RE.match(data, last, end) is not None)


# What may follow an event cut at ``}, {``: the next event's first key, or the range's end.
_NEXT_RE = re.compile(rb'(?:\s*+,\s*+\{\s*+["}]|\s*+\Z)')

