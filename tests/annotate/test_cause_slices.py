"""A stall's cause slice is picked among the candidates of its names that can overlap it (the
annotations' flow starts there), and it is the slice the rule names over every candidate: on the
cause thread, overlapping the gap, the C call before the frame, the launching thread first among
namesakes, the longest overlap, the earliest start, the lowest id. Checked against that rule
applied to every candidate, on random candidates with many ties (seeded)."""

from __future__ import annotations

import random

from tokentrace.annotate.gaps import Gap, _Candidates


def _rule(gap: Gap, candidates: list[dict]) -> dict | None:
    """The rule over every candidate, in id order (the first of equal keys wins)."""
    lo, hi = gap.ts_ns, gap.ts_ns + gap.dur_ns
    call, frame = gap.args.get("cause_call"), gap.args.get("cause_frame")
    best, best_key = None, None
    for c in candidates:
        if c["rank"] != gap.rank or c["thread"] != gap.args["cause_thread"]:
            continue
        if c["name"] not in (call, frame) or not (c["ts"] < hi and c["ts"] + c["dur"] > lo):
            continue
        key = (c["name"] != call, not c["is_main"], -(min(c["ts"] + c["dur"], hi) - max(c["ts"], lo)), c["ts"])
        if best_key is None or key < best_key:
            best, best_key = c, key
    return best


def test_the_pick_is_the_rules_over_every_candidate():
    chance = random.Random(47)
    names = ["time.sleep", "poll (engine.py:12)", "json.dumps", "step (engine.py:40)"]
    candidates = [
        {"rank": chance.choice(["TP0", "TP1"]), "thread": chance.choice(["MainThread", "worker"]),
         "is_main": chance.random() < 0.5, "pid": 1, "tid": 2, "id": index,
         "ts": chance.randrange(0, 400, 5), "dur": chance.choice([1, 5, 10, 40, 120]), "name": chance.choice(names)}
        for index in range(3000)
    ]
    picks = _Candidates(candidates)
    found = 0
    for _ in range(2000):
        args = {"cause_thread": chance.choice(["MainThread", "worker", "other"]),
                "cause_frame": chance.choice(names + [None])}
        if chance.random() < 0.7:
            args["cause_call"] = chance.choice(names)
        gap = Gap(chance.choice(["TP0", "TP1"]), 9, chance.randrange(0, 450), chance.randrange(1, 60), "g", True, args)
        expected = _rule(gap, candidates)
        assert picks.pick(gap) is expected, (gap, expected)
        found += expected is not None
    assert found > 1000  # most gaps have a slice, ties among them
