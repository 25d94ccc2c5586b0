"""The notebook facade: one object per trace, one method per bundled query, pandas out.

Example::

    import tokentrace

    with tokentrace.open("tests/data/sample_t39_tp2") as trace:   # merged once, then cached
        gaps = trace.gpu_gaps(min_gap_us=200)
        stalls = trace.host_stalls(top=3)
        trace.query("SELECT COUNT(*) AS n FROM slice")

A profile folder is merged on the fly (every rank in one combined file) into a cache next to the
inputs, reused while the inputs are unchanged (see :mod:`tokentrace.analysis_cache`); a merged
trace or a raw Proton/VizTracer trace is loaded as it is. Every method returns a DataFrame with
the column types its query's header documents; times are integer nanoseconds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from tokentrace.errors import InputError

__all__ = ["Analysis", "open_analysis", "GPU_WINDOW_SQL", "LOOP_FRAMES_SQL"]

# The span of each rank's GPU activity: the frame of the timeline plot (gaps lie inside it).
GPU_WINDOW_SQL = """
INCLUDE PERFETTO MODULE tokentrace.kernels;
SELECT r.rank, r.dp, r.cp, r.tp, r.stage,
       MIN(k.ts) AS first_ts, MAX(k.ts + k.dur) AS last_end_ts, COUNT(*) AS kernels
FROM tt_kernels AS k JOIN tt_ranks AS r USING (rank)
GROUP BY r.rank
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank
"""

# Host frames that enclose most of their rank's GPU activity (the serving loop, main): no
# single function to blame when a gap falls back to them. ${min_share}: a float literal.
LOOP_FRAMES_SQL = """
INCLUDE PERFETTO MODULE tokentrace.kernels;
WITH _tt_window AS (
  SELECT rank, MAX(ts + dur) - MIN(ts) AS active_ns FROM tt_kernels GROUP BY rank
)
SELECT r.rank, s.name AS frame, MAX(s.dur) AS max_dur_ns
FROM slice AS s
JOIN thread_track AS tt ON s.track_id = tt.id
JOIN thread AS t USING (utid)
JOIN tt_ranks AS r ON t.upid = r.host_upid
JOIN _tt_window AS w USING (rank)
WHERE s.dur >= ${min_share} * w.active_ns
GROUP BY r.rank, s.name
ORDER BY r.rank, max_dur_ns DESC, s.name
"""


class Analysis:
    """A loaded trace with one method per bundled query. Close it (or use ``with``).

    Attributes:
        trace_path: the file Perfetto loaded (the combined merged trace for a folder).
        source: what was opened (folder or file).
        engine: the open :class:`tokentrace.engine.Engine`.
        merged: the cache entry when a folder was merged (``None`` otherwise).
    """

    def __init__(self, engine, source: Path, merged=None):
        self.engine = engine
        self.source = source
        self.merged = merged
        self.trace_path = engine.trace_path

    # -- free SQL -----------------------------------------------------------------------------

    def query(self, sql: str) -> pd.DataFrame:
        """Runs PerfettoSQL (stdlib and ``tokentrace.*`` modules included with ``INCLUDE``).

        Example::

            trace.query("SELECT name, COUNT(*) AS n FROM slice GROUP BY name ORDER BY n DESC")
        """
        return self.engine.query(sql)

    def run(self, name: str | os.PathLike, **params) -> pd.DataFrame:
        """Runs a bundled query by name (or a ``.sql`` file) with typed parameters.

        Example::

            trace.run("gpu_gaps", min_gap_us=500, rank="TP1")

        Raises:
            QueryError: unknown query, bad parameter, or failing SQL.
        """
        from tokentrace.queries import run_query
        return run_query(self.engine, name, params)

    # -- bundled queries ----------------------------------------------------------------------

    def gpu_gaps(self, min_gap_us: float = 100, launch_overhead_us: float = 10,
                 rank: str = "") -> pd.DataFrame:
        """GPU idle intervals per rank with their class (``host_late``, ``launch_overhead``,
        ``gpu_queued``, ``no_link``) and the launch of the kernel that ended them.

        Example::

            trace.gpu_gaps(min_gap_us=1000).groupby("gap_class")["dur"].sum() / 1e6  # ms
        """
        return self.run("gpu_gaps", min_gap_us=min_gap_us,
                        launch_overhead_us=launch_overhead_us, rank=rank)

    def host_stalls(self, top: int = 5, min_gap_us: float = 100,
                    launch_overhead_us: float = 10, rank: str = "") -> pd.DataFrame:
        """For each GPU gap, the host (VizTracer) frames that ran during it, ranked.

        Example::

            stalls = trace.host_stalls(top=1)   # the one frame behind each gap
        """
        return self.run("host_stalls", **_declared("host_stalls", top=top,
                                                   min_gap_us=min_gap_us,
                                                   launch_overhead_us=launch_overhead_us,
                                                   rank=rank))

    def host_stall_profile(self, **params) -> pd.DataFrame:
        """Host frames by the GPU idle time they overlap, summed over gaps, per rank.

        Example::

            trace.host_stall_profile().nlargest(5, "self_ns")[["rank", "function", "self_ns"]]
        """
        return self.run("host_stall_profile", **params)

    def launch_latency(self, **params) -> pd.DataFrame:
        """Launch -> kernel start per kernel name (negative values mean bad alignment)."""
        return self.run("launch_latency", **params)

    def step_breakdown(self, step_name: str = "decode_step", **params) -> pd.DataFrame:
        """Per scheduler step: wall time, GPU busy and idle by gap class.

        Example::

            trace.step_breakdown(step_name="decode_step").groupby("rank")["idle_ns"].mean()
        """
        return self.run("step_breakdown", step_name=step_name, **params)

    def rank_skew(self, **params) -> pd.DataFrame:
        """The same step on every rank: start/end skew and the slowest rank."""
        return self.run("rank_skew", **params)

    def collective_skew(self, **params) -> pd.DataFrame:
        """Per collective kernel: how far apart the ranks arrived and ended."""
        return self.run("collective_skew", **params)

    def kernel_summary(self, name_glob: str = "*") -> pd.DataFrame:
        """Per rank and kernel name: count, total/mean/min/max/median duration, GPU share."""
        return self.run("kernel_summary", name_glob=name_glob)

    def trace_health(self) -> pd.DataFrame:
        """Per rank: Perfetto import problems, flow coverage, VizTracer overflow, alignment."""
        return self.run("trace_health")

    def gpu_windows(self) -> pd.DataFrame:
        """Per rank: first kernel start, last kernel end (ns) and kernel count."""
        return self.query(GPU_WINDOW_SQL)

    def loop_frames(self, min_share: float = 0.5) -> pd.DataFrame:
        """Host frames lasting at least ``min_share`` of their rank's GPU active window
        (``rank, frame, max_dur_ns``): the loops that enclose everything, not causes."""
        return self.query(LOOP_FRAMES_SQL.replace("${min_share}", repr(float(min_share))))

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Releases the trace processor now (idempotent)."""
        self.engine.close()

    def __enter__(self) -> Analysis:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tokentrace.Analysis {self.trace_path} (from {self.source})>"


