"""Issue 48: a signal that comes as a command starts or ends is not lost.

Once a command's outputs are being put in place, the console script holds the stop signals to
the end of the process (a signal there used to be noted by CPython's C handler and then dropped
by ``os._exit``: the run exited 0). Such a signal gives its exit status and one line saying the
outputs are complete. One that comes before the command installed its handlers (imports,
argument parsing: SIGTERM's default action killed the process with no message) stops the
command as soon as they are in place. Library use (no console script) keeps its signal mask.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tokentrace.runtime.command import command

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")

def _run_ending(tmp_path, signum: int, before: bool = False) -> subprocess.CompletedProcess:
    """The console script's path: the command writes its output, and the signal comes after the
    command returned, before the process ends (``before``: before the command began)."""
    out = tmp_path / "out.txt"
    kill = f"os.kill(os.getpid(), {int(signum)})\n"
    code = (
        "import os, signal\n"
        "from tokentrace.runtime.command import command, end_process, process_ends_with_command\n"
        "from tokentrace.runtime.files import write_bytes\n"
        "process_ends_with_command()\n"
        + (kill if before else "")
        + "try:\n"
        "    with command():\n"
        f"        write_bytes({str(out)!r}, b'complete')\n"
        "except SystemExit as exc:\n"
        "    end_process(exc.code)\n"
        + ("" if before else kill)
        + "end_process(0)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("signum, status, words", [(signal.SIGINT, 130, "interrupted"),
                                                    (signal.SIGTERM, 143, "terminated by SIGTERM")])
def test_a_signal_after_the_outputs_gives_its_status_and_one_line(tmp_path, signum, status, words):
    done = _run_ending(tmp_path, signum)
    assert done.returncode == status, done.stderr
    assert done.stderr.splitlines() == [f"error: {words} after the outputs were written; they are complete"]
    assert (tmp_path / "out.txt").read_bytes() == b"complete"


@pytest.mark.parametrize("signum, status, words", [(signal.SIGINT, 130, "interrupted"),
                                                    (signal.SIGTERM, 143, "terminated by SIGTERM")])
def test_a_signal_before_the_command_stops_it_at_once(tmp_path, signum, status, words):
    done = _run_ending(tmp_path, signum, before=True)
    _stopped_before_writing(done, status, words, tmp_path / "out.txt")


def test_library_use_keeps_the_signal_mask(tmp_path):
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with command():
        (tmp_path / "x").write_text("x")
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_console_script_holds_a_signal_from_its_first_step(tmp_path):
    """`tokentrace merge` with a SIGTERM sent right after the console script's first step (before
    the command line is imported): the merge stops as soon as its handlers are in place."""
    from support.paths import DATA

    out = tmp_path / "out"
    code = (
        "import os, signal, sys\n"
        "import tokentrace.runtime.signals as signals\n"
        "held = signals.held_from_start\n"
        "def hold_then_signal():\n"
        "    held()\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "signals.held_from_start = hold_then_signal\n"
        f"sys.argv = ['tokentrace', 'merge', {str(DATA / 'sample_t39_tp2')!r}, '-o', {str(out)!r}]\n"
        "from tokentrace.__main__ import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    _stopped_before_writing(done, 143, "terminated by SIGTERM", out)


def test_a_signal_swallowed_by_a_callback_is_sent_again(tmp_path):
    """The handler raises where the main thread runs Python next; inside a weakref callback
    (importlib's module locks, in a stress run) CPython only reports the exception, and the
    command ran on to exit 0. The signal is sent again and stops the command."""
    out = tmp_path / "out.txt"
    code = (
        "import os, signal, time, weakref\n"
        "from tokentrace.runtime.command import command, end_process, process_ends_with_command\n"
        "from tokentrace.runtime.files import write_bytes\n"
        "class Held: pass\n"
        "def callback(_):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    for _ in range(1000): pass  # the handler runs, and raises, in here\n"
        "process_ends_with_command()\n"
        "try:\n"
        "    with command():\n"
        "        held = Held()\n"
        "        ref = weakref.ref(held, callback)\n"
        "        del held\n"
        "        time.sleep(2)\n"
        f"        write_bytes({str(out)!r}, b'complete')\n"
        "except SystemExit as exc:\n"
        "    end_process(exc.code)\n"
        "end_process(0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    _stopped_before_writing(done, 143, "terminated by SIGTERM", out)


def _stopped_before_writing(done: subprocess.CompletedProcess, status: int, words: str, out) -> None:
    """The command ended with ``status`` and its one line, and wrote nothing."""
    assert done.returncode == status, done.stderr
    assert done.stderr.splitlines() == [f"error: {words}; the outputs were left as they were"]
    assert not out.exists()
