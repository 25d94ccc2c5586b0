"""Golden (expected-output) files for the SQL diff tests.

A diff test renders a query's (aggregated) output as CSV and compares it with
`tests/sql/golden/<name>.csv`. Rewrite the goldens after an intended change with
``TT_UPDATE_GOLDENS=1 pytest tests/sql`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

GOLDEN = Path(__file__).resolve().parents[1] / "sql" / "golden"
#: The rank identity columns the samples (TP0, TP1) leave empty or '': left out of the goldens
#: (``rank`` and ``tp`` stay; the identity has its own test, tests/sql/test_rank_identity.py).
UNSET_IDENTITY = ["dp", "pp", "cp", "dcp", "ep", "stage"]


def as_csv(frame: pd.DataFrame) -> str:
    """Stable CSV text: floats rounded to 6 digits, no index."""
    return frame.round(6).to_csv(index=False, float_format="%.6g", lineterminator="\n")


def check_golden(name: str, frame: pd.DataFrame) -> None:
    """Asserts that ``frame`` equals the golden ``name``.csv (or rewrites it when
    TT_UPDATE_GOLDENS is set)."""
    path = GOLDEN / f"{name}.csv"
    text = as_csv(frame)
    if os.environ.get("TT_UPDATE_GOLDENS") or not path.exists():
        if not os.environ.get("TT_UPDATE_GOLDENS"):
            raise AssertionError(f"no golden {path}; run with TT_UPDATE_GOLDENS=1 to create it")
        path.write_text(text, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (f"{name}: output differs from {path} (rewrite with "
                              f"TT_UPDATE_GOLDENS=1 if intended)\n--- got\n{text}")
