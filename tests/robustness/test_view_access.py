"""`tokentrace view` on a shared machine (issue 31): 127.0.0.1 is open to every local user, so
every route (the UI, the trace, ``/file_info`` with the host's source paths) needs the server's
random token, in the URL it prints or in the cookie that URL sets. Before: anyone who connected
read the trace."""

from __future__ import annotations

from http.client import HTTPConnection

import pytest

from tokentrace.view import TraceServer

ROUTES = ["/", "/index.html", "/service_worker.js", "/localtrace", "/file_info", "/vizviewer_info"]


def _get(port: int, path: str, headers: dict | None = None):
    connection = HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path, headers=headers or {})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, response.headers, body


@pytest.fixture
def server(merged_t39):
    with TraceServer(merged_t39[0], 0).start() as started:
        yield started


@pytest.mark.parametrize("path", ROUTES)
def test_a_request_without_the_token_is_refused(server, path):
    status, _, body = _get(server.port, path)
    assert status == 403 and b"token" in body
    assert b"merged" not in body and b".py" not in body  # nothing of the trace or its sources


@pytest.mark.parametrize("how", ["query", "cookie", "empty", "prefix"])
def test_a_wrong_token_is_refused(server, how):
    wrong = "A" * len(getattr(server, "token", "x" * 43))
    name = f"tokentrace-view-{server.port}"
    path, headers = {"query": (f"/localtrace?token={wrong}", {}),
                     "cookie": ("/localtrace", {"Cookie": f"{name}={wrong}"}),
                     "empty": ("/localtrace?token=", {"Cookie": f"{name}="}),
                     "prefix": (f"/file_info?token={getattr(server, 'token', 'x')[:10]}", {})}[how]
    assert _get(server.port, path, headers)[0] == 403


def test_the_printed_url_opens_and_its_cookie_lets_the_ui_in(server, merged_t39):
    assert "?token=" in server.url and server.url.startswith(f"http://127.0.0.1:{server.port}/")
    status, headers, body = _get(server.port, server.url.split(str(server.port), 1)[1])
    assert status == 200 and b"<title>Perfetto UI</title>" in body
    cookie = headers["Set-Cookie"]
    name_value = cookie.split(";", 1)[0]
    assert name_value == f"tokentrace-view-{server.port}={server.token}"
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/" in cookie
    # the UI's own fetches: no token in their URLs, the cookie (among another app's) instead
    jar = {"Cookie": f"_xsrf=other-app; {name_value}"}
    status, headers, body = _get(server.port, "/localtrace", jar)
    assert status == 200 and body == merged_t39[0].read_bytes() and "Set-Cookie" not in headers
    assert _get(server.port, "/file_info", jar)[0] == 200
    assert _get(server.port, "/vizviewer_info", jar)[2] == b"{}"


def test_each_server_has_its_own_unguessable_token(merged_t39):
    with TraceServer(merged_t39[0], 0) as one, TraceServer(merged_t39[0], 0) as two:
        assert one.token != two.token and len(one.token) >= 43  # 32 random bytes
        # a cookie set by one server (same host, another port) does not open the other
        other = {"Cookie": f"tokentrace-view-{one.port}={one.token}"}
        two.start()
        assert _get(two.port, "/localtrace", other)[0] == 403
