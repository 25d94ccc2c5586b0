"""Issue 31: a full cache disk gave an error that blamed the input trace. A failed write of a
cache entry or an annotated copy (no space, quota, ``ulimit -f``, read-only) is one ``error:``
line that names the file being written, says what state the disk is in and where the cache can
go instead; never the input. Nothing half-written stays.

The full disk is a file-size limit (``RLIMIT_FSIZE``, inherited by the forked copy child; Python
ignores SIGXFSZ, so a write past it fails with EFBIG, as one on a full disk fails with ENOSPC):
a small tmpfs needs root."""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import resource
import shutil

import pytest

from support.hostile import one_error_line, run_cli, sample_rank
from tokentrace.engine.wasm_module import cache_dir, find_wasm, load_module, new_engine
from tokentrace.errors import WriteError, detached
from tokentrace.merge import merged_folder
from tokentrace.runtime.files import CACHE_ENV, cannot_write, remedy_for_writes


def _file_size_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.fixture()
def user_cache(tmp_path):
    """A user cache folder ($TOKENTRACE_CACHE_DIR) holding the compiled engine module: compiled
    under the limit, wasmtime's own memory image would fail first."""
    load_module(new_engine(), find_wasm())  # stored in the default cache when it was not there
    cache = tmp_path / "user-cache"
    (cache / "wasm").mkdir(parents=True, mode=0o700)
    os.chmod(cache, 0o700)
    for module in cache_dir().glob("trace_processor-*.cwasm*"):
        shutil.copy2(module, cache / "wasm" / module.name)
    return cache


def _left(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.mark.slow
def test_an_annotated_copy_that_does_not_fit_names_the_copy(tmp_path, user_cache):
    viz, proton = sample_rank(tmp_path / "in")
    trace = tmp_path / "t.json"
    assert run_cli("merge", viz, proton, "-o", trace)[0] == 0
    before = trace.read_bytes()
    code, err = run_cli("view", trace, "--no-browser", "--port", "0", env={CACHE_ENV: str(user_cache)},
                        preexec_fn=_file_size_limit(len(before) // 4), timeout=120)
    # before: "t.json: cannot be read ([Errno 27] File too large)", the user's own trace blamed
    one_error_line(code, err, str(user_cache / "annotated" / "t."), "cannot write (File too large)",
                   "ulimit -f", f"set ${CACHE_ENV} to a folder on another disk")
    assert f"{trace}:" not in err and "cannot be read" not in err
    assert _left(user_cache / "annotated") == []
    assert trace.read_bytes() == before


def test_a_merge_cache_entry_that_does_not_fit_names_the_entry(tmp_path, user_cache):
    """A profile folder merges into the user cache (never into itself: a ``.tokentrace-cache``
    link there, which earlier releases wrote through, is not followed); the copy of the host
    events, made by a forked child, is what fails."""
    folder = tmp_path / "profile"
    viz, proton = sample_rank(folder)
    (folder / ".tokentrace-cache").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    code, err = run_cli("view", folder, "--no-browser", "--port", "0", env={CACHE_ENV: str(user_cache)},
                        preexec_fn=_file_size_limit(1 << 20), timeout=120)
    one_error_line(code, err, str(user_cache / "merged"), ".merged.json: cannot write (File too large)",
                   f"set ${CACHE_ENV} to a folder on another disk")
    assert str(viz) not in err and str(proton) not in err
    assert _left(user_cache / "merged") == []  # the entry goes whole (its mark too)
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.slow
def test_an_analyze_cache_that_does_not_fit_names_the_entry(tmp_path, user_cache):
    """analyze merges each rank in a forked child (loaded as it grows) into the user cache: the
    child's error comes back whole, naming the entry there; -o gets no merge, half-written or
    whole."""
    folder = tmp_path / "profile"
    viz, proton = sample_rank(folder)
    out = tmp_path / "out"
    code, err = run_cli("analyze", folder, "-o", out, env={CACHE_ENV: str(user_cache)},
                        preexec_fn=_file_size_limit(1 << 20), timeout=120)
    one_error_line(code, err, str(user_cache / "merged"), ".merged.json: cannot write (File too large)",
                   f"set ${CACHE_ENV} to a folder on another disk", "tokentrace cache clear")
    assert str(viz) not in err and str(proton) not in err
    assert _left(user_cache / "merged") == []  # the entry goes whole (its mark too)
    assert not (out / "merged").exists()


@contextlib.contextmanager
def _soft_file_size_limit(limit: int):
    """This process's (and its forked children's) soft limit, given back at the end."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_profile_folder_merge_that_does_not_fit_says_where_else(tmp_path, monkeypatch):
    """merged_folder writes into the user cache, not the profile folder: the error names the
    entry there and says where else the cache can go; nothing half-written stays."""
    folder = tmp_path / "profile"
    viz, _ = sample_rank(folder)
    inputs = _left(folder)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "user-cache"))
    with pytest.raises(WriteError) as raised, _soft_file_size_limit(1 << 20):
        merged_folder(folder)
    text = str(raised.value)
    assert text.startswith(str(tmp_path / "user-cache" / "merged")) and ": cannot write (File too large)" in text
    assert f"set ${CACHE_ENV} to a folder on another disk" in text and "cache_dir= to tokentrace.open" in text
    assert f"{viz}" not in text
    assert _left(tmp_path / "user-cache" / "merged") == []
    assert _left(folder) == inputs  # no .tokentrace-cache in the profile folder


def test_a_full_disk_says_so_and_comes_back_from_a_worker_whole(tmp_path):
    target = tmp_path / "cache" / "k" / "s-TP0.merged.json"
    error = cannot_write(target, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert str(error) == (f"{target}: cannot write (No space left on device); the disk is full; "
                          "free some space or write elsewhere (-o)")
    for copy in (pickle.loads(pickle.dumps(error)), detached(error)):  # a worker's, a child's
        assert isinstance(copy, WriteError) and str(copy) == str(error) and copy.errno == errno.ENOSPC
    with pytest.raises(WriteError) as raised, remedy_for_writes("set $X elsewhere", tmp_path / "cache"):
        raise pickle.loads(pickle.dumps(error))
    assert str(raised.value).endswith("the disk is full; free some space, or set $X elsewhere")
    read_only = cannot_write(target, OSError(errno.EROFS, os.strerror(errno.EROFS)))
    with pytest.raises(WriteError) as raised, remedy_for_writes("set $X elsewhere", tmp_path / "cache"):
        raise read_only
    assert str(raised.value).endswith("the file system is read-only; set $X elsewhere")
    with pytest.raises(WriteError) as raised, remedy_for_writes("set $X elsewhere", tmp_path / "other"):
        raise error  # not under the folder: as it was
    assert str(raised.value) == str(error)