def _declared(name: str, **params) -> dict:
    """Keeps only the parameters the bundled query declares (a query may take fewer)."""
    from tokentrace.queries import find_query
    spec = find_query(name)
    return {k: v for k, v in params.items() if spec.param(k) is not None}


def open_analysis(path: str | os.PathLike, *, engine: str = "embedded",
                  cache_dir: str | os.PathLike | None = None, **merge_options) -> Analysis:
    """Opens a profile folder, a merged trace or a raw trace for analysis.

    Args:
        path: a profile folder (merged on the fly, cached), or one trace file.
        engine: ``embedded`` (default), ``native`` or ``remote`` (see :func:`open_trace`).
        cache_dir: where a folder's merge is cached (default: next to the inputs).
        **merge_options: for folders: ``align``, ``offset_us``, ``profile_id``, ``jobs``.

    Example::

        with tokentrace.open("profiles/20260101-120000") as trace:
            print(trace.trace_health()[["rank", "align_method", "stats_errors"]])

    Raises:
        InputError: ``path`` does not exist. Merge and engine errors as raised there.
    """
    from tokentrace.engine import open_trace

    source = Path(path).expanduser()
    if not source.exists():
        raise InputError(f"{source}: no such profile folder or trace file")
    merged = None
    if source.is_dir():
        from tokentrace.analysis_cache import merged_folder
        merged = merged_folder(source, cache_dir, **merge_options)
        trace = merged.path
    elif merge_options:
        raise InputError(f"{source}: merge options ({', '.join(merge_options)}) apply to a "
                         "profile folder, not to one trace file")
    else:
        trace = source
    return Analysis(open_trace(trace, engine), source, merged)
