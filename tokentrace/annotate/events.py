"""The annotation events, as the JSON text inserted at the end of ``traceEvents``.

Per rank, one thread of the rank's GPU process named :data:`TRACK_NAME` (a second lane,
``... #2``, only where gaps overlap: several GPUs in one rank), sorted first in the process, with
one ``X`` slice per gap. Per stall whose host slice was found, a nested ``X`` slice (the host
slice clipped to the gap, named after it: ``host: time.sleep``) and a v1 flow into it: ``s`` on the
host thread inside the host slice, ``f`` (``bp: e``) just before the nested slice's end. Times
are written as exact µs text from integer ns (:func:`tokentrace.units.ns_to_us_text`).
"""

from __future__ import annotations

import dataclasses

import orjson

from tokentrace.annotate.gaps import Gap, flow_end_ns
from tokentrace.units import ns_to_us_text

TRACK_NAME = "GPU idle (tokentrace)"
CATEGORY = "tokentrace"
FLOW_NAME = "tokentrace.cause"
#: The nested cause slice is named after the host slice, with this prefix (``host: time.sleep``):
#: never a plain function or scope name, which a query could take for a step.
NESTED_PREFIX = "host: "
#: Flow ids: 2^51 + 1, 2^51 + 2, ... (below the merge's 2^52 link namespace, above its
#: launch->kernel ids 1, 2, ...; under 2^53 so a JavaScript number holds them exactly).
FLOW_ID_BASE = 1 << 51
#: Above the merge's ``tokentrace`` thread (-1): the annotation track comes first.
SORT_INDEX = -2
_UINT32 = (1 << 32) - 1


@dataclasses.dataclass
class Events:
    """The serialised annotations: event texts and what they hold."""

    texts: list[bytes] = dataclasses.field(default_factory=list)
    # gap slices
    slices: int = 0
    # stall flows (each with its nested cause slice)
    flows: int = 0
    tids: dict[str, list[int]] = dataclasses.field(default_factory=dict)


def build_events(gaps: list[Gap], used: set[int]) -> Events:
    """The events for ``gaps`` (all ranks); new tids avoid every id in ``used`` (pids and tids
    of the trace), and are added to it."""
    out = Events()
    by_rank: dict[str, list[Gap]] = {}
    for gap in gaps:
        by_rank.setdefault(gap.rank, []).append(gap)
    for rank, rank_gaps in by_rank.items():
        lanes = _lanes(sorted(rank_gaps, key=lambda g: (g.ts_ns, g.dur_ns)))
        tids = [_fresh_id(used) for _ in lanes]
        out.tids[rank] = tids
        pid = rank_gaps[0].gpu_pid
        for number, (tid, lane) in enumerate(zip(tids, lanes), start=1):
            name = TRACK_NAME if number == 1 else f"{TRACK_NAME} #{number}"
            out.texts += _thread_events(pid, tid, name)
            for gap in lane:
                out.texts.append(_slice(gap, tid))
                out.slices += 1
                if gap.source is not None:
                    out.flows += 1
                    out.texts += _cause(gap, tid, FLOW_ID_BASE + out.flows)
    return out


def _lanes(gaps: list[Gap]) -> list[list[Gap]]:
    """Gaps in time order, each in the first lane whose last slice ended by its start (slices of
    one thread must nest; a partial overlap would be dropped by Perfetto)."""
    lanes: list[list[Gap]] = []
    for gap in gaps:
        for lane in lanes:
            last = lane[-1]
            if last.ts_ns + last.dur_ns <= gap.ts_ns:
                lane.append(gap)
                break
        else:
            lanes.append([gap])
    return lanes


def _fresh_id(used: set[int]) -> int:
    """The id just above the largest used one (uint32), else the largest free one below."""
    candidate = max(used, default=0) + 1
    if candidate > _UINT32:
        candidate = next(i for i in range(_UINT32, 0, -1) if i not in used)
    used.add(candidate)
    return candidate


def _dumps(event: dict) -> bytes:
    return orjson.dumps(event, option=orjson.OPT_SORT_KEYS)


def _thread_events(pid: int, tid: int, name: str) -> list[bytes]:
    return [
        _dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}),
        _dumps({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                "args": {"sort_index": SORT_INDEX}}),
    ]


def _slice(gap: Gap, tid: int) -> bytes:
    return _dumps({"ph": "X", "cat": CATEGORY, "name": gap.name, "pid": gap.gpu_pid, "tid": tid,
                   "ts": _us(gap.ts_ns), "dur": _us(gap.dur_ns), "args": gap.args})


def _cause(gap: Gap, tid: int, flow_id: int) -> list[bytes]:
    """The nested cause slice and the flow from the host slice into it."""
    source = gap.source
    assert source is not None
    start, end = source.span_in(gap.ts_ns, gap.ts_ns + gap.dur_ns)
    nested = {"ph": "X", "cat": CATEGORY, "name": f"{NESTED_PREFIX}{source.name}", "pid": gap.gpu_pid, "tid": tid,
              "ts": _us(start), "dur": _us(end - start),
              "args": {"cause_of": gap.name, "host_slice": source.name,
                       "cause_thread": gap.args.get("cause_thread"), "gap_index": gap.args.get("gap_index")}}
    begin = {"ph": "s", "cat": CATEGORY, "name": FLOW_NAME, "id": flow_id, "pid": source.pid,
             "tid": source.tid, "ts": _us(source.at_ns)}
    finish = {"ph": "f", "bp": "e", "cat": CATEGORY, "name": FLOW_NAME, "id": flow_id,
              "pid": gap.gpu_pid, "tid": tid, "ts": _us(flow_end_ns(start, end))}
    return [_dumps(nested), _dumps(begin), _dumps(finish)]


def _us(value_ns: int) -> orjson.Fragment:
    return orjson.Fragment(ns_to_us_text(value_ns).encode())
