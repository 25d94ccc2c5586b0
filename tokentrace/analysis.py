"""The notebook facade: one object per trace, one method per bundled query, pandas out.

Example::

    import tokentrace

    with tokentrace.open("tests/data/sample_t39_tp2") as trace:   # merged once, then cached
        gaps = trace.gpu_gaps(min_gap_us=200)
        stalls = trace.host_stalls(top=3)
        trace.query("SELECT COUNT(*) AS n FROM slice")

A profile folder is merged on the fly (every rank in one combined file) into a cache next to the
inputs, reused while the inputs are unchanged (see :mod:`tokentrace.merge.cache`); a merged
trace or a raw Proton/VizTracer trace is loaded as it is. Every method returns a DataFrame with
the column types its query's header documents; times are integer nanoseconds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from tokentrace.errors import InputError
from tokentrace.options import EngineOptions, MergeOptions

__all__ = ["Analysis", "open_analysis"]


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
        from tokentrace.catalog import run_query
        return run_query(self.engine, name, params)

    # -- bundled queries ----------------------------------------------------------------------

    def gpu_gaps(self, min_gap_us: float = 100, launch_overhead_us: float = 10,
                 rank: str = "", **params) -> pd.DataFrame:
        """GPU idle intervals per rank with their class (``host_late``, ``launch_overhead``,
        ``gpu_queued``, ``no_link``), phase (``startup``/``steady``), ``by_host`` and the launch
        of the kernel that ended them (``startup_kernels=`` as in the query).

        Example::

            trace.gpu_gaps(min_gap_us=1000).groupby("gap_class")["dur"].sum() / 1e6  # ms
        """
        return self.run("gpu_gaps", min_gap_us=min_gap_us,
                        launch_overhead_us=launch_overhead_us, rank=rank, **params)

    def host_stalls(self, top: int = 5, min_gap_us: float = 100,
                    launch_overhead_us: float = 10, rank: str = "", **params) -> pd.DataFrame:
        """For each GPU gap, the host (VizTracer) frames that ran during it, ranked; the row
        with ``frame_rank`` 1 is the gap's cause.

        Example::

            causes = trace.host_stalls(top=1)   # the one frame behind each gap
        """
        return self.run("host_stalls", top=top, min_gap_us=min_gap_us,
                        launch_overhead_us=launch_overhead_us, rank=rank, **params)

    def host_stall_profile(self, min_gap_us: float = 100, max_gap_us: float = 0,
                           include_startup: bool = False, host_only: bool = False,
                           **params) -> pd.DataFrame:
        """Host frames by the GPU idle time they own (self_ns), summed over the selected gaps,
        per rank; ``frame_rank`` 1 is the rank's top cause. Steady gaps only unless
        ``include_startup``; ``host_only`` keeps host-caused gaps; ``max_gap_us`` > 0 keeps
        gaps shorter than it.

        Example::

            stalls = trace.host_stall_profile(min_gap_us=2000, host_only=True)
            stalls[stalls.frame_rank == 1][["rank", "function", "self_ns", "gaps"]]
        """
        return self.run("host_stall_profile", min_gap_us=min_gap_us, max_gap_us=max_gap_us,
                        include_startup=include_startup, host_only=host_only, **params)

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

    def gpu_windows(self, min_gap_us: float = 100, **params) -> pd.DataFrame:
        """Per rank: the GPU's active window (first kernel start, last kernel end), busy and
        idle time, and idle in gaps by class, phase and host-caused (``gpu_windows.sql``).

        Example::

            trace.gpu_windows()[["rank", "active_ns", "idle_share", "idle_host_steady_ns"]]
        """
        return self.run("gpu_windows", min_gap_us=min_gap_us, **params)

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


def open_analysis(path: str | os.PathLike, *, engine: str | EngineOptions = "embedded",
                  cache_dir: str | os.PathLike | None = None,
                  merge: MergeOptions | None = None) -> Analysis:
    """Opens a profile folder, a merged trace or a raw trace for analysis.

    Args:
        path: a profile folder (merged on the fly, cached), or one trace file.
        engine: ``"embedded"`` (default), ``"native"``, ``"remote"``, or an
            :class:`~tokentrace.options.EngineOptions` with the backend's settings.
        cache_dir: where a folder's merge is cached (default: next to the inputs).
        merge: how a folder is merged (:class:`~tokentrace.options.MergeOptions`).

    Example::

        with tokentrace.open("profiles/20260101-120000") as trace:
            print(trace.trace_health()[["rank", "align_method", "stats_errors"]])

    Raises:
        InputError: ``path`` does not exist. Merge and engine errors as raised there.
    """
    from tokentrace.catalog import open_trace

    source = Path(path).expanduser()
    if not source.exists():
        raise InputError(f"{source}: no such profile folder or trace file")
    engine_options = engine if isinstance(engine, EngineOptions) else EngineOptions(engine)
    merged = None
    if source.is_dir():
        from tokentrace.merge.cache import merged_folder
        merged = merged_folder(source, cache_dir, merge)
        trace = merged.path
    elif merge is not None:
        raise InputError(f"{source}: merge options apply to a profile folder, not to one trace "
                         "file")
    else:
        trace = source
    return Analysis(open_trace(trace, engine_options), source, merged)
