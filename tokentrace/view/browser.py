"""Opening the UI in a browser, where the machine has one to show it.

On Linux without a display (``DISPLAY``/``WAYLAND_DISPLAY``) nothing is opened unless
``$BROWSER`` names one: Python's :mod:`webbrowser` would otherwise start a console browser
(lynx, w3m) in the terminal that runs the server, and wait for it.
"""

from __future__ import annotations

import os
import sys
import webbrowser


def can_open_browser() -> bool:
    """True where a graphical browser can be expected (or ``$BROWSER`` is set)."""
    if os.environ.get("BROWSER"):
        return True
    if sys.platform.startswith("linux") or sys.platform.startswith("freebsd"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def open_browser(url: str) -> bool:
    """Opens ``url`` in a new browser tab; False when there is no browser to open."""
    if not can_open_browser():
        return False
    try:
        return bool(webbrowser.open(url, new=2))
    except webbrowser.Error:
        return False
