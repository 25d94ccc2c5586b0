"""Bigger profiles made from real ones: a rank's events replicated in time, or ranks copied.

Usage: python benchmarks/replicate.py SRC_FOLDER -o OUT [--tag TAG ...] [--times K] [--ranks N]
                                      [--profile-id ID]

* ``--times K``: each selected rank becomes one rank whose VizTracer report and Proton trace
  hold the source's events K times, copy j shifted by j * span: span = the rank's traced time on
  the common axis (VizTracer and Proton events after the anchor offset, first start to last end),
  rounded up to a whole ms so every shifted time is an exact decimal (3 decimals, as written).
  Ids stay consistent: Proton flow ids (``s``/``t``/``f``), Proton ``args.scope_id`` and the
  VizTracer ``viztracer->proton`` flow ids (which name a scope id) of copy j get
  ``+ j * stride`` (stride = the largest of those ids + 1), so every arrow of a copy links that
  copy's events. Metadata events (``ph: M``) are written once. A call VizTracer left open when
  it stopped (``ph: B`` without ``E``: engine_mixed's detokenizer thread waiting in
  ``Queue.get``) is closed at the end of its copy (written as ``X``); otherwise every later copy
  would nest under it on that thread, one stack level deeper per copy. Do that for K = 1 too:
  ``--times 1`` is the baseline of a size sweep (``bench_scaling.py``). The anchors
  (``baseTimeNanoseconds``) are kept, so the merge aligns every copy as the original.
* ``--ranks N``: N ranks ``TP0 .. TP<N-1>``, rank r made from source rank r mod (number of
  selected ranks), each with its host pids and tids moved by ``1000 * (r + 1)`` so ranks never
  share a process id (as separate scheduler processes do). Combines with ``--times``.
* A ``.truth.json.gz`` beside the source is replicated too (stalls shifted like the events).

Output: plain JSON files ``<ID>-<tag>.viztracer.json`` and ``<ID>-<tag>.proton.chrome_trace``
(what the reference merger reads) in OUT, a profile folder ``tokentrace merge`` and ``analyze``
take. Requires both anchors (a trace without them, t36, has no common axis to replicate on).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import orjson

_FLOW_PHASES = frozenset("stf")
_KIND_RE = re.compile(r"^(?P<profile>.+?)-(?P<tag>(?:[A-Z]+\d+-)*TP-?\d+(?:-[A-Z]+)?)"
                      r"\.(?P<kind>viztracer\.json|proton\.chrome_trace|truth\.json)(?:\.gz)?$")


@dataclass(frozen=True)
class SourceRank:
    """One rank's input files in the source folder."""

    tag: str
    viztracer: Path
    proton: Path
    truth: Path | None


