"""Where the test data lives: the committed samples and, beside the clone, the shared traces."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
SHARED_TRACES = REPO.parent / "shared" / "traces"
