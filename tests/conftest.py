"""Shared fixtures: the committed sample traces and, when present, the large shared traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.paths import DATA, SHARED_TRACES

# Session fixtures shared by several test modules, registered once (an import per module would
# register, and run, a session fixture once per importing module).
pytest_plugins = ["support.analysis_fixtures", "support.merged_fixtures", "support.engine_fixtures",
                  "support.sql_fixtures"]


@pytest.fixture(scope="session")
def sample_t39() -> Path:
    """Two ranks, triton 3.9 Proton (anchors, scopes, flows), 40 steps."""
    return DATA / "sample_t39_tp2"


@pytest.fixture(scope="session")
def sample_t36() -> Path:
    """Two ranks, triton 3.6 Proton (kernels only, no anchor), 40 steps."""
    return DATA / "sample_t36_tp2"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The large real traces next to the clone (CI has them); skips when absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"large real traces not present at {SHARED_TRACES} (CI has ../shared)")
    return SHARED_TRACES
