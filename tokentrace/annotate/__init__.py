"""What tokentrace concluded, drawn into the merged trace: per rank a "GPU idle (tokentrace)"
track in the rank's GPU process, one slice per GPU gap named by its cause (``gap_causes``), and a
flow from the cause's host slice to each stall (docs/view.md).

:mod:`.api` annotates a file, :mod:`.gaps` turns ``gap_causes`` rows into annotations,
:mod:`.events` writes them as trace events, :mod:`.layout` and :mod:`.splice` find the end of
the events and rewrite the file around it, :mod:`.links` builds Perfetto UI links to a gap.

The names below are imported on first use: the command line reads the constants for its
``--help`` without loading pandas and the engine.
"""

from __future__ import annotations

import importlib

_HOMES = {
    "MARKER": "api", "AnnotationResult": "api",
    "annotate_file": "api", "annotate_with_gaps": "api", "annotation_record": "api",
    "remove_annotations": "api",
    "CATEGORY": "events", "FLOW_NAME": "events", "TRACK_NAME": "events",
    "Gap": "gaps", "HostSlice": "gaps", "annotation_support": "gaps", "gaps_from_rows": "gaps",
    "MergedTail": "layout", "read_tail": "layout",
    "DEFAULT_HOST": "links", "DEFAULT_PORT": "links", "gap_url": "links", "range_url": "links",
    "ui_base_url": "links",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tokentrace.annotate' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tokentrace.annotate.{home}"), name)
    globals()[name] = value
    return value
