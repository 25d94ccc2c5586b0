"""How tokentrace opens the files it writes (tokentrace.runtime.files.open_for_writing): never with
O_TRUNC on the empty temp file it has just made, which on ext4 made ``close()`` write the whole
file back (30-60 ms for a combined trace, on the critical path), and a file that already holds
bytes is still rewritten from its start, nothing of it left."""

from __future__ import annotations

import os
import subprocess
import sys

from tokentrace.runtime.files import atomic_output, open_for_writing, write_bytes

# A merge of the sample with --combine (one process: -j 1), every open of a file under the output
# folder for writing recorded by an audit hook. open() raises its "open" event with the flags of
# its mode (mode a str) and, given an opener that calls os.open, os.open raises its own with the
# flags it really opens with (mode None): those count.
_MERGE_WATCHED = """
import os, sys
from pathlib import Path
out = Path(sys.argv[2]).resolve()
events = []
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, os.PathLike)) and isinstance(args[2], int) \\
            and str(args[0]).startswith(str(out)) and args[2] & (os.O_WRONLY | os.O_RDWR):
        events.append((str(args[0]), args[1], args[2]))
sys.addaudithook(hook)
from tokentrace.merge import merge
from tokentrace.options import MergeOptions
merge([Path(sys.argv[1])], out, MergeOptions(combine=True, jobs=1))
for index, (path, mode, flags) in enumerate(events):
    opener_follows = index + 1 < len(events) and events[index + 1][0] == path and events[index + 1][1] is None
    if mode is None or not opener_follows:
        print(Path(path).name, bool(flags & os.O_TRUNC))
"""


def test_the_merge_opens_none_of_its_outputs_truncating(sample_t39, tmp_path):
    out = tmp_path / "merged"
    done = subprocess.run([sys.executable, "-c", _MERGE_WATCHED, str(sample_t39), str(out)],
                          capture_output=True, text=True, check=True)
    opened = [line.rsplit(" ", 1) for line in done.stdout.splitlines()]
    names = set(name for name, _ in opened)  # a temp file twice: made by mkstemp, then written
    # both ranks' temp files, the combined file's, and the parts the workers write for it
    assert sum(n.startswith(".sample-TP") and n.endswith(".tmp") for n in names) == 2, names
    assert sum(n.startswith(".sample.merged.json.") and n.endswith(".tmp") for n in names) == 1, names
    assert sum(n.endswith(".part") for n in names) == 2, names
    assert [name for name, truncating in opened if truncating == "True"] == []
    assert sorted(p.name for p in out.iterdir()) == ["sample-TP0.merged.json", "sample-TP1.merged.json",
                                                     "sample.merged.json"]


def test_a_file_holding_bytes_is_rewritten_from_its_start(tmp_path):
    path = tmp_path / "left.part"
    path.write_bytes(b"a longer leftover of an earlier run")
    with open_for_writing(path) as out:
        out.write(b"new")
    assert path.read_bytes() == b"new"


def test_a_new_file_gets_the_usual_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        with open_for_writing(tmp_path / "new.part") as out:
            out.write(b"x")
    finally:
        os.umask(umask)
    assert (tmp_path / "new.part").stat().st_mode & 0o777 == 0o644


def test_atomic_writes_hold_exactly_what_was_written(tmp_path):
    target = tmp_path / "out.json"
    write_bytes(target, b"a first, longer version")
    write_bytes(target, b"second")
    assert target.read_bytes() == b"second"
    with atomic_output(target, compress=False) as write:
        write(b"third")
    assert target.read_bytes() == b"third"
