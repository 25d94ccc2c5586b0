"""The command ``tokentrace record`` runs in its place: the user's ``python [OPTIONS] SCRIPT
[ARGS]`` (or ``python -m MODULE``, or ``SCRIPT.py`` alone) with the wrapper
:mod:`tokentrace.record.run` put between the interpreter and the program::

    python -u serve.py --port 8000
    -> python -u -m tokentrace.record.run -o DIR --gpu torch -- serve.py --port 8000
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from tokentrace.record.options import DEFAULT_TRACER_ENTRIES, RecordOptions

WRAPPER = "tokentrace.record.run"
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_VALUED = {"-W", "-X", "--check-hash-based-pycs"}  # interpreter options whose value is the next word
_HELP = ("give a Python program after --: `python SCRIPT.py [ARGS]`, `python -m MODULE [ARGS]` or `SCRIPT.py [ARGS]`; "
         "under torchrun let each worker record itself: "
         "`torchrun ... -m tokentrace.record.run -o DIR -- SCRIPT.py [ARGS]`")


class CommandError(ValueError):
    """The command cannot be recorded (not a Python program, ``-c`` code): a usage error."""


def wrapped(command: Sequence[str], options: RecordOptions) -> list[str]:
    """The command line that records ``command`` with ``options``.

    Raises:
        CommandError: ``command`` is not a Python script or module run by a ``python``.
    """
    if not command:
        raise CommandError(f"no program to record; {_HELP}")
    first, rest = command[0], list(command[1:])
    if first.endswith(".py"):  # a script alone: this Python runs it
        return [sys.executable, "-m", WRAPPER, *_options(options), "--", first, *rest]
    if not _PYTHON.match(os.path.basename(first)):
        raise CommandError(f"{first}: not a Python interpreter; {_HELP}")
    interpreter, program = _split(rest)
    if not program or program[0] == "-c":
        what = "-c code" if program else "nothing to run"
        raise CommandError(f"{' '.join(command)}: {what}; {_HELP}")
    if program[0] == "-m" and len(program) < 2:
        raise CommandError(f"{' '.join(command)}: -m needs a module; {_HELP}")
    return [first, *interpreter, "-m", WRAPPER, *_options(options), "--", *program]


def _split(words: list[str]) -> tuple[list[str], list[str]]:
    """The interpreter's own options, and the program from its script (or ``-m``/``-c``) on."""
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] not in ("-", "-m", "-c"):
        if words[i].startswith(("-m", "-c")) and not words[i].startswith("--"):  # -mserve: python's glued form
            return words[:i], [words[i][:2], words[i][2:], *words[i + 1:]]
        i += 2 if words[i] in _VALUED else 1
    return words[:i], words[i:]


def _options(options: RecordOptions) -> list[str]:
    """The wrapper's options for ``options`` (defaults left out)."""
    words = ["-o", os.path.abspath(options.out), "--gpu", options.gpu]
    for flag, value, default in (("--rank", options.rank, None), ("--skip", options.skip, 0),
                                 ("--steps", options.steps, None), ("--profile-id", options.profile_id, None),
                                 ("--tracer-entries", options.tracer_entries, DEFAULT_TRACER_ENTRIES)):
        if value != default:
            words += [flag, str(value)]
    return words
