"""The headers every answer of the view server carries, and raw answers sent without a handler
(a refusal from the accepting thread, an idle connection's timeout).

The Content-Security-Policy keeps the UI on this machine: it may load and connect to this server
only (and to a local trace_processor_shell on 9001, the UI's accelerator probe); its one outside
fetch, a script from storage.cloud.google.com (the "is internal user" check), is refused by the
browser. ``frame-ancestors 'none'`` and ``X-Frame-Options: DENY`` (for browsers without CSP 2):
no page, of any origin, may show the UI in a frame (clickjacking: a page that frames the UI,
cookie and all, under a decoy). The UI itself frames nothing.
"""

from __future__ import annotations

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; "
    "script-src 'self' 'unsafe-inline' 'unsafe-eval' 'wasm-unsafe-eval' blob:; "
    "worker-src 'self' blob:; "
    "connect-src 'self' blob: data: http://127.0.0.1:9001; "
    "img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; font-src 'self' data:; "
    "frame-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'"
)
#: (name, value) of the headers on every answer.
SECURITY_HEADERS = (
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
)


def raw_answer(status: int, reason: str, text: str) -> bytes:
    """A whole HTTP/1.0 answer (plain text, ``Connection: close``) with the security headers."""
    body = f"{text}\n".encode()
    head = [f"HTTP/1.0 {status} {reason}", "Content-Type: text/plain; charset=utf-8",
            "Connection: close", f"Content-Length: {len(body)}"]
    head += [f"{name}: {value}" for name, value in SECURITY_HEADERS]
    return "\r\n".join(head).encode() + b"\r\n\r\n" + body
