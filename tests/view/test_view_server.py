"""The view server (in-process and as `tokentrace view`) and what it serves: the UI and the
trace on 127.0.0.1 only, refusals, a clean end on SIGINT, and the trace prepared from a folder
(merged, annotated) or a plain merged file (an annotated copy, the file untouched)."""

from __future__ import annotations

import shutil
import subprocess
import warnings
from http.client import HTTPConnection

import orjson
import pytest

from tokentrace.annotate import annotation_record
from tokentrace.errors import InputError, TokentraceWarning
from tokentrace.view import TraceServer, prepare_trace
from tokentrace.view.server import CONTENT_SECURITY_POLICY


def _with(token: str, path: str) -> str:
    """``path`` with the server's token in its query."""
    return f"{path}{'&' if '?' in path else '?'}token={token}"


def _get(port: int, path: str, host: str | None = None):
    connection = HTTPConnection("127.0.0.1", port, timeout=30)
    connection.putrequest("GET", path, skip_host=host is not None)
    if host is not None:
        connection.putheader("Host", host)
    connection.endheaders()
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), body


def test_serves_the_ui_and_the_trace(annotated_sample):
    lines = []
    with TraceServer(annotated_sample, 0, log=lines.append).start() as server:
        def get(path, host=None):
            return _get(server.port, _with(server.token, path), host)

        status, headers, body = get("/")
        assert status == 200 and b"<title>Perfetto UI</title>" in body
        assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        status, headers, body = get("/localtrace")
        assert status == 200 and body == annotated_sample.read_bytes()
        assert headers["Cache-Control"] == "no-store"
        assert get("/vizviewer_info")[2] == b"{}"
        info = orjson.loads(get("/file_info")[2])
        assert info["files"] and info["functions"]  # the merged file's kept file_info
        wasm = next(server.ui.glob("v*/trace_processor.wasm")).relative_to(server.ui)
        status, headers, _ = get(f"/{wasm}")
        assert status == 200 and headers["Content-type"] == "application/wasm"
        assert get("/../../../etc/passwd")[0] == 404
        assert get("/v52.0-6b9586def/assets/")[0] == 404  # no listings
        assert get("/", host=f"rebound.example:{server.port}")[0] == 403
        assert server.url == f"http://127.0.0.1:{server.port}/?token={server.token}"
    assert [(r.method, r.status) for r in server.requests][:3] == [("GET", 200)] * 3
    assert lines[1] == "127.0.0.1 GET /localtrace?token=[hidden] 200"


def test_a_taken_port_is_one_error(annotated_sample):
    with TraceServer(annotated_sample, 0) as first:
        with pytest.raises(InputError, match=f"port {first.port} on 127.0.0.1 is in use"):
            TraceServer(annotated_sample, first.port)


def test_view_command_serves_and_ends_on_sigint(annotated_sample, view_process):
    server = view_process(annotated_sample)
    assert f"serving {annotated_sample}" in server.banner
    assert _get(server.port, _with(server.token, "/"))[0] == 200
    assert _get(server.port, _with(server.token, "/localtrace"))[0] == 200
    assert _get(server.port, "/file_info")[0] == 403  # another user, without the printed URL
    status, out = server.interrupt()
    assert status == 0 and out.strip().splitlines()[-1] == "stopped"
    assert server.requests() == ["127.0.0.1 GET /?token=[hidden] 200",
                                 "127.0.0.1 GET /localtrace?token=[hidden] 200",
                                 "127.0.0.1 GET /file_info 403"]
    assert server.token not in server.log.read_text()  # the log can be shared; the URL not


def test_view_help_says_how_to_open_it():
    from typer.testing import CliRunner

    from tokentrace.cli import app

    result = CliRunner().invoke(app, ["view", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "?token=" in text and "403" in text and "ssh -L" in text


@pytest.mark.parametrize("case", ["missing", "port_taken"])
def test_view_command_bad_input_is_one_error_line(case, annotated_sample, tmp_path, view_command):
    holder = TraceServer(annotated_sample, 0) if case == "port_taken" else None
    target = tmp_path / "nowhere.json" if case == "missing" else annotated_sample
    port = holder.port if holder is not None else 0
    try:
        done = subprocess.run([*view_command, "--no-browser", "--port", str(port), str(target)],
                              capture_output=True, text=True, timeout=120)
    finally:
        if holder is not None:
            holder.close()
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1 and len(errors) == 1, done.stderr
    assert ("no such file or folder" if case == "missing" else "is in use") in errors[0]


def test_prepare_a_plain_merged_file_annotates_a_copy(merged_t39, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENTRACE_CACHE_DIR", str(tmp_path / "cache"))
    plain, _ = merged_t39
    mine = tmp_path / "mine.merged.json"
    shutil.copy(plain, mine)
    before = mine.read_bytes()
    served = prepare_trace(mine)
    assert served.annotated and not served.merged and served.path.parent == tmp_path / "cache" / "annotated"
    assert mine.read_bytes() == before and annotation_record(served.path)["slices"] == 975
    stamp = served.path.stat().st_mtime_ns
    assert prepare_trace(mine).path == served.path and served.path.stat().st_mtime_ns == stamp
    assert prepare_trace(served.path).path == served.path  # annotated already: as it is


def _snapshot(folder) -> dict:
    """Every path under ``folder`` (itself included) with its mtime, size and bytes' digest."""
    import hashlib

    found = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        found[str(path.relative_to(folder))] = (info.st_mtime_ns, info.st_size, info.st_mode, digest)
    return found


def test_prepare_a_folder_merges_and_annotates_in_the_user_cache_only(sample_t39, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENTRACE_CACHE_DIR", str(tmp_path / "cache"))
    mine = tmp_path / "cache" / "merged" / "0123456789abcdef"  # a user's folder there stays
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("keep me")
    before = _snapshot(sample_t39)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        served = prepare_trace(sample_t39)
    assert served.merged and served.annotated and served.path.is_relative_to(tmp_path / "cache" / "merged")
    assert annotation_record(served.path)["flows"] == 8
    assert _snapshot(sample_t39) == before  # view never writes into the profile folder
    assert (mine / "notes.txt").read_text() == "keep me"


def test_prepare_a_raw_trace_serves_it_with_a_warning(sample_t39):
    raw = sample_t39 / "sample-TP0.proton.chrome_trace.gz"
    with pytest.warns(TokentraceWarning, match="not a merged trace"):
        served = prepare_trace(raw)
    assert served.path == raw and not served.annotated
