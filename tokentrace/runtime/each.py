"""Calls run one per rank (or per rank and engine): in this process, or in a pool of forked
workers (:func:`~tokentrace.runtime.processes.pool`), with the errors of a run in order.

:func:`run_each` is where the merge and the queries of many ranks use a pool: one call site,
one rule for errors (the lowest failing call's error, not the first to fail, which would depend
on timing) and progress (told of each call that finished).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tokentrace.runtime.processes import pool


def run_each(calls: Sequence[tuple], jobs: int, broken: str,
             done: Callable[[int], None] | None = None) -> list:
    """Each ``(function, *args)`` of ``calls`` run: in this process, in turn, when ``jobs`` is 1 or
    there is one call; else in a pool of ``min(jobs, len(calls))`` workers (everything a call
    takes, returns and raises must pickle). Returns the results in the order of ``calls``.

    Args:
        calls: the calls, in order.
        jobs: processes at most.
        broken: what to say when a worker died (killed, out of memory).
        done: told the index of each call that finished without error, as it finishes.

    Raises:
        The lowest failing call's error; InputError saying ``broken`` when a worker died.
    """
    calls = list(calls)
    if jobs <= 1 or len(calls) <= 1:
        results = []
        for index, (function, *args) in enumerate(calls):
            results.append(function(*args))
            if done is not None:
                done(index)
        return results
    with pool(min(jobs, len(calls)), broken) as workers:
        futures = workers.submit(calls)
        index_of = {id(future): index for index, future in enumerate(futures)}
        for future in workers.as_completed(futures):
            if future.exception() is not None:
                break
            if done is not None:
                done(index_of[id(future)])
        # in call order: of the calls that fail, the first one's error is raised
        return [future.result() for future in futures]
