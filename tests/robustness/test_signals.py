"""Issue 13, item 4: one cleanup path for errors and signals. A real ``tokentrace`` process is
signalled midway (SIGTERM, SIGINT, SIGHUP; alone or with its whole process group, as a terminal
does) and must exit 128 + the signal with one ``error:`` line, leave no temp file, no partial
output (all ranks or none) and no live child: neither the forked host copy nor a ``-j`` worker.
An error in one rank takes the other ranks' files with it the same way."""

from __future__ import annotations

import signal

import pytest

from support.hostile import age, aged_sample, one_error_line, run_cli, signal_midway, temp_file_in, tree

# Each test signals `tokentrace merge`/`analyze` midway through the bundled sample: out of the
# quick run (tests/conftest.py).
pytestmark = pytest.mark.slow

CASES = [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)]


@pytest.fixture()
def profile(tmp_path):
    return aged_sample(tmp_path)


def _clean_exit(code: int, expected: int, err: str, alive: list[int]) -> None:
    assert code == expected, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.splitlines()[-1].startswith("error: "), err
    assert not alive, f"processes left alive: {alive}"


@pytest.mark.parametrize("sig, expected", CASES)
@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("when", ["first rank", "second rank"])
def test_a_signal_midway_leaves_nothing(profile, tmp_path, sig, expected, jobs, when):
    out = tmp_path / "out"
    before = tree(profile)
    code, err, alive = signal_midway(["merge", profile, "-o", out, "-j", jobs, "--combine"], sig,
                                     temp_file_in(out, "TP1" if when == "second rank" else ""))
    _clean_exit(code, expected, err, alive)
    assert tree(out) in (None, {}), tree(out).keys()  # the folder it made goes too
    assert tree(profile) == before


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_terminal_interrupt_reaches_every_process(profile, tmp_path, jobs):
    out = tmp_path / "out"
    code, err, alive = signal_midway(["merge", profile, "-o", out, "-j", jobs], signal.SIGINT,
                                     temp_file_in(out), group=True)
    _clean_exit(code, 130, err, alive)
    assert tree(out) in (None, {})


def test_earlier_outputs_come_back_after_a_signal(profile, tmp_path):
    out = tmp_path / "out"
    assert run_cli("merge", profile, "-o", out, "--combine")[0] == 0
    old = tree(out)
    assert len(old) == 3
    code, err, alive = signal_midway(["merge", profile, "-o", out, "--combine", "--gzip"], signal.SIGTERM,
                                     temp_file_in(out, "TP1"))
    _clean_exit(code, 143, err, alive)
    assert tree(out) == old


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_failed_rank_takes_the_others_files_with_it(profile, tmp_path, jobs):
    proton = profile / "sample-TP1.proton.chrome_trace.gz"
    import gzip

    raw = gzip.decompress(proton.read_bytes())
    proton.unlink()
    cut = profile / "sample-TP1.proton.chrome_trace"
    cut.write_bytes(raw[: len(raw) // 2])
    age(cut)
    out = tmp_path / "out"
    code, err = run_cli("merge", profile, "-o", out, "-j", jobs)
    one_error_line(code, err, str(cut), "ends early")
    assert tree(out) in (None, {})  # before: TP0's merged file stayed


def test_analyze_under_sigterm_leaves_no_partial_cache_entry(profile, tmp_path, monkeypatch):
    """analyze merges into the user cache ($TOKENTRACE_CACHE_DIR, here a folder of this test's,
    holding the compiled engine), signalled while an entry is half-written: no entry stays
    without its manifest, no temp file anywhere, no report, nothing in -o of the merge."""
    import shutil

    from tokentrace.runtime.files import CACHE_ENV, cache_root

    cache = tmp_path / "user-cache"
    cache.mkdir(mode=0o700)
    if (cache_root() / "wasm").is_dir():  # no compile in the signalled run
        shutil.copytree(cache_root() / "wasm", cache / "wasm")
    monkeypatch.setenv(CACHE_ENV, str(cache))  # the command inherits it
    merged = cache / "merged"
    out = tmp_path / "analysis"
    code, err, alive = signal_midway(["analyze", profile, "-o", out], signal.SIGTERM,
                                     lambda: merged.is_dir() and any(
                                         p.name.endswith(".tmp") for p in merged.rglob("*")))
    _clean_exit(code, 143, err, alive)
    entries = [p for p in merged.iterdir()] if merged.is_dir() else []
    assert all((entry / "manifest.json").is_file() for entry in entries), entries
    assert not [p for p in merged.rglob("*") if p.name.endswith((".tmp", ".old"))] if merged.is_dir() else True
    assert not (out / "report.html").exists() and not (out / "merged").exists()
    assert not [p for p in out.rglob("*") if p.name.endswith((".tmp", ".old"))] if out.exists() else True
