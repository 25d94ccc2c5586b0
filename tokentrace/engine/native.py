"""The native backend: a ``trace_processor_shell`` binary we start as a local HTTP server.

The binary comes from ``--shell``, ``$TOKENTRACE_TP_SHELL`` or ``PATH``; it is never downloaded
(the ``perfetto`` package would fetch one when given no ``bin_path``; offline clusters cannot).
Use it for traces past the 4 GiB WebAssembly memory ceiling.

We start it ourselves (``-D --http-port PORT``, as the ``perfetto`` package does) and then talk
to it exactly like the remote backend, through our RPC client over ``POST /rpc``: the package's
``TraceProcessor`` only hands out results through its private backend or as Python rows.
Packages with a ``root`` are read by the shell itself (``--add-sql-package ROOT@NAME``), the
others are registered over RPC.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tokentrace.engine.base import Engine
from tokentrace.engine.packages import SqlPackage
from tokentrace.engine.remote import HttpRpcTransport, load_and_register
from tokentrace.engine.rpc import RpcClient
from tokentrace.errors import EngineError
from tokentrace.runtime.processes import kill_group

SHELL_ENV = "TOKENTRACE_TP_SHELL"
SHELL_NAME = "trace_processor_shell"
HOW_TO_GET = (f"pass --shell PATH or set {SHELL_ENV}; prebuilt binaries: "
              "https://perfetto.dev/docs/analysis/trace-processor (Linux: "
              "`curl -LO https://get.perfetto.dev/trace_processor && chmod +x trace_processor`), "
              "or keep the default --engine embedded")
LOCALHOST = "127.0.0.1"
START_TIMEOUT_S = 30.0  # the perfetto package's default load_timeout
POLL_S = 0.05  # a ready shell answers within ~0.1 s; polling every second would cost that


def find_shell(shell_path: str | os.PathLike | None = None) -> Path:
    """The binary to run: the argument, then ``$TOKENTRACE_TP_SHELL``, then PATH.

    Raises:
        EngineError: none found, or the named file is not an executable.
    """
    named = shell_path or os.environ.get(SHELL_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise EngineError(f"{path}: not an executable trace_processor_shell; {HOW_TO_GET}")
        return path
    found = shutil.which(SHELL_NAME) or shutil.which("trace_processor")
    if not found:
        raise EngineError(f"no {SHELL_NAME} found (--shell, ${SHELL_ENV}, PATH); {HOW_TO_GET}")
    return Path(found)


def start_native(trace: Path, shell_path: str | os.PathLike | None = None,
                 packages: Sequence[SqlPackage] = ()) -> Engine:
    """Starts the shell, loads ``trace`` into it, registers ``packages``.

    Raises:
        EngineError: no usable binary, it does not start, or it fails on the trace or a package.
    """
    shell = find_shell(shell_path)
    transport = ShellTransport(shell, [p for p in packages if p.root is not None])
    client = RpcClient(transport)
    engine = Engine(client, "native", f"shell {shell}", trace)
    try:
        load_and_register(engine, client, trace, [p for p in packages if p.root is None],
                          str(shell))
    except EngineError as exc:
        died = transport.exit_detail()  # before close(), which kills it
        engine.close()
        if died:
            raise EngineError(f"{exc}; the shell {died}") from None
        raise
    except BaseException:
        engine.close()
        raise
    return engine


def _free_port() -> int:
    # The same trick as the perfetto package: the OS picks a free port; the shell binds it
    # right after (a race with another process is possible and then reported as not starting).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOCALHOST, 0))
        return probe.getsockname()[1]


class ShellTransport(HttpRpcTransport):
    """:class:`HttpRpcTransport` to a ``trace_processor_shell`` it starts and, on close, kills.

    Args:
        shell: the binary.
        packages: SQL packages the shell reads from their ``root`` at startup.

    Raises:
        EngineError: the shell cannot be run, exits, or does not serve within 30 s.
    """

    def __init__(self, shell: Path, packages: Sequence[SqlPackage] = ()):
        self.shell = shell
        port = _free_port()
        command = [str(shell), "-D", "--http-port", str(port), "--no-ftrace-raw"]
        for package in packages:
            command += ["--add-sql-package", f"{package.root}@{package.name}"]
        # A file, not a pipe: a pipe nobody reads would block a chatty shell once full.
        self._output = tempfile.TemporaryFile()
        try:
            # Its own session, so close() can kill a wrapper script and the binary it runs.
            self.process: subprocess.Popen | None = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=self._output,
                stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            self._output.close()
            raise EngineError(f"{shell} could not be run ({exc.strerror or exc}); "
                              f"{HOW_TO_GET}") from None
        try:  # from here a signal or an error must not leave the shell running
            super().__init__(LOCALHOST, port)
            self._wait_until_serving(port)
        except BaseException:
            self.close()
            raise

    def _wait_until_serving(self, port: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.process.poll() is None:
            try:
                socket.create_connection((LOCALHOST, port), timeout=1.0).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise EngineError(f"{self.shell} did not serve on port {port} within "
                                      f"{START_TIMEOUT_S:g} s{self._said()}") from None
                time.sleep(POLL_S)
        raise EngineError(f"{self.shell} did not start: it {self.exit_detail()}; is it a "
                          f"trace_processor_shell? {HOW_TO_GET}")

    def exit_detail(self) -> str:
        """``'exited with status N (its last output)'`` once the shell has ended, else ''."""
        if self.process is None or self.process.poll() is None:
            return ""
        return f"exited with status {self.process.returncode}{self._said()}"

    def _said(self) -> str:
        """The tail of the shell's output, as ``' (line | line)'``, or ''."""
        try:
            self._output.seek(0, os.SEEK_END)
            self._output.seek(max(0, self._output.tell() - 4096))
            text = self._output.read().decode("utf-8", "replace")
        except (OSError, ValueError):  # already closed
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return f" ({' | '.join(lines[-3:])[:600]})" if lines else ""

    def close(self) -> None:
        """Closes the connection and kills the shell (its trace lives only in its memory, so
        there is nothing to let it flush). Idempotent."""
        super().close()
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                kill_group(process)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._output.close()
