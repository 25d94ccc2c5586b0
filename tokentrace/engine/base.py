"""The one interface every backend sits behind: a loaded trace that answers PerfettoSQL.

A backend supplies a *client* with ``execute_query(sql) -> QueryResult`` and ``close()`` (every
backend uses :class:`tokentrace.engine.rpc.RpcClient`, over WebAssembly or HTTP). :class:`Engine`
adds typed DataFrames, error messages that say what to do, the load-time health check and
closing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pandas as pd

from tokentrace.engine.results import to_dataframe
from tokentrace.errors import (
    EngineError,
    InputError,
    QueryError,
    TokentraceError,
    TokentraceWarning,
)

CHUNK_BYTES = 16 * 1024 * 1024
PROBLEMS_SQL = """
SELECT name, idx, severity, source, value, description
FROM stats
WHERE severity IN ('error', 'data_loss') AND value > 0
ORDER BY severity, name, idx
"""


@dataclass
class LoadInfo:
    """What loading cost: bytes fed (as stored on disk), seconds taken and, for the embedded
    engine, the WebAssembly heap it took (bytes; 0 where unknown) and the build (``wasm32`` or
    ``memory64``; '' for the other backends)."""

    path: Path | None = None
    bytes_fed: int = 0
    seconds: float = 0.0
    heap_bytes: int = 0
    build: str = ""

    @property
    def mb_per_s(self) -> float:
        """Load speed in MB/s of the file as stored (0 when nothing was loaded)."""
        return self.bytes_fed / 1e6 / self.seconds if self.seconds else 0.0


class Engine:
    """A trace loaded into Perfetto's trace processor. Use as a context manager.

    Attributes:
        backend: ``"embedded"``, ``"native"`` or ``"remote"``.
        trace_path: the loaded file (None for a remote server's own trace).
        description: the backend in words, for metadata (wasm file, shell path, address).
        load: how long loading took.
    """

    def __init__(self, client, backend: str, description: str, trace_path: Path | None = None):
        # One request at a time: the trace processor (WebAssembly in-process, or one RPC
        # stream) serves one caller, and two threads of a notebook sharing a trace made the
        # embedded engine abort the process. (Re-entrant: a close from the collector may run
        # on a thread inside a query.)
        self._lock = threading.RLock()
        self._client = client
        self.backend = backend
        self.description = description
        self.trace_path = trace_path
        self.load = LoadInfo(trace_path)

    def query(self, sql: str) -> pd.DataFrame:
        """Runs PerfettoSQL; returns the last statement's rows as a typed DataFrame.

        Raises:
            QueryError: the SQL failed (Perfetto's message included).
            EngineError: the trace processor itself failed or was closed.
        """
        if self._client is None:
            raise EngineError("this trace was closed; open it again with open_trace()")
        result = self._execute(sql)
        if result.error:
            raise QueryError(f"SQL failed: {sql_error_line(result.error)}")
        return to_dataframe(result)

    def _execute(self, sql: str):
        try:
            with self._lock:
                if self._client is None:
                    raise EngineError("this trace was closed; open it again with open_trace()")
                return self._client.execute_query(sql)
        except TokentraceError:
            raise
        except (ConnectionError, OSError) as exc:
            raise EngineError(f"lost the {self.backend} trace processor ({exc}); "
                              "start it again and retry") from None
        except Exception as exc:  # protobuf DecodeError, http.client errors and the like
            raise EngineError(f"{self.backend} trace processor failed: {_one_line(exc)}") from None

    @contextlib.contextmanager
    def time_limit(self, seconds: float | None) -> Iterator[None]:
        """Stops the queries run inside the block once ``seconds`` have passed since it began
        (None: no limit). A stopped query raises :class:`~tokentrace.errors.QueryError`, and
        the trace is not queried again: the trace processor was stopped mid-way."""
        transport = getattr(self._client, "transport", None)
        if seconds is None or transport is None:
            yield
            return
        transport.deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            transport.deadline = None

    def stats_problems(self) -> pd.DataFrame:
        """Perfetto ``stats`` rows of severity error or data_loss with a value above 0."""
        return self.query(PROBLEMS_SQL)

    def warn_problems(self) -> None:
        """Emits one :class:`TokentraceWarning` naming each problem stat and its count."""
        problems = self.stats_problems()
        if problems.empty:
            return
        totals = problems.groupby("name", sort=True)["value"].sum()
        listed = ", ".join(f"{name} {int(count)}" for name, count in totals.items())
        where = self.trace_path.name if self.trace_path else "trace"
        warnings.warn(f"{where}: Perfetto reported errors/data loss while loading: {listed} "
                      "(run `tokentrace query trace_health` for details)",
                      TokentraceWarning, stacklevel=3)

    def close(self) -> None:
        """Releases the trace processor (memory, subprocess or connection) now. Idempotent."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a dead server must not mask the real error
                pass

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._client is None else "open"
        return f"<Engine {self.backend} {self.trace_path or self.description} ({state})>"


class GrowingFile(Protocol):
    """A trace file still being written (:func:`feed_trace` follows it to its end)."""

    def wait(self) -> bool:
        """Called at the file's current end: waits until it may have grown; False once it is
        complete. Raises the writer's error when the writing failed."""


@dataclasses.dataclass(frozen=True)
class GrowingTrace:
    """A trace file still being written, to load as it grows (embedded engine only).

    Attributes:
        path: the file.
        writer: says when it may have grown, and when it is complete (:class:`GrowingFile`).
        expected_bytes: its expected size, from which the build and the heap check are chosen.
    """

    path: Path
    writer: GrowingFile
    expected_bytes: int


def feed_trace(client, path: Path, chunk_bytes: int = CHUNK_BYTES,
               growing: GrowingFile | None = None) -> LoadInfo:
    """Streams a trace file into ``client`` (``parse``/``notify_eof``) without holding it whole;
    with ``growing``, one still being written, followed until its writer is done.

    Gzip is left to Perfetto, which detects and inflates it while parsing.

    Raises:
        InputError: the file is missing or unreadable.
        EngineError: Perfetto rejected the data.
    """
    start = time.perf_counter()
    fed = 0
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the trace ({exc.strerror})") from None
    with handle:
        # one buffer read into again and again: the engine copies each chunk before the next
        buffer = bytearray(chunk_bytes)
        view = memoryview(buffer)
        complete = growing is None
        while True:
            size = handle.readinto(buffer)
            if size:
                _check_append(client.parse(view[:size]), path)
                fed += size
            elif complete:
                break
            else:  # read once more after the writer is done: what it wrote last
                complete = not growing.wait()
        if not fed:
            raise InputError(f"{path}: the file is empty")
    _check_finalize(client.notify_eof(), path)
    return LoadInfo(path, fed, time.perf_counter() - start)


def _check_append(result, path: Path) -> None:
    error = getattr(result, "error", "")
    if error:
        raise EngineError(f"{path}: Perfetto could not parse the trace: {_one_line(error)} "
                          "(is it a Chrome JSON / Perfetto trace, complete and not truncated?)")


def _check_finalize(result, path: Path) -> None:
    # A client without a finalize status (None) has nothing to check.
    error = getattr(result, "error", "") if result is not None else ""
    if error:
        raise EngineError(f"{path}: Perfetto could not finish loading the trace: "
                          f"{_one_line(error)} (truncated or still being written? "
                          "check the file, or merge again)")


def time_limit_error() -> QueryError:
    """What a query stopped by :meth:`Engine.time_limit` raises."""
    return QueryError("the query ran past its time limit and was stopped; the trace processor "
                      "cannot be queried again: open the trace again")


def _one_line(text) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return " | ".join(lines[:6])[:800]


def sql_error_line(text) -> str:
    """Perfetto's SQL error in one readable line: its own message (the last line of its
    traceback) first, then where it happened (the innermost ``File ... line ... col ...`` and
    the statement's text there). The traceback starts with the fully expanded statement, which
    says nothing to a reader, so it is left out."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    message = lines[-1]
    places = [i for i, line in enumerate(lines[:-1]) if line.startswith("File ")]
    if not places:
        return message[:800]
    at = places[-1]
    snippet = lines[at + 1] if at + 1 < len(lines) - 1 and lines[at + 1] != "^" else ""
    where = lines[at].removeprefix("File ") + (f": {snippet[:120]}" if snippet else "")
    return f"{message} (at {where})"[:800]