def read_json(path: Path) -> dict:
    """A JSON file, gzipped or plain."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return orjson.loads(data)


def source_ranks(folder: Path, tags: list[str] | None = None) -> list[SourceRank]:
    """The ranks of a tokenspeed-style profile folder (one profile id), in tag order."""
    found: dict[str, dict[str, Path]] = {}
    for path in sorted(folder.iterdir()):
        match = _KIND_RE.match(path.name)
        if match:
            found.setdefault(match["tag"], {})[match["kind"]] = path
    ranks = [SourceRank(tag, files["viztracer.json"], files["proton.chrome_trace"], files.get("truth.json"))
             for tag, files in sorted(found.items())
             if "viztracer.json" in files and "proton.chrome_trace" in files and (not tags or tag in tags)]
    if not ranks:
        raise SystemExit(f"{folder}: no VizTracer + Proton pair" + (f" for {tags}" if tags else ""))
    return ranks


def _shift_ts(ts: float | int, shift_ns: int) -> float:
    """``ts`` (µs, at most ns precision) + ``shift_ns``, as the double nearest the exact decimal."""
    return (round(ts * 1000) + shift_ns) / 1000


def _event_end(event: dict) -> float:
    return event["ts"] + (event.get("dur") or 0)


def _span(viz_events: list[dict], proton_events: list[dict], offset_us: float) -> tuple[float, float]:
    """First start and last end of both timelines on the VizTracer axis, µs."""
    timed_viz = [e for e in viz_events if "ts" in e and e.get("ph") != "M"]
    timed_proton = [e for e in proton_events if "ts" in e and e.get("ph") != "M"]
    start = min(min(e["ts"] for e in timed_viz), min(e["ts"] for e in timed_proton) + offset_us)
    end = max(max(_event_end(e) for e in timed_viz), max(_event_end(e) for e in timed_proton) + offset_us)
    return start, end


def _max_id(events: list[dict], *, scope_ids: bool) -> int:
    top = 0
    for event in events:
        if event.get("ph") in _FLOW_PHASES and isinstance(event.get("id"), int):
            top = max(top, event["id"])
        if scope_ids:
            args = event.get("args")
            if isinstance(args, dict) and isinstance(args.get("scope_id"), int):
                top = max(top, args["scope_id"])
    return top


def _copy_events(events: list[dict], shift_ns: int, id_shift: int, *, host_end: float | None = None,
                 pid_shift: int = 0) -> list[dict]:
    """One copy of the non-metadata events, shifted in time, ids and (host) pids/tids."""
    out = []
    for event in events:
        if event.get("ph") == "M":
            continue
        new = dict(event)
        if new.get("ph") == "B" and host_end is not None:
            new["ph"] = "X"
            new["dur"] = host_end - new["ts"]
        if "ts" in new:
            new["ts"] = _shift_ts(new["ts"], shift_ns)
        if id_shift and new.get("ph") in _FLOW_PHASES and isinstance(new.get("id"), int):
            new["id"] += id_shift
        args = new.get("args")
        if id_shift and isinstance(args, dict) and isinstance(args.get("scope_id"), int):
            new["args"] = {**args, "scope_id": args["scope_id"] + id_shift}
        if pid_shift:
            for key in ("pid", "tid"):
                if isinstance(new.get(key), int):
                    new[key] += pid_shift
        out.append(new)
    return out


def _shift_meta(events: list[dict], pid_shift: int) -> list[dict]:
    meta = [dict(e) for e in events if e.get("ph") == "M"]
    if pid_shift:
        for event in meta:
            for key in ("pid", "tid"):
                if isinstance(event.get(key), int):
                    event[key] += pid_shift
    return meta


def _viztracer_dumps(value) -> bytes:
    """JSON in VizTracer's own layout (``", "`` and ``": "`` separators), which the merge's raw
    copy scans at full speed; another layout makes it parse the report whole."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogateescape")


def _write_array_json(path: Path, head: dict, events_key: str, meta: list[dict], copies, tail: dict,
                      viztracer_layout: bool = False) -> None:
    """``{**head, events_key: meta + every copy, **tail}`` written one copy at a time (compact,
    or in VizTracer's layout)."""
    dumps, comma, colon = (_viztracer_dumps, b", ", b": ") if viztracer_layout else (orjson.dumps, b",", b":")
    with open(path, "wb") as out:
        out.write(dumps(head)[:-1] + (comma if head else b"") + dumps(events_key) + colon + b"[")
        first = True
        for chunk in [meta, *copies]:  # copies is a generator: one copy's events in memory at a time
            if not chunk:
                continue
            if not first:
                out.write(comma)
            out.write(dumps(chunk)[1:-1])
            first = False
        out.write(b"]" + (comma + dumps(tail)[1:] if tail else b"}"))


