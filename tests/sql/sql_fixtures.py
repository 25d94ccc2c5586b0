"""A merged sample (sample_t39_tp2, both ranks in one file) loaded once for the SQL tests."""

from __future__ import annotations

import warnings

import pytest

from tokentrace.engine import open_trace
from tokentrace.errors import TokentraceWarning


@pytest.fixture(scope="session")
def merged_t39(sample_t39, tmp_path_factory):
    """(path of the combined merged trace, open Engine on it)."""
    from tokentrace.merge import merge

    out = tmp_path_factory.mktemp("merged_t39")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        result = merge([sample_t39], out, combine=True)
        engine = open_trace(result.combined)
    yield result.combined, engine
    engine.close()


@pytest.fixture(scope="session")
def raw_proton_t39(sample_t39):
    """Open Engine on a raw (unmerged) triton 3.9 Proton trace of rank TP1."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        engine = open_trace(sample_t39 / "sample-TP1.proton.chrome_trace.gz")
    yield engine
    engine.close()
