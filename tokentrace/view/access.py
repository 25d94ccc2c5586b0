"""Who may read through ``tokentrace view`` (docs/view.md): whoever holds its token.

127.0.0.1 is open to every user of the machine, so listening there is not enough on a shared
GPU box: the server makes a random token (:func:`new_token`, 256 bits) and answers only requests
that carry it, as Jupyter does. The URL it prints carries it in its query (``/?token=...``);
that first answer sets a cookie holding it (``HttpOnly``, this port's own name), so the UI's
own fetches (``/localtrace``, ``/file_info``, its scripts, its service worker), which have no
token in their URLs, carry it too. ``SameSite=Lax``: a link from the HTML report (another
origin) still sends it on a top-level navigation.

What the server prints is the user's terminal: :func:`printable` escapes control characters (a
request path can hold ``ESC ]0;...`` that retitles the window or clears the screen) and hides
the token.
"""

from __future__ import annotations

import hmac
import re
import secrets
from urllib.parse import parse_qsl, urlsplit

TOKEN_PARAM = "token"
_COOKIE_PREFIX = "tokentrace-view-"
# C0 and C1 controls and DEL: what a terminal may act on (0x9b is a one-byte CSI on some).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_TOKEN_IN_QUERY = re.compile(rf"((?:^|[?&]){TOKEN_PARAM}=)[^&#]*")
#: The longest path printed in full (a 60 kB URL is one line, not a screenful).
PRINTED_CHARS = 300


def new_token() -> str:
    """A fresh random token: 32 bytes from :mod:`secrets`, URL-safe base64."""
    return secrets.token_urlsafe(32)


class Access:
    """The token of one server and how a request proves it holds it."""

    def __init__(self, token: str, port: int) -> None:
        self.token = token
        self.cookie_name = f"{_COOKIE_PREFIX}{port}"  # per port: two servers keep their own

    def check(self, path: str, cookie_header: str | None) -> tuple[bool, bool]:
        """``(allowed, from_query)``: whether the request carries the token, and whether it came
        in the URL (the answer then sets the cookie)."""
        query = urlsplit(path).query
        for name, value in parse_qsl(query, keep_blank_values=True):
            if name == TOKEN_PARAM and self._same(value):
                return True, True
        for part in (cookie_header or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.cookie_name and self._same(value.strip().strip('"')):
                return True, False
        return False, False

    def set_cookie(self) -> str:
        """The ``Set-Cookie`` value holding the token (for this session of the browser)."""
        return f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Lax"

    def _same(self, value: str) -> bool:
        # constant time: the time of a refusal says nothing of how much of a guess was right
        return hmac.compare_digest(value.encode("utf-8", "replace"), self.token.encode())


def printable(text: str, limit: int = PRINTED_CHARS) -> str:
    """``text`` safe to print on a terminal: control characters as ``\\xNN``, a token's value
    hidden, cut to ``limit`` characters (with the length it had)."""
    text = _TOKEN_IN_QUERY.sub(r"\1[hidden]", text)
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text)} characters)"
    return text
