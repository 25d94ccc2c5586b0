"""The per-rank map on a Dask cluster (optional extra ``tokentrace[dask]``).

``dask`` starts a local cluster (one worker process per core, one thread each: the embedded
engine holds the GIL while it parses); ``dask://HOST:PORT`` connects to a running scheduler, whose
workers must see the per-rank traces at the same paths (shared storage). Each rank is one task
(:func:`~tokentrace.fleet.execute.map_rank`); results come back in rank order, so the tables are
the local executor's, byte for byte.

What can go wrong on a cluster ends the map with one :class:`~tokentrace.errors.InputError`
naming what was lost, never a hang or Dask's traceback (its log lines are held back meanwhile):

* nothing listens at the address: at once; a listener that never answers (not a Dask scheduler,
  a hung one): after :data:`CONNECT_TIMEOUT_S` (Dask's own handshake has no time limit);
* the scheduler lost mid-run (stopped, killed, the network down): as soon as the client sees
  its connection closed;
* a worker lost while it maps a rank (killed, out of memory): as soon as the scheduler reports
  it gone (the scheduler is asked every :data:`POLL_S` which worker maps which rank). Dask
  would run the rank again elsewhere, but the rank that took one worker's memory takes the
  next one's too;
* no worker in the cluster (none started, all lost) for :data:`NO_WORKER_TIMEOUT_S`.

The client (and a local cluster, its processes included) is closed on every way out, a signal
too; the tasks still queued are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

from tokentrace.errors import InputError, TokentraceError
from tokentrace.runtime.signals import children_spared_sigint

#: Seconds to reach the scheduler (TCP connect and Dask's handshake), and to close the client.
CONNECT_TIMEOUT_S = 10.0
#: Seconds the map waits while the cluster has no worker (none started yet, or all lost).
NO_WORKER_TIMEOUT_S = 30.0
#: How often the scheduler is asked which worker maps which rank, seconds.
POLL_S = 0.25

_WORKER_LOST = "killed, or out of memory? a rank of 100-500 MB needs 1-3 GiB in its worker"


def map_on_dask(traces: Sequence, requests: Sequence, engine, executor: str,
                progress: Callable[[str], None] | None = None) -> list[dict]:
    """Maps every rank on the cluster ``executor`` names; see the module docstring.

    Raises:
        InputError: dask/distributed not installed, a bad executor address, the scheduler
            unreachable or lost, a worker lost while it maps a rank, no worker.
        TokentraceError: a rank's own error (its load or a query), as the local executor raises it.
    """
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise InputError("--executor dask needs dask and distributed: pip install "
                         "'tokentrace[dask]'") from None
    with _dask_logs_held(), _client(executor) as (client, where):
        return _map(client, where, list(traces), list(requests), engine, progress)


def scheduler_address(executor: str) -> str:
    """The scheduler's address (``tcp://HOST:PORT``) in ``dask://HOST:PORT``.

    Raises:
        InputError: not ``dask://HOST:PORT`` (a port missing or not a number).
    """
    from distributed.comm.addressing import parse_address, parse_host_port

    given = executor.removeprefix("dask://")
    address = given if "://" in given else f"tcp://{given}"
    try:
        scheme, location = parse_address(address)
        if scheme == "tcp":
            host, port = parse_host_port(location)
            if not host or not 0 < int(port) < 65536:
                raise ValueError(location)
    except (ValueError, TypeError):
        raise InputError(f"--executor {executor}: not a scheduler address; use "
                         "dask://HOST:PORT (e.g. dask://127.0.0.1:8786)") from None
    return address


@contextlib.contextmanager
def _client(executor: str) -> Iterator[tuple[object, str]]:
    """A connected client and the words for its cluster; closed (the local cluster too) on the
    way out, whatever ends the block."""
    from distributed import Client, LocalCluster

    cluster = None
    if executor == "dask":
        where = "the local Dask cluster"
        try:
            with children_spared_sigint():  # a terminal's Ctrl+C is this process's to handle
                cluster = LocalCluster(threads_per_worker=1, processes=True, dashboard_address=None,
                                       silence_logs=logging.CRITICAL)
                client = Client(cluster, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError, RuntimeError) as exc:
            if cluster is not None:
                _quietly(cluster.close)
            raise InputError(f"--executor dask: {where} did not start ({_words(exc)}); "
                             "use --executor local") from None
    elif executor.startswith("dask://"):
        address = scheduler_address(executor)
        where = f"the Dask scheduler at {address}"
        _reach(address, executor)
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise InputError(f"--executor {executor}: cannot connect to {where} ({_words(exc)}); "
                             "check that `dask scheduler` runs there") from None
    else:
        raise InputError(f"unknown executor {executor!r}: use local, dask or dask://HOST:PORT")
    try:
        yield client, where
    finally:
        _quietly(lambda: client.close(timeout=CONNECT_TIMEOUT_S))
        if cluster is not None:
            _quietly(lambda: cluster.close(timeout=CONNECT_TIMEOUT_S))


def _reach(address: str, executor: str) -> None:
    """Checks, within :data:`CONNECT_TIMEOUT_S`, that a Dask scheduler answers at ``address``:
    refused at once when nothing listens; Dask's handshake in a thread of its own, with a time
    limit Dask's client does not set (a listener that never answers hung it for ever).

    Raises:
        InputError: naming the address and what to do.
    """
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme == "tcp":
        try:
            socket.create_connection(parse_host_port(location), timeout=CONNECT_TIMEOUT_S).close()
        except TimeoutError:
            raise InputError(f"--executor {executor}: {address} did not accept a connection "
                             f"within {CONNECT_TIMEOUT_S:g} s; check the address, and that a "
                             "firewall lets it through") from None
        except socket.gaierror as exc:
            raise InputError(f"--executor {executor}: the host of {address} is unknown "
                             f"({exc.strerror or exc}); check the address") from None
        except OSError as exc:
            raise InputError(f"--executor {executor}: no Dask scheduler at {address} "
                             f"({exc.strerror or exc}); start one there (dask scheduler "
                             "--port PORT) or check the address") from None
    outcome: list[BaseException | None] = []
    probe = threading.Thread(target=lambda: outcome.append(_handshake(address)), daemon=True,
                             name="tokentrace-dask-probe")
    probe.start()
    probe.join(CONNECT_TIMEOUT_S + 5.0)  # the thread's own limit ends it first
    error = outcome[0] if outcome else TimeoutError()
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        raise InputError(f"--executor {executor}: {address} accepted the connection but no Dask "
                         f"scheduler answered within {CONNECT_TIMEOUT_S:g} s; check the address "
                         "(the scheduler's port, not its dashboard's) and that the scheduler "
                         "is not hung") from None
    if error is not None:
        raise InputError(f"--executor {executor}: {address} is not a Dask scheduler that "
                         f"answers ({_words(error)}); check the address") from None


def _handshake(address: str) -> BaseException | None:
    """Dask's connect and handshake to ``address`` on an event loop of this thread, within
    :data:`CONNECT_TIMEOUT_S`; the error, or None when a scheduler answered."""
    from distributed.comm import connect

    async def probe() -> None:
        comm = await asyncio.wait_for(connect(address, timeout=CONNECT_TIMEOUT_S), CONNECT_TIMEOUT_S)
        await comm.close()

    try:
        asyncio.run(probe())
    except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
        return exc
    return None


def _map(client, where: str, traces: list, requests: list, engine,
         progress: Callable[[str], None] | None) -> list[dict]:
    """Submits one task per rank, collects each result as it comes, and watches the cluster
    meanwhile (see the module docstring)."""
    from distributed import wait
    from distributed.client import FuturesCancelledError

    from tokentrace.fleet.execute import map_rank

    run = uuid.uuid4().hex[:12]  # keys of this run only: another run on a shared scheduler has its own
    futures = [client.submit(map_rank, t, requests, engine, key=f"tokentrace-map-{t.rank}-{i}-{run}",
                             pure=False) for i, t in enumerate(traces)]
    rank_of = {f.key: t.rank for f, t in zip(futures, traces)}
    order = {f.key: i for i, f in enumerate(futures)}
    results: dict[str, dict] = {}
    running: dict[str, list] = {}  # worker -> [(index, rank)] it mapped at the last look
    no_worker_since: float | None = None
    try:
        while len(results) < len(futures):
            pending = [f for f in futures if f.key not in results]
            with contextlib.suppress(TimeoutError, FuturesCancelledError), client.as_current():
                wait(pending, timeout=POLL_S, return_when="FIRST_COMPLETED")
            cancelled = [(order[f.key], rank_of[f.key]) for f in pending if f.status == "cancelled"]
            if cancelled:
                raise _scheduler_lost(where, cancelled)
            for future in pending:
                if future.status != "pending":
                    results[future.key] = _result(future, rank_of[future.key], where)
                    future.release()  # held here now: the cluster may forget it
                    if progress:
                        progress(rank_of[future.key])
            if len(results) == len(futures):
                break
            try:  # {worker: [keys it maps]}
                look = client.sync(client.scheduler.processing, callback_timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise _scheduler_lost(where, sorted((order[f.key], rank_of[f.key]) for f in futures
                                                    if f.key not in results), exc) from None
            lost = {worker: ranks for worker, ranks in running.items() if ranks and worker not in look}
            if lost:
                worker, ranks = next(iter(lost.items()))
                raise InputError(f"{where}: its worker {worker} was lost while it mapped "
                                 f"{_ranks(ranks)} ({_WORKER_LOST}); run again")
            running = {worker: sorted((order[k], rank_of[k]) for k in keys if k in rank_of and k not in results)
                       for worker, keys in look.items()}
            if look:
                no_worker_since = None
            elif no_worker_since is None:
                no_worker_since = time.monotonic()
            elif time.monotonic() - no_worker_since > NO_WORKER_TIMEOUT_S:
                raise InputError(f"{where}: no worker for {NO_WORKER_TIMEOUT_S:g} s (none started, "
                                 "or all lost); start some (dask worker ADDRESS --nthreads 1) "
                                 "and run again")
    finally:
        if len(results) < len(futures) and client.status == "running":
            _quietly(lambda: client.cancel([f for f in futures if f.key not in results]))
    return [results[f.key] for f in futures]


def _result(future, rank: str, where: str) -> dict:
    """A finished task's rows; its failure as one error naming the rank and what was lost."""
    from distributed import KilledWorker
    from distributed.client import FutureCancelledError

    try:
        return future.result(timeout=CONNECT_TIMEOUT_S)
    except TokentraceError:
        raise  # the rank's own error (detached by map_rank), as the local executor gives it
    except KilledWorker:
        raise InputError(f"{where}: every worker that mapped rank {rank} died ({_WORKER_LOST}); "
                         "run again with larger workers") from None
    except (FutureCancelledError, OSError, TimeoutError) as exc:
        raise InputError(f"{where}: rank {rank}'s rows were lost ({_words(exc)}); run again") from None


