"""A stand-in for ``trace_processor_shell -D``: the embedded trace processor behind ``POST /rpc``.

No native binary exists on the test machines, so the native and remote backends are tested
against this relay: it takes the shell's flags (``-D --http-port N --no-ftrace-raw
--add-sql-package ROOT@NAME``), forwards each ``/rpc`` body to a WebAssembly trace processor and
answers with its reply stream unchanged, which is exactly the real server's contract.

Usage: ``python fake_shell.py -D --http-port 9001 [--add-sql-package DIR@NAME ...]``.
"""

from __future__ import annotations

import argparse
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tokentrace.engine.embedded import WasmTransport
from tokentrace.engine.rpc import RpcClient


def _modules(root: Path, name: str) -> dict[str, str]:
    """What the real shell reads for ``--add-sql-package ROOT@NAME``: every ``.sql`` below
    ``root`` as ``NAME.<relative.dotted.path>``."""
    return {".".join((name, *path.relative_to(root).with_suffix("").parts)):
            path.read_text(encoding="utf-8") for path in sorted(root.rglob("*.sql"))}


def serve(port: int, packages: list[str]) -> None:
    """Starts the trace processor, registers the packages, serves ``/rpc`` until killed."""
    transport = WasmTransport()
    client = RpcClient(transport)
    for spec in packages:
        root, _, name = spec.rpartition("@")
        if not Path(root).is_dir():  # the real shell refuses to start too
            sys.exit(f"--add-sql-package {spec}: no such directory")
        error = client.register_sql_package(name, _modules(Path(root), name))
        if error:
            sys.exit(f"--add-sql-package {spec}: {error}")
    lock = threading.Lock()  # one trace processor: requests take turns

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real server

        def do_POST(self):  # noqa: N802 (the name http.server calls)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path != "/rpc":
                self.send_error(404)
                return
            with lock:
                transport.send(body)
                reply = transport.drain()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):  # quiet, like the real server
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-D", "--httpd", action="store_true")
    parser.add_argument("--http-port", type=int, default=9001)
    parser.add_argument("--no-ftrace-raw", action="store_true")
    parser.add_argument("--add-sql-package", action="append", default=[])
    args = parser.parse_args(argv)
    serve(args.http_port, args.add_sql_package)


if __name__ == "__main__":
    main()
