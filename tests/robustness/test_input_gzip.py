"""Issue 31: compressed input. A gzip bomb is refused with one line naming the file, the limit and
how to raise it, in bounded memory (measured on the real subprocess, never inflating GBs); a
valid multi-member gzip (pigz, bgzip, ``cat a.gz b.gz``) is read whole, whatever its member
boundaries fall on."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import zlib

import pytest

from support.hostile import CLI, age, one_error_line, sample_rank
from tokentrace.sources import fileio
from tokentrace.sources.fileio import read_all

MIB = 1 << 20
HEAD = (b'{"traceEvents":[{"ph":"M","pid":1,"tid":1,"name":"process_name",'
        b'"args":{"name":"MainProcess"}},')


def _bomb(path, inflated_mib: int, members: bool):
    """A VizTracer-looking head, then ``inflated_mib`` MiB of spaces: one gzip member per MiB,
    or one member of repeated full-flush deflate blocks (no trailer: a reader that got that far
    would call it cut). Built from ~1 KB pieces: nothing large is ever compressed here."""
    if members:
        unit = gzip.compress(b" " * MIB, 9)
        path.write_bytes(gzip.compress(HEAD) + unit * inflated_mib)
    else:
        deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
        first = deflate.compress(HEAD) + deflate.flush(zlib.Z_FULL_FLUSH)
        block = deflate.compress(b" " * MIB) + deflate.flush(zlib.Z_FULL_FLUSH)
        path.write_bytes(first + block * inflated_mib)
    return age(path)


# Runs a command and prints its exit status, stderr and peak RSS (KiB) as JSON. A child forked
# from pytest would report pytest's own peak too (Linux keeps the pre-exec image's high-water
# mark in ru_maxrss), so the command is started from this small process instead.
_MEASURE = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
print(json.dumps([done.returncode, done.stderr.decode(errors="replace"),
                  resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))
"""


def _run_measured(args, timeout: float = 120):
    """(exit status, stderr, peak RSS in MiB of the command and its children) of ``tokentrace
    ARGS``, killed after ``timeout`` s (the old reader ran for ever on many members, past
    1 GiB)."""
    child = subprocess.Popen([sys.executable, "-c", _MEASURE, *CLI, *map(str, args)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise AssertionError(f"no answer in {timeout} s") from None
    code, err, peak_kib = json.loads(out)
    return code, err.strip(), peak_kib / 1024


@pytest.mark.parametrize("members", [False, True], ids=["one_member", "many_members"])
@pytest.mark.slow
def test_a_gzip_bomb_is_one_line_in_bounded_memory(tmp_path, members):
    _, proton = sample_rank(tmp_path)
    viz = _bomb(tmp_path / "s-TP0.viztracer.json.gz", 1024, members)  # ~1 MB inflating to 1 GiB
    assert viz.stat().st_size < 1.2 * MIB
    code, err, peak = _run_measured(["merge", viz, proton, "-o", tmp_path / "out.json"])
    one_error_line(code, err, str(viz), "TOKENTRACE_MAX_INFLATE", "inflates to more than")
    assert peak < 400, peak  # ~140 MiB (the limit is ~100 MiB); the old reader went past 1 GiB
    assert not (tmp_path / "out.json").exists()


def test_the_limit_can_be_raised_and_lowered(tmp_path):
    path = _bomb(tmp_path / "b.json.gz", 4, True)
    assert len(read_all(path)) == len(HEAD) + 4 * MIB  # under the default limit
    os.environ["TOKENTRACE_MAX_INFLATE"] = "1M"
    try:
        with pytest.raises(Exception, match="TOKENTRACE_MAX_INFLATE"):
            read_all(path)
        with pytest.raises(Exception, match="TOKENTRACE_MAX_INFLATE"), fileio.open_bytes(path) as handle:
            while handle.read(MIB):
                pass
    finally:
        del os.environ["TOKENTRACE_MAX_INFLATE"]


def _members(data: bytes, size: int) -> bytes:
    return b"".join(gzip.compress(data[i:i + size]) for i in range(0, len(data), size))


@pytest.mark.slow
def test_a_multi_member_gzip_merges_like_one_member(tmp_path):
    viz, proton = sample_rank(tmp_path / "in")
    data = viz.read_bytes()
    one = tmp_path / "one" / "s-TP0.viztracer.json.gz"
    many = tmp_path / "many" / "s-TP0.viztracer.json.gz"
    for path, blob in ((one, gzip.compress(data)), (many, _members(data, 128 << 10) + b"\0" * 64)):
        path.parent.mkdir()
        path.write_bytes(blob)
        (path.parent / proton.name).write_bytes(proton.read_bytes())
        age(path), age(path.parent / proton.name)
    outs = []
    for folder in (one.parent, many.parent):
        out = tmp_path / f"{folder.name}.json"
        done = subprocess.run([*CLI, "merge", str(folder), "-o", str(out)], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outs.append(out.read_bytes().replace(str(folder).encode(), b"IN"))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("shape", ["member_ends_at_read", "long_run_then_member", "tiny_members"])
def test_member_boundaries_lose_nothing(tmp_path, shape):
    if shape == "member_ends_at_read":  # the first member fills the first read exactly
        raw = os.urandom(fileio.CHUNK_BYTES)
        size = fileio.CHUNK_BYTES - 2000
        size += fileio.CHUNK_BYTES - len(gzip.compress(raw[:size], compresslevel=0))
        first = gzip.compress(raw[:size], compresslevel=0)
        assert len(first) == fileio.CHUNK_BYTES
        blob, want = first + gzip.compress(b"tail"), raw[:size] + b"tail"
    elif shape == "long_run_then_member":  # output still pending in zlib when its input ran out
        want = b" " * (20 * MIB) + b"x"
        blob = gzip.compress(want[:-1]) + gzip.compress(b"x")
    else:
        want = os.urandom(300_000)
        blob = _members(want, 10)
    path = tmp_path / "t.gz"
    path.write_bytes(blob)
    assert read_all(path) == want
