"""The merged sample_t39_tp2 (both ranks in one file) and a raw Proton trace, loaded once for
the SQL tests."""

from __future__ import annotations

import warnings

import pytest

from tokentrace.catalog import open_trace
from tokentrace.errors import TokentraceWarning


@pytest.fixture(scope="session")
def merged_t39(merged_sets):
    """(path of the combined merged trace of sample_t39_tp2, open Engine on it)."""
    _, path, engine = merged_sets("sample_t39_tp2")
    return path, engine


@pytest.fixture(scope="session")
def raw_proton_t39(sample_t39):
    """Open Engine on a raw (unmerged) triton 3.9 Proton trace of rank TP1."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        engine = open_trace(sample_t39 / "sample-TP1.proton.chrome_trace.gz")
    yield engine
    engine.close()
