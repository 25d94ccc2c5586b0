"""The merged sample_t39_tp2 (the session's merge, never modified here) annotated once into this
package's own folder, and loaded."""

from __future__ import annotations

import warnings

import pytest

from tokentrace.annotate import annotate_file
from tokentrace.catalog import open_trace
from tokentrace.errors import TokentraceWarning


@pytest.fixture(scope="session")
def annotated_t39(merged_t39, tmp_path_factory):
    """(AnnotationResult of the combined sample annotated into a copy, open Engine on that copy)."""
    plain, _ = merged_t39
    target = tmp_path_factory.mktemp("annotate") / "sample.annotated.json"
    result = annotate_file(plain, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        engine = open_trace(target, warn=False)
    yield result, engine
    engine.close()
