"""The per-rank map on a Dask cluster (optional extra ``tokentrace[dask]``).

``dask`` starts a local cluster (one worker process per core, one thread each: the embedded
engine holds the GIL while it parses); ``dask://HOST:PORT`` connects to a running scheduler, whose
workers must see the per-rank traces at the same paths (shared storage). Each rank is one task
(:func:`~tokentrace.fleet.runner.map_rank`); results come back in rank order, so the tables are
the local executor's, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tokentrace.errors import InputError


def map_on_dask(traces: Sequence, requests: Sequence, engine, executor: str,
                progress: Callable[[str], None] | None = None) -> list[dict]:
    """Maps every rank on the cluster ``executor`` names; see the module docstring.

    Raises:
        InputError: dask/distributed not installed, or a bad executor address.
    """
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("--executor dask needs dask and distributed: pip install "
                         "'tokentrace[dask]'") from None
    from tokentrace.fleet.runner import map_rank

    if executor == "dask":
        cluster = LocalCluster(threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    elif executor.startswith("dask://"):
        cluster, client = None, Client(executor.removeprefix("dask://"))
    else:
        raise InputError(f"unknown executor {executor!r}: use local, dask or dask://HOST:PORT")
    try:
        futures = [client.submit(map_rank, t, list(requests), engine, key=f"tokentrace-map-{t.rank}-{i}",
                                 pure=False) for i, t in enumerate(traces)]
        rank_of = {f.key: t.rank for f, t in zip(futures, traces)}
        for future in as_completed(futures):
            if progress:
                progress(rank_of[future.key])
        return [f.result() for f in futures]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
