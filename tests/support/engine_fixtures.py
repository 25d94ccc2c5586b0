"""Real sample traces loaded once per test session through the embedded engine."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tokentrace.catalog import open_trace
from tokentrace.errors import TokentraceWarning


@pytest.fixture(scope="session")
def loaded_traces():
    """{path: Engine} for every sample trace, opened lazily and closed at the end."""
    engines = {}

    def get(path: Path):
        if path not in engines:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TokentraceWarning)
                engines[path] = open_trace(path)
        return engines[path]

    yield get
    for engine in engines.values():
        engine.close()
