"""The annotated traces ``tokentrace analyze`` writes: ``OUT/annotated/<name>.annotated.json``,
one per trace the run queried (a profile folder: one per rank; one merged trace: that file, all
its ranks), each the merged trace with the "GPU idle (tokentrace)" tracks drawn in from the
run's own ``gap_causes`` rows and :func:`~tokentrace.annotate.gaps.annotation_support` rows
(computed in the engine that ran the query: no trace is loaded again). They open in any
Perfetto UI (ui.perfetto.dev, or ``tokentrace view OUT``).

``OUT/annotated/index.json`` lists this run's files (``tokentrace view OUT`` reads it): a file
of an earlier run into the same folder, for other ranks, is not taken for one of this run's.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from tokentrace.annotate.api import AnnotationResult, annotate_with_gaps
from tokentrace.annotate.gaps import gaps_from_rows
from tokentrace.errors import InputError
from tokentrace.runtime.files import write_bytes

ANNOTATED_DIR = "annotated"
INDEX = "index.json"
SUFFIX = ".annotated.json"


@dataclasses.dataclass(frozen=True)
class TraceToAnnotate:
    """One trace the run queried.

    Attributes:
        path: the merged trace (per rank, or holding every rank).
        shift_ns: what the run added to its times (the common axis); 0 for one trace.
        ranks: the ranks it holds; empty: all the rows' ranks.
    """

    path: Path
    shift_ns: int = 0
    ranks: tuple[str, ...] = ()


def annotated_name(merged: Path) -> str:
    """``sample-TP0.merged.json`` -> ``sample-TP0.annotated.json`` (``.gz`` kept)."""
    name = merged.name
    gz = name.endswith(".gz")
    stem = name.removesuffix(".gz").removesuffix(".json").removesuffix(".merged")
    return stem + SUFFIX + (".gz" if gz else "")


def write_annotated_traces(folder: str | os.PathLike, traces: Sequence[TraceToAnnotate],
                           gap_rows: pd.DataFrame, support: pd.DataFrame, *, min_gap_us: float,
                           stall_min_us: float, source: str | os.PathLike | None = None
                           ) -> list[AnnotationResult]:
    """Writes each trace annotated into ``folder`` and the folder's :data:`INDEX`; returns what
    was written, in the order of ``traces``.

    Args:
        folder: ``OUT/annotated``.
        traces: the traces the run queried.
        gap_rows: the run's ``gap_causes`` table (its times on the common axis).
        support: the run's :func:`~tokentrace.annotate.gaps.annotation_support` rows.
        min_gap_us, stall_min_us: the ``gap_causes`` settings of the run.
        source: what was analysed (recorded in the index).

    Raises:
        InputError: a trace is not a merged trace, or a file cannot be written.
    """
    out = Path(folder)
    names = [annotated_name(t.path) for t in traces]
    if len(set(names)) != len(names):
        raise InputError(f"{out}: two traces would have one annotated name ({', '.join(names)})")
    results, listed = [], []
    for trace, name in zip(traces, names):
        ranks = list(trace.ranks) or list(dict.fromkeys(support.loc[support["kind"] == "gpu", "rank"].astype(str)))
        mine = support[support["rank"].astype(str).isin(ranks)]
        rows = gap_rows[gap_rows["rank"].astype(str).isin(ranks)]
        used = {int(v) for v in mine.loc[mine["kind"] == "id", "pid"]}
        gaps = gaps_from_rows(rows, mine, trace.shift_ns)
        result = annotate_with_gaps(trace.path, out / name, gaps, used,
                                    min_gap_us=min_gap_us, stall_min_us=stall_min_us)
        results.append(result)
        listed.append({"file": name, "ranks": ranks, "merged": str(trace.path.resolve()),
                       "slices": result.slices, "flows": result.flows, "stalls": result.stalls})
    index = {"source": None if source is None else str(Path(source).resolve()), "traces": listed}
    write_bytes(out / INDEX, json.dumps(index, indent=1).encode("utf-8"))
    return results


def read_index(output: str | os.PathLike) -> list[Path] | None:
    """The annotated traces an ``analyze`` output folder lists (``OUT/annotated/index.json``),
    those present; None when ``output`` holds no such index.

    Raises:
        InputError: the index is unreadable, or lists no file present.
    """
    index = Path(output) / ANNOTATED_DIR / INDEX
    if not index.is_file():
        return None
    try:
        listed = json.loads(index.read_text(encoding="utf-8"))["traces"]
        names = [str(t["file"]) for t in listed]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{index}: cannot be read ({exc}); run tokentrace analyze again") from None
    # names only, inside the folder: an index copied from elsewhere leads nowhere else
    found = [index.parent / n for n in names if n == Path(n).name and (index.parent / n).is_file()]
    if not found:
        raise InputError(f"{index}: lists no annotated trace present; run tokentrace analyze again")
    return found
