"""Stress: SIGINT / SIGTERM at random moments into tokentrace commands, with both cores busy.

Each round runs one command in its own session, sends one signal at a random offset (uniform
over the command's unsignalled run time, measured once per command under the same load), and
checks what the issue 48 asks for:

* exit status 130 (SIGINT) or 143 (SIGTERM); ``view`` once serving ends 0 / 143 with its one
  ``stopped ...`` line, by design;
* exactly one ``error:`` line on stderr (none for a served view stopped), no ``Traceback``, no
  ``Exception ignored``;
* nothing half-written: the command's output absent (it did not exist before), no temp file
  (``.*.tmp``) left in the output folder or the cache;
* no process left in the command's session.

A round whose command finished before the signal is counted apart ("finished first").

    .venv/bin/python benchmarks/stress_signals.py --rounds 100 [--commands analyze,query,view,dask]
        [--spinners 2] [--seed N] [--json out.json] [--group-share 0.5]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "sample_t39_tp2"
TOKENTRACE = [str(Path(sys.executable).parent / "tokentrace")]
if not Path(TOKENTRACE[0]).is_file():
    TOKENTRACE = [sys.executable, "-c", "from tokentrace.cli import main; main()"]
COMMANDS = ("analyze", "query", "view", "dask")
SPIN = "import signal, os\nsignal.signal(signal.SIGTERM, lambda *a: os._exit(0))\nwhile True: pass\n"


def command_line(name: str, work: Path, merged: Path) -> tuple[list[str], Path | None]:
    """(argv, the output it writes, None for view)."""
    out = work / "out"
    if name == "analyze":
        return [*TOKENTRACE, "analyze", str(SAMPLE), "-o", str(out)], out
    if name == "dask":
        return [*TOKENTRACE, "analyze", str(SAMPLE), "-o", str(out), "--executor", "dask"], out
    if name == "query":
        query = ROOT / "queries" / "gpu_gaps.sql"
        return [*TOKENTRACE, "query", str(query), str(merged), "-o", str(work / "out.parquet")], \
            work / "out.parquet"
    return [*TOKENTRACE, "view", "--no-browser", "--port", "0", str(SAMPLE)], None


def run_once(name: str, work: Path, merged: Path, sig: int | None, offset: float,
             env: dict[str, str], timeout: float = 300, group: bool = False) -> dict:
    """One run, signalled at ``offset`` seconds (``sig`` None: not at all, a view then gets a
    SIGINT once it serves), to the command's process or, with ``group``, to its whole process
    group as a terminal's Ctrl+C is (its workers too). Returns what was seen."""
    argv, out = command_line(name, work, merged)
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=work,
                            env=env, start_new_session=True, text=True)
    sent, serving_at = None, None
    try:
        if name == "view":
            serving_at = _wait_for_serving(proc, start, offset if sig is not None else None, timeout)
            if proc.poll() is None:
                _send(proc, sig if sig is not None else signal.SIGINT, group)
                sent = time.monotonic() - start
        else:
            try:
                proc.wait(timeout=offset) if sig is not None else proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _send(proc, sig, group)
                sent = time.monotonic() - start
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return {"command": name, "hung": True, "rc": None, "stderr": stderr[-2000:]}
    elapsed = time.monotonic() - start
    left = _session_alive(proc.pid)
    if left:
        time.sleep(1.0)  # a child may be on its way out: give it a second
        left = _session_alive(proc.pid)
        if left:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    temps = [str(p) for base in (work, Path(env["TOKENTRACE_CACHE_DIR"])) for p in base.rglob("*.tmp")]
    return {
        "command": name, "signal": signal.Signals(sig).name if sig else None, "offset": round(offset, 3),
        "to": "group" if group else "process",
        "sent": None if sent is None else round(sent, 3), "serving_at": serving_at, "elapsed": round(elapsed, 3),
        "rc": proc.returncode, "error_lines": errors, "traceback": "Traceback" in stderr,
        "ignored": "Exception ignored" in stderr, "stdout_tail": stdout.strip().splitlines()[-1:] if stdout.strip() else [],
        "output_left": bool(out is not None and out.exists()), "temps": temps, "children_left": left,
        "stderr_tail": stderr[-1500:] if (len(errors) != 1 or "Traceback" in stderr) else "",
    }


def _send(proc, sig: int, group: bool) -> None:
    try:
        os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
    except ProcessLookupError:
        pass


def _seeded(work: Path, seed: Path | None) -> Path:
    """A fresh cache folder for one run, holding the compiled engine (compiling it costs ~10 s
    a run, which is not what is measured)."""
    cache = work / "cache"
    cache.mkdir(mode=0o700)
    if seed is not None and seed.is_dir():
        shutil.copytree(seed, cache / "wasm")
        os.chmod(cache / "wasm", 0o700)
    return cache


def _wait_for_serving(proc, start: float, offset: float | None, timeout: float) -> float | None:
    """Waits until view prints its URL (returns when, in s) or until ``offset`` passes."""
    os.set_blocking(proc.stdout.fileno(), False)
    seen = ""
    while proc.poll() is None and time.monotonic() - start < timeout:
        if offset is not None and time.monotonic() - start >= offset:
            return None
        try:
            chunk = os.read(proc.stdout.fileno(), 4096).decode()
        except BlockingIOError:
            chunk = ""
        seen += chunk
        if "open http://127.0.0.1:" in seen and "\n" in seen.split("open http://", 1)[1]:
            if offset is None:
                return round(time.monotonic() - start, 3)
        time.sleep(0.01)
    return None


