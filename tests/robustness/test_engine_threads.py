"""Issue 31: two threads using one open trace at once must not kill the process (the embedded
engine is one WebAssembly instance; concurrent calls made wasmtime abort it, losing a notebook's
kernel). Queries are served one at a time; every answer is right. In a subprocess, so that the
old behaviour (SIGABRT) fails the test instead of ending the test run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from support.paths import DATA

SCRIPT = textwrap.dedent("""
    import sys, threading, warnings
    warnings.simplefilter("ignore")
    from tokentrace.catalog import open_trace
    engine = open_trace(sys.argv[1], warn=False)
    expected = int(engine.query("SELECT COUNT(*) AS n FROM slice").n[0])
    answers, errors = [], []

    def work():
        try:
            for _ in range(15):
                answers.append(int(engine.query("SELECT COUNT(*) AS n FROM slice").n[0]))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            errors.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    engine.close()
    print(len(answers), set(answers) == {expected}, errors)
""")


@pytest.mark.slow
def test_threads_sharing_one_trace_get_their_answers():
    trace = DATA / "sample_t39_tp2" / "sample-TP0.proton.chrome_trace.gz"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(trace)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[:2] == ["60", "True"] and done.stdout.strip().endswith("[]"), done.stdout