def replicate_rank(rank: SourceRank, out: Path, profile_id: str, tag: str, times: int,
                   pid_shift: int = 0, parsed: dict | None = None) -> dict:
    """Writes one replicated rank to ``out``; returns what was done (span, events per copy).

    ``parsed``: a cache {path: parsed JSON} shared by the ranks made from one source."""
    parsed = {} if parsed is None else parsed
    for path in (rank.viztracer, rank.proton):
        if path not in parsed:
            parsed[path] = read_json(path)
    viz, proton = parsed[rank.viztracer], parsed[rank.proton]
    viz_base = viz.get("viztracer_metadata", {}).get("baseTimeNanoseconds")
    proton_base = proton.get("baseTimeNanoseconds")
    if viz_base is None or proton_base is None:
        raise SystemExit(f"{rank.viztracer.parent}: {tag} has no baseTimeNanoseconds anchors: no common axis")
    viz_events, proton_events = viz["traceEvents"], proton["traceEvents"]
    offset_us = (proton_base - viz_base) / 1000
    start, end = _span(viz_events, proton_events, offset_us)
    span_ns = math.ceil((end - start) / 1000) * 1_000_000  # whole ms
    host_end = max(_event_end(e) for e in viz_events if "ts" in e and e.get("ph") != "B")
    stride = max(_max_id(viz_events, scope_ids=False), _max_id(proton_events, scope_ids=True)) + 1

    def copies(events, **kw):
        for j in range(times):
            yield _copy_events(events, j * span_ns, j * stride, **kw)

    out.mkdir(parents=True, exist_ok=True)
    viz_tail = {k: v for k, v in viz.items() if k != "traceEvents"}
    _write_array_json(out / f"{profile_id}-{tag}.viztracer.json", {}, "traceEvents",
                      _shift_meta(viz_events, pid_shift),
                      copies(viz_events, host_end=host_end, pid_shift=pid_shift), viz_tail,
                      viztracer_layout=True)
    proton_head = {k: v for k, v in proton.items() if k != "traceEvents"}
    _write_array_json(out / f"{profile_id}-{tag}.proton.chrome_trace", proton_head, "traceEvents",
                      _shift_meta(proton_events, 0), copies(proton_events), {})
    if rank.truth is not None:
        truth = read_json(rank.truth)
        stalls = truth.get("stalls", [])
        truth["stalls"] = [{**s, "start_ns": s["start_ns"] + j * span_ns, "end_ns": s["end_ns"] + j * span_ns,
                            **({"step": s["step"] + j * truth["steps"]} if "step" in s and "steps" in truth else {})}
                           for j in range(times) for s in stalls]
        if "steps" in truth:
            truth["steps"] *= times
        (out / f"{profile_id}-{tag}.truth.json.gz").write_bytes(gzip.compress(orjson.dumps(truth), 1))
    return {"tag": tag, "source": rank.tag, "times": times, "span_ms": span_ns / 1e6,
            "viz_events": len(viz_events), "proton_events": len(proton_events)}


def replicate(folder: Path, out: Path, *, tags: list[str] | None = None, times: int = 1,
              ranks: int | None = None, profile_id: str = "rep") -> list[dict]:
    """Writes the replicated profile folder ``out``; returns one record per rank written."""
    sources = source_ranks(folder, tags)
    if ranks is None:
        plan = [(src, src.tag, 0) for src in sources]
    else:
        plan = [(sources[r % len(sources)], f"TP{r}", 1000 * (r + 1)) for r in range(ranks)]
    parsed: dict = {}  # each source parsed once (held while its copies are written)
    return [replicate_rank(src, out, profile_id, tag, times, shift, parsed) for src, tag, shift in plan]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--tag", action="append", help="source rank tag(s) to use (default: all)")
    parser.add_argument("--times", type=int, default=1, help="copies in time (default 1)")
    parser.add_argument("--ranks", type=int, help="write this many ranks TP0..TP<N-1>")
    parser.add_argument("--profile-id", default="rep")
    args = parser.parse_args()
    for record in replicate(args.folder, args.output, tags=args.tag, times=args.times, ranks=args.ranks,
                            profile_id=args.profile_id):
        print(f"{record['tag']} (from {record['source']}): x{record['times']}, span {record['span_ms']:.0f} ms, "
              f"{record['viz_events']} VizTracer + {record['proton_events']} Proton events per copy")


if __name__ == "__main__":
    main()