def _ranks(mapped: list[tuple[int, str]]) -> str:
    """``rank TP0`` or ``ranks TP0, TP1``, in rank order."""
    return ("rank " if len(mapped) == 1 else "ranks ") + ", ".join(rank for _, rank in mapped)


def _scheduler_lost(where: str, mapped: list[tuple[int, str]], exc: BaseException | None = None
                    ) -> InputError:
    detail = f": {_words(exc)}" if exc is not None else ""
    return InputError(f"{where}: the connection to the scheduler was lost while {_ranks(mapped)} "
                      f"{'was' if len(mapped) == 1 else 'were'} mapped (the scheduler stopped, or "
                      f"the network failed{detail}); check that it runs and run again")


def _words(exc: BaseException) -> str:
    """An exception in a few words, on one line."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _quietly(close: Callable[[], object]) -> None:
    """Runs a close that may fail on a cluster already gone (its failure is no news)."""
    with contextlib.suppress(Exception):
        close()


@contextlib.contextmanager
def _dask_logs_held() -> Iterator[None]:
    """Holds back Dask's log records inside (its client logs a traceback for a lost scheduler,
    its local cluster one per lost worker): the error raised says what happened, in one line.
    Every ``distributed`` logger is switched off, not just the parent: Dask's configuration
    gives some of them levels of their own."""
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
               if name == "distributed" or name.startswith("distributed.")]
    loggers.append(logging.getLogger("distributed"))
    before = {logger: logger.disabled for logger in loggers}
    for logger in before:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in before.items():
            logger.disabled = disabled
