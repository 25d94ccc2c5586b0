"""``python -m tokentrace.record.run -o DIR [options] -- SCRIPT.py [ARGS] | -m MODULE [ARGS]``:
runs a Python program inside :func:`tokentrace.record`, in this process.

``tokentrace record ... -- python serve.py`` starts ``python -m tokentrace.record.run ...
-- serve.py`` in its place: the program records itself. A wrapper that runs the program with
:mod:`runpy` was chosen over an environment hook (a ``sitecustomize`` on ``PYTHONPATH``, as
coverage and some profilers use): such a hook runs in every Python process the program starts
(torchrun's agent, multiprocessing and compile workers, tokenizer processes), each of which would
record and claim a rank, and it hides the environment's own ``sitecustomize``. The wrapper
records exactly the interpreter it runs in. Under a launcher, each worker wraps itself:
``torchrun --nproc-per-node 2 -m tokentrace.record.run -o DIR -- serve.py`` (the rank comes from
``torch.distributed`` or ``$RANK``).

Exit status: the program's (its ``sys.exit`` code; 1 for an uncaught exception, with its
traceback); 1 with one ``error:`` line when the recording fails; 128 + the signal for SIGTERM or
SIGHUP (the files are written first).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import warnings
from collections.abc import Sequence

from tokentrace.errors import TokentraceError, TokentraceWarning
from tokentrace.record.options import DEFAULT_TRACER_ENTRIES, GPU_PROFILERS


def parser() -> argparse.ArgumentParser:
    """The wrapper's options (``tokentrace record`` passes its own through unchanged)."""
    ap = argparse.ArgumentParser(prog="python -m tokentrace.record.run",
                                 description="Run a Python program inside tokentrace.record(...).")
    ap.add_argument("-o", "--output", required=True, help="the profile folder")
    ap.add_argument("--gpu", choices=sorted(GPU_PROFILERS), default="torch")
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--profile-id", default=None)
    ap.add_argument("--tracer-entries", type=int, default=DEFAULT_TRACER_ENTRIES)
    ap.add_argument("target", nargs=argparse.REMAINDER, help="-- SCRIPT.py [ARGS] or -- -m MODULE [ARGS]")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the program under a recording; returns the exit status (a ``SystemExit`` of the
    program passes through, after the files are written)."""
    ap = parser()
    args = ap.parse_args(argv)
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if not target or target[0] == "-m" and len(target) < 2:
        ap.error("give the program: -- SCRIPT.py [ARGS] or -- -m MODULE [ARGS]")
    if target[0] != "-m" and not os.path.isfile(target[0]):
        ap.error(f"{target[0]}: no such script")
    from tokentrace.record.session import record
    from tokentrace.runtime.child import terminations_exit

    show = warnings.showwarning
    warnings.showwarning = _show_ours(show)
    recording = None
    try:
        with terminations_exit(), record(args.output, args.gpu, args.rank, skip=args.skip, steps=args.steps,
                                         profile_id=args.profile_id, tracer_entries=args.tracer_entries) as recording:
            _run(target)
    except TokentraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        warnings.showwarning = show
        if recording is not None and recording.files:
            print(_summary(recording), file=sys.stderr)
    return 0


def _run(target: list[str]) -> None:
    """Runs ``SCRIPT [ARGS]`` or ``-m MODULE [ARGS]`` as ``python`` would, as ``__main__``."""
    if target[0] == "-m":
        sys.argv = ["-m", *target[2:]]
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = list(target)
    sys.path[0] = os.path.dirname(os.path.abspath(target[0]))  # the script's folder, not ours
    runpy.run_path(target[0], run_name="__main__")


def _summary(recording) -> str:
    window = (f"step marks {recording.first_mark} to {recording.last_mark}" if recording.last_mark is not None
              else f"from step mark {recording.first_mark} to the end")
    folder = recording.options.out
    return (f"tokentrace: recorded rank {recording.rank} ({window}) -> {folder}: "
            f"{', '.join(p.name for p in recording.files)}; next: tokentrace analyze {folder}")


def _show_ours(show):
    """``warnings.showwarning`` that prints tokentrace's warnings on one line."""
    def _show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, TokentraceWarning):
            print(f"tokentrace: warning: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    return _show


if __name__ == "__main__":
    sys.exit(main())
