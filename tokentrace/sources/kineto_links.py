"""Launch arrows of a torch-profiler trace from correlation ids, for every Kineto generation.

Every GPU activity's ``args.correlation`` names the runtime or driver call (CUDA or HIP) that
enqueued it; a graph launch's id is carried by every kernel of its replay. Kineto's flows only
draw that, and not in every generation: ``ac2g`` today, ``async_cpu_to_gpu`` (2023),
``async_gpu`` (2022), none in sampled traces, no start for a ROCm ``hipGraphLaunch``
(tests/data/peers). So the reader drops the input's launch flows and draws one arrow
per activity from the call with its id (:func:`pair_by_correlation`): kept as pairs of event
indices, which the merge writes as v2 flows on the two slices without making flow events of
them (:func:`with_arrows` makes them where it needs them); the capitalised categories of
2021-2022 get today's names first (:func:`rename_categories`).
"""

from __future__ import annotations

from collections import defaultdict

from tokentrace.sources.proton import ProtonEvent, ProtonTrace

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
SYNC_CATEGORY = "cuda_sync"
# The launch flows of each Kineto generation: 2024+, 2023 (``async_cpu_to_gpu``), 2022 (``async_gpu``).
LAUNCH_FLOW_CATEGORIES = frozenset({"ac2g", "async_cpu_to_gpu", "async_gpu"})
FLOW_CATEGORY = "ac2g"  # the category of the arrows written
CALL_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})  # launch calls (CUDA and HIP alike)
# What an arrow from a call with the same correlation id points at.
LINKED_CATEGORIES = GPU_CATEGORIES | {SYNC_CATEGORY}
# The graph launches of the CUDA runtime and driver and of HIP: every kernel of the replay
# carries the launch's correlation id.
GRAPH_LAUNCH_CALLS = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
# Kineto's category names before 2023 (any case), by today's name.
CATEGORY_NAMES = {
    "kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset", "runtime": "cuda_runtime",
    "driver": "cuda_driver", "operator": "cpu_op", "python": "python_function",
    "user_annotation": "user_annotation", "user annotations": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation", "cuda_runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver", "cpu_op": "cpu_op", "gpu_memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset", "python_function": "python_function", "cuda_sync": "cuda_sync",
}
_FLOW_START = {"ph": "s", "cat": FLOW_CATEGORY, "name": FLOW_CATEGORY}
_FLOW_FINISH = {"ph": "f", "cat": FLOW_CATEGORY, "name": FLOW_CATEGORY, "bp": "e"}


def correlation(raw: dict):
    """The ``args.correlation`` of a raw event (None without)."""
    args = raw.get("args")
    return args.get("correlation") if isinstance(args, dict) else None


def rename_categories(events: list[dict]) -> None:
    """Gives the events of older Kineto generations today's category names (in place)."""
    names = CATEGORY_NAMES
    renames = {}
    for cat in {e.get("cat") for e in events}:
        if type(cat) is str and cat not in names:
            new = names.get(cat.lower())
            if new is not None:
                renames[cat] = new
        elif type(cat) is str and names[cat] != cat:
            renames[cat] = names[cat]
    if renames:
        for event in events:
            new = renames.get(event.get("cat"))
            if new is not None:
                event["cat"] = new


def pair_by_correlation(trace: ProtonTrace, calls: dict, activities: list[tuple[int, object]]) -> list[tuple[int, int]]:
    """The launch arrows: ``(call index, activity index)`` for every GPU activity whose
    correlation id is a launch call's, in activity order (the arrow's pair number is its place
    in the list); counted in ``trace.n_flows``, the activities without such a call in
    ``trace.unpaired_flows``.

    Args:
        calls: correlation id -> index in the trace's events of its launch call.
        activities: ``(index, correlation id)`` of each GPU activity and ``cuda_sync`` event.
    """
    pairs = []
    for index, correlation in activities:
        call = calls.get(correlation)
        if call is None:
            trace.unpaired_flows += 1
        else:
            pairs.append((call, index))
    trace.n_flows += len(pairs)
    return pairs


def arrow_start(call: ProtonEvent, pair: int) -> ProtonEvent:
    """The ``s`` event of arrow ``pair``: at its call's start, on its lane (it binds to the call)."""
    return ProtonEvent("s", call.lane, call.ts_ns, 0, _FLOW_START, pair)


def arrow_finish(activity: ProtonEvent, pair: int) -> ProtonEvent:
    """The ``f`` event of arrow ``pair``: at its activity's start, on its lane."""
    return ProtonEvent("f", activity.lane, activity.ts_ns, 0, _FLOW_FINISH, pair)


def with_arrows(events: list[ProtonEvent], pairs: list[tuple[int, int]]) -> list[ProtonEvent]:
    """``events`` with the arrows of ``pairs`` as flow events: each call's ``s`` events right
    after it (in pair order), each activity's ``f`` right after it."""
    if not pairs:
        return events
    starts: dict[int, list[int]] = defaultdict(list)  # call index -> its pairs
    finishes: dict[int, int] = {}  # activity index -> its pair
    for pair, (call, activity) in enumerate(pairs):
        starts[call].append(pair)
        finishes[activity] = pair
    out: list[ProtonEvent] = []
    for index, event in enumerate(events):
        out.append(event)
        found = starts.get(index)
        if found is not None:
            out += [arrow_start(event, pair) for pair in found]
            continue
        pair = finishes.get(index)
        if pair is not None:
            out.append(arrow_finish(event, pair))
    return out
