"""torch-profiler traces without a rank in their names -> ranks, by what the traces say.

torch's ``tensorboard_trace_handler`` names a trace ``<worker>.<ns>.pt.trace.json[.gz]`` (worker =
``<host>_<pid>``: vLLM < 0.13's workers, its API server as ``<host>_<pid>.async_llm``); other tools
save any ``*.json[.gz]``. The rank then comes from the trace (:mod:`.kineto_identity`), in this order:

1. ``distributedInfo.rank`` (with ``world_size`` and the process groups, carried along);
2. the file name: traces without ``distributedInfo`` are numbered after the known ranks in name
   order, with a warning naming the files (a lone such trace is simply ``TP0``, as before);
3. never a guess beyond that: traces of different worlds, or two processes claiming one rank, are
   refused with the files named.

A CPU-only trace (no GPU activity) beside GPU ranks is left out with a warning saying what it is;
only CPU-only traces: refused. Several traces of one process (same worker, distinct ``<ns>``: a
profiler ``schedule`` with ``repeat > 1`` writes one per window) are that rank's *windows*: the
latest is analysed and the others named in a warning and kept on the rank, never counted as ranks.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from tokentrace.errors import DiscoveryError
from tokentrace.sources.detect import TraceKind, sniff
from tokentrace.sources.fileio import read_head
from tokentrace.sources.kineto_identity import (
    KinetoIdentity,
    cpu_only_message,
    handler_name,
    read_identity,
)
from tokentrace.sources.rank_tags import RankTag

_JSON_NAME_RE = re.compile(r"\.json(?:\.gz)?$")
_TOP_KEYS_RE = re.compile(rb'"(?:deviceProperties|distributedInfo)"\s*:')
# kinds that say a file is something else: never a torch-profiler candidate
_OTHER_KINDS = (TraceKind.VIZTRACER, TraceKind.MERGED, TraceKind.PROTON, TraceKind.PROTON_HATCHET,
                TraceKind.CHROME_ARRAY)


@dataclasses.dataclass(frozen=True)
class KinetoRank:
    """One rank found by content.

    Attributes:
        tag: the rank (``TP<distributedInfo.rank>``, its ``global_rank`` set), or numbered by name.
        trace: the trace analysed (the latest window).
        identity: what the trace says about its process.
        windows: the rank's other windows (same process, earlier ``<ns>``), oldest first.
    """

    tag: RankTag
    trace: Path
    identity: KinetoIdentity
    windows: tuple[Path, ...] = ()


@dataclasses.dataclass(frozen=True)
class KinetoRanks:
    """The ranks of a set of torch-profiler traces, sorted by tag, and what was said about them."""

    ranks: tuple[KinetoRank, ...]
    warnings: tuple[str, ...]
    left_out: tuple[Path, ...]  # CPU-only traces


def is_candidate(path: Path) -> bool:
    """A file that may be a torch-profiler trace: ``*.json[.gz]`` whose head shows Kineto's top
    keys (``deviceProperties`` / ``distributedInfo`` beside ``traceEvents``) or that
    :func:`~.detect.sniff` calls Kineto; a ``*.pt.trace.json[.gz]`` unless its content says it
    is something else (a cut file stays a candidate: its reader says what is wrong)."""
    if not path.is_file() or not _JSON_NAME_RE.search(path.name):
        return False
    kind = sniff(path)
    if kind is TraceKind.KINETO:
        return True
    if kind in _OTHER_KINDS:
        return False
    if handler_name(path) is not None or path.name.endswith((".pt.trace.json", ".pt.trace.json.gz")):
        return True
    head = read_head(path)
    return b'"traceEvents"' in head and _TOP_KEYS_RE.search(head) is not None


def kineto_ranks(paths: Sequence[Path], where: Path | str) -> KinetoRanks:
    """Groups torch-profiler traces into ranks by content (see the module's rules).

    Raises:
        DiscoveryError: only CPU-only traces, traces of different worlds, or two processes
            claiming one rank.
    """
    found = [read_identity(Path(p)) for p in sorted(paths, key=lambda p: Path(p).name)]
    cpu = [i.path for i in found if i.has_events and not i.has_gpu]
    gpu = [i for i in found if i.has_gpu or not i.has_events]  # empty or cut: its reader says so
    if not gpu:
        raise DiscoveryError(
            f"{where}: only CPU-only torch-profiler traces ({_names(cpu)}): no GPU activity to analyse; "
            "record the GPU ranks with ProfilerActivity.CUDA and put their traces here"
        )
    _refuse_mixed_worlds(gpu, where)
    messages = [cpu_only_message(p) for p in cpu]
    groups: dict[tuple, list[KinetoIdentity]] = defaultdict(list)
    for ident in gpu:
        key = ("rank", ident.rank) if ident.rank is not None else ("name", ident.worker or ident.path.name)
        groups[key].append(ident)
    picked = {key: _pick_window(key, items, where, messages) for key, items in groups.items()}
    ranks = _tags(picked, messages)
    return KinetoRanks(tuple(sorted(ranks, key=lambda r: r.tag)), tuple(messages), tuple(cpu))


def _refuse_mixed_worlds(found: list[KinetoIdentity], where: Path | str) -> None:
    worlds: dict[int, list[Path]] = defaultdict(list)
    for ident in found:
        if ident.world_size is not None:
            worlds[ident.world_size].append(ident.path)
    if len(worlds) > 1:
        listed = "; ".join(f"world size {size}: {_names(paths)}" for size, paths in sorted(worlds.items()))
        raise DiscoveryError(f"{where}: torch-profiler traces of different runs ({listed}); keep one "
                             "run's traces together and pass them, or their folder")


def _pick_window(key: tuple, items: list[KinetoIdentity], where: Path | str,
                 messages: list[str]) -> tuple[KinetoIdentity, tuple[Path, ...]]:
    """The trace that stands for the rank: the only one, or the latest window of one process."""
    if len(items) == 1:
        return items[0], ()
    workers = {i.worker for i in items}
    what = f"rank {key[1]}" if key[0] == "rank" else f"worker {key[1]}"
    if len(workers) != 1 or None in workers or len({i.window_ns for i in items}) != len(items):
        raise DiscoveryError(
            f"{where}: several torch-profiler traces claim {what}: {_names(i.path for i in items)}, "
            "written by different processes (their worker names differ); keep one run's traces per "
            "folder, or pass the files explicitly"
        )
    ordered = sorted(items, key=lambda i: i.window_ns or 0)
    latest, earlier = ordered[-1], tuple(i.path for i in ordered[:-1])
    messages.append(
        f"{what}: {len(items)} profiler windows of one process ({_names(i.path for i in ordered)}, a "
        f"profiler schedule with repeat > 1): analysing the latest, {latest.path.name}; pass an earlier "
        "window's file alone to analyse it"
    )
    return latest, earlier


def _tags(picked: dict[tuple, tuple[KinetoIdentity, tuple[Path, ...]]], messages: list[str]) -> list[KinetoRank]:
    """Tags: ``TP<rank>`` from distributedInfo; traces without one numbered after them by name."""
    ranks = [KinetoRank(RankTag(tp=ident.rank, global_rank=ident.rank), ident.path, ident, windows)
             for (kind, _), (ident, windows) in picked.items() if kind == "rank" and ident.rank is not None]
    unranked = sorted(((ident, windows) for (kind, _), (ident, windows) in picked.items() if kind == "name"),
                      key=lambda item: item[0].path.name)
    first = max((r.tag.tp for r in ranks), default=-1) + 1
    numbered = [KinetoRank(RankTag(tp=first + k), ident.path, ident, windows)
                for k, (ident, windows) in enumerate(unranked)]
    if numbered and (ranks or len(numbered) > 1):
        listed = ", ".join(f"{r.trace.name} -> {r.tag}" for r in numbered)
        messages.append(f"no distributedInfo (rank) in {len(numbered)} torch-profiler trace(s): numbered "
                        f"by file name: {listed}")
    return ranks + numbered


def _names(paths) -> str:
    return ", ".join(Path(p).name for p in paths)
