"""Alignments given up early (:func:`~tokentrace.align.candidates.evaluate_all`): the estimate
is the one every alignment evaluated whole gives, on real traces with launches and graph
replays.

An alignment is dropped once more of its waits contradict than an acceptable one may have, or
than an acceptable one found before it. Each round of the start rule can only add
contradicting waits, so the count at that point is a floor of the final one
(:func:`~tokentrace.align.bounds.wait_bounds_within`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tokentrace.align.candidates as candidates
import tokentrace.align.estimate as estimate
from tokentrace.align.bounds import (
    Matching,
    index_kernels,
    lower_bound_call,
    match_launches,
    running_ends,
    wait_bounds,
    wait_bounds_within,
)
from tokentrace.align.estimate import estimate_from_events, prepare_kernels, replay_calls_for
from tokentrace.sources.host_calls import HostCall, read_host_events
from tokentrace.sources.proton import estimator_kernels, read_proton

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "traces"
# (folder, rank file stem): launches and graph replays (engine_mixed), launches alone (t39),
# replays alone (compile_proton_cut)
TRACES = [
    pytest.param(SHARED / "engine_mixed", "mix-DP0-TP0", id="engine_mixed",
                 marks=pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} absent (CI has it)")),
    pytest.param(REPO / "tests" / "data" / "sample_t39_tp2", "sample-TP0", id="sample_t39_tp2"),
    pytest.param(REPO / "tests" / "data" / "compile_proton_cut", None, id="compile_proton_cut"),
]
pytestmark = pytest.mark.slow


def _inputs(folder: Path, stem: str | None):
    pattern = f"{stem}.*" if stem else "*"
    viz = next(folder.glob(f"{pattern}viztracer.json*"))
    proton = next(folder.glob(f"{pattern}proton.chrome_trace*"))
    kernels = prepare_kernels(estimator_kernels(read_proton([proton])))
    return read_host_events(viz), kernels, replay_calls_for(viz, kernels)


@pytest.mark.parametrize("folder, stem", TRACES)
def test_estimate_is_the_whole_evaluation(monkeypatch, folder, stem):
    host, kernels, replays = _inputs(folder, stem)
    given_up = []
    evaluate = candidates._evaluate

    def counted(*args):
        found = evaluate(*args)
        given_up.append(found.bounds.hi is None and found.bounds.contradicting and not found.bounds.kept)
        return found

    monkeypatch.setattr(candidates, "_evaluate", counted)
    fast = estimate_from_events(host, kernels, replays=replays)
    monkeypatch.setattr(candidates, "_evaluate", lambda *args: evaluate(*args[:4]))
    whole = estimate_from_events(host, kernels, replays=replays)
    assert fast == whole
    if len(given_up) > 1:  # several alignments tried: the wrong ones are dropped early
        assert sum(given_up) >= len(given_up) // 2


def test_wait_bounds_within_limits():
    """Below the final count of contradicting waits: None; at it or above: the whole bounds."""
    host, kernels, _ = _inputs(REPO / "tests" / "data" / "sample_t39_tp2", "sample-TP0")
    checked = 0
    for shift in (-2, 0, 2):
        matching = match_launches(host.launches, kernels.triton, shift)
        lo = lower_bound_call(matching, kernels.index)[0]
        whole = wait_bounds(matching, kernels.index, host.waits, lo)
        for limit in {0, whole.contradicting - 1, whole.contradicting, whole.contradicting + 5}:
            if limit < 0:
                continue
            found = wait_bounds_within(matching, kernels.index, host.waits, lo, limit,
                                       running_ends(matching, kernels.index))
            assert found == (None if whole.contradicting > limit else whole)
            checked += 1
    assert checked >= 6


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} absent (CI has it)")
def test_combined_lower_bound_is_the_combined_matchings():
    """Each launch and replay alignment's own lower bound, combined (ties: the pair first in
    the combined order), is the lower bound of the two matchings combined."""
    host, kernels, replays = _inputs(SHARED / "engine_mixed", "mix-DP0-TP0")
    launches = [match_launches(host.launches, kernels.triton, shift)
                for shift in estimate._shifts(len(host.launches), len(kernels.triton))]
    graph = list(estimate.replay_matchings(replays, kernels.runs))
    assert len(launches) > 5 and len(graph) > 2
    for launch in launches:
        for replay in graph + [None]:
            sides = (candidates.Side.of(launch, kernels.index, True), candidates.Side.of(replay, kernels.index, False))
            assert candidates.combined_lower(*sides) == lower_bound_call(candidates.combine(launch, replay),
                                                                        kernels.index)


@pytest.mark.parametrize("launch_begin, launch_kernel, replay_begin, replay_kernel, winner", [
    (1_000, 0, 1_100, 1, "replay"),  # the larger bound
    (1_100, 0, 1_000, 1, "launch"),
    (1_050, 0, 1_050, 1, "launch"),  # the same bound: the earlier call, then the earlier kernel
    (1_050, 1, 1_050, 0, "replay"),
    (1_060, 0, 1_050, 1, "launch"),
])
def test_combined_lower_bound_ties(launch_begin, launch_kernel, replay_begin, replay_kernel, winner):
    """The larger bound; on a tie, the pair the combined matching holds first."""
    index = index_kernels([("k", 0, 10, 7), ("g", 0, 60, 7)])  # both start at 0
    launch_call = HostCall("cuda_utils.launch", launch_begin, launch_begin + 5)
    replay_call = HostCall("torch._C.replay", replay_begin, replay_begin + 60)
    launch = Matching((launch_call,), (launch_kernel,), 0)
    replay = Matching((replay_call,), (replay_kernel,), 0, (replay_kernel,))
    sides = (candidates.Side.of(launch, index, True), candidates.Side.of(replay, index, False))
    found = candidates.combined_lower(*sides)
    assert found == lower_bound_call(candidates.combine(launch, replay), index)
    assert found[1] is (launch_call if winner == "launch" else replay_call)


def test_refusal_quotes_the_first_alignment_whole(monkeypatch):
    """Kernels of the second half of the run moved 1 s later: every wait after them returns
    before "its" kernels end, no alignment is acceptable, and the refusal quotes the first
    alignment's figures, which are those of its whole evaluation."""
    folder = REPO / "tests" / "data" / "sample_t39_tp2"
    host = read_host_events(next(folder.glob("sample-TP0.viztracer.json*")))
    rows = sorted(estimator_kernels(read_proton([next(folder.glob("sample-TP0.proton.chrome_trace*"))])),
                  key=lambda row: row[1])
    half = len(rows) // 2
    moved = rows[:half] + [(row[0], row[1] + 10**9, row[2] + 10**9, *row[3:]) for row in rows[half:]]
    fast = estimate_from_events(host, prepare_kernels(moved))
    evaluate = candidates._evaluate
    monkeypatch.setattr(candidates, "_evaluate", lambda *args: evaluate(*args[:4]))
    whole = estimate_from_events(host, prepare_kernels(moved))
    assert fast.offset_ns is None and fast.reason.startswith("inconsistent evidence")
    assert fast == whole