def _session_alive(sid: int) -> list[str]:
    """Processes still in session ``sid`` (its leader is reaped by then)."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                left.append(f"{entry.name} {(entry / 'cmdline').read_bytes()[:80]!r}")
        except (OSError, IndexError, ValueError):
            continue
    return left


def verdict(result: dict) -> str:
    """``ok``, ``finished first`` or what went wrong."""
    if result.get("hung"):
        return "hung"
    if result["sent"] is None:
        return "finished first"
    problems = []
    serving_view = result["command"] == "view" and result["stdout_tail"] and \
        result["stdout_tail"][0].startswith("stopped")
    expected = {"SIGINT": 130, "SIGTERM": 143}[result["signal"]]
    if serving_view:  # the server stopped: 0 for SIGINT, 143 for SIGTERM, no error line
        expected = 0 if result["signal"] == "SIGINT" else 143
        if result["error_lines"]:
            problems.append("error line after stopped")
    elif len(result["error_lines"]) != 1:
        problems.append(f"{len(result['error_lines'])} error lines")
    if result["rc"] != expected:
        problems.append(f"exit {result['rc']}")
    if result["traceback"]:
        problems.append("traceback")
    if result["ignored"]:
        problems.append("exception ignored")
    complete = any(line.endswith("they are complete") for line in result["error_lines"])
    if result["output_left"] and result["rc"] != 0 and not complete:  # a signal after the outputs were in place
        problems.append("output left")
    if result["temps"]:
        problems.append("temp files")
    if result["children_left"]:
        problems.append("children left")
    return "ok" if not problems else ", ".join(problems)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--spinners", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--group-share", type=float, default=0.5,
                        help="share of rounds that signal the whole process group (Ctrl+C)")
    args = parser.parse_args()
    # A background job of a shell script starts with SIGINT ignored, and its children inherit
    # that (tokentrace keeps an ignored SIGINT ignored, as POSIX tools do): let it through.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the spinners go in the finally
    rng = random.Random(args.seed)
    names = [n for n in args.commands.split(",") if n]
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.spinners)]
    results, counts = [], collections.Counter()
    try:
        with tempfile.TemporaryDirectory(prefix="tt-stress-") as tmp:
            tmp = Path(tmp)
            env = {**os.environ, "TOKENTRACE_CACHE_DIR": str(tmp / "cache")}
            merged = tmp / "merged.json"
            subprocess.run([*TOKENTRACE, "merge", str(SAMPLE), "-o", str(merged), "--combine"],
                           check=True, capture_output=True, env=env)
            seed = tmp / "cache" / "wasm"  # compiled by the merge's warm-up query below
            subprocess.run([*TOKENTRACE, "query", str(ROOT / "queries" / "gpu_gaps.sql"), str(merged),
                            "-o", str(tmp / "warm.parquet")], check=True, capture_output=True, env=env)
            durations = {}
            for name in names:  # the unsignalled run time, under the same load
                work = tmp / f"calibrate-{name}"
                work.mkdir()
                first = run_once(name, work, merged, None, 0.0,
                                 {**env, "TOKENTRACE_CACHE_DIR": str(_seeded(work, seed))})
                durations[name] = first["serving_at"] if name == "view" else first["elapsed"]
                print(f"{name}: {durations[name]} s unsignalled (exit {first['rc']})", flush=True)
            for index in range(args.rounds):
                name = names[index % len(names)]
                sig = rng.choice((signal.SIGINT, signal.SIGTERM))
                span = (durations[name] or 1.0) * (1.25 if name == "view" else 1.0)
                offset = rng.uniform(0.05, span)
                work = tmp / f"round-{index}"
                work.mkdir()
                group = rng.random() < args.group_share
                result = run_once(name, work, merged, sig, offset,
                                  {**env, "TOKENTRACE_CACHE_DIR": str(_seeded(work, seed))}, group=group)
                result["verdict"] = verdict(result)
                counts[(name, result.get("signal"), result.get("rc"), result["verdict"])] += 1
                results.append(result)
                mark = "" if result["verdict"] in ("ok", "finished first") else "  <--"
                print(f"[{index + 1}/{args.rounds}] {name} {result.get('signal')} to "
                      f"{'group' if group else 'process'} at {offset:.2f} s: "
                      f"exit {result.get('rc')}, {result['verdict']}{mark}", flush=True)
                if mark and result.get("stderr_tail"):
                    print("    " + result["stderr_tail"].replace("\n", "\n    "), flush=True)
    finally:
        for spinner in spinners:
            spinner.terminate()
            spinner.wait()
    print("\ncommand signal exit verdict: rounds")
    for (name, sig, rc, text), n in sorted(counts.items(), key=lambda kv: str(kv[0])):
        print(f"{name} {sig} {rc} {text}: {n}")
    if results:
        print(f"signal to the whole group in {sum(r.get('to') == 'group' for r in results)} rounds")
    bad = sum(1 for r in results if r["verdict"] not in ("ok", "finished first"))
    print(f"\n{len(results)} rounds, {bad} failed, "
          f"{sum(r['verdict'] == 'finished first' for r in results)} finished before the signal")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
