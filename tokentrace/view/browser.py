"""Opening the UI in a browser, where the machine has one to show it.

On Linux without a display (``DISPLAY``/``WAYLAND_DISPLAY``) nothing is opened unless
``$BROWSER`` names one: Python's :mod:`webbrowser` would otherwise start a console browser
(lynx, w3m) in the terminal that runs the server, and wait for it.

The URL's token is the one way into the server, and a process's arguments are readable by every
local user (``/proc/PID/cmdline``, ``ps -ef``): the browser is never started with the tokened URL
as an argument. It gets a private redirect page instead (mode 0600, as Jupyter does), which
sends it on to the URL; the page is removed when the server stops.
"""

from __future__ import annotations

import contextlib
import html
import os
import sys
import tempfile
import webbrowser
from collections.abc import Iterator
from pathlib import Path


def can_open_browser() -> bool:
    """True where a graphical browser can be expected (or ``$BROWSER`` is set)."""
    if os.environ.get("BROWSER"):
        return True
    if sys.platform.startswith("linux") or sys.platform.startswith("freebsd"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


@contextlib.contextmanager
def open_browser(url: str) -> Iterator[bool]:
    """Opens ``url`` in a new browser tab through a private redirect page, kept for the
    block; yields False when there is no browser to open."""
    if not can_open_browser():
        yield False
        return
    page = redirect_page(url)
    try:
        try:
            opened = bool(webbrowser.open(page.as_uri(), new=2))
        except webbrowser.Error:
            opened = False
        yield opened
    finally:
        page.unlink(missing_ok=True)


def redirect_page(url: str) -> Path:
    """A new page, readable by this user only, that sends a browser on to ``url``."""
    descriptor, name = tempfile.mkstemp(prefix="tokentrace-view-", suffix=".html")  # 0600
    target = html.escape(url, quote=True)
    with os.fdopen(descriptor, "w", encoding="utf-8") as page:
        page.write('<!DOCTYPE html>\n<meta charset="utf-8">\n'
                   f'<meta http-equiv="refresh" content="0;url={target}">\n'
                   "<title>tokentrace view</title>\n"
                   f'<p>Opening the trace: <a href="{target}">continue</a></p>\n')
    return Path(name)
