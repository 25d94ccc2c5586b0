"""``tokentrace record``: its help, its usage errors (one ``error:`` line, status 2), the command
it becomes, the error when the profiler is not installed, and what ``import tokentrace`` leaves
out (torch, triton, viztracer). CI has no GPU, torch or triton: a real recording is checked on a
GPU machine (docs/record.md says how and what it found)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from support.paths import REPO
from tokentrace.cli import app
from tokentrace.record.command import CommandError, wrapped
from tokentrace.record.options import RecordOptions

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_TRITON = importlib.util.find_spec("triton") is not None
CLI = "import sys; sys.argv[0] = 'tokentrace'; from tokentrace.cli import main; main()"


def _tokentrace(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_help_names_the_options_and_the_program():
    result = CliRunner().invoke(app, ["record", "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Usage: tokentrace record" in text
    for option in ("--output", "--gpu", "--rank", "--skip", "--steps", "--profile-id", "--tracer-entries"):
        assert option in text


@pytest.mark.parametrize("args, says", [
    ([], "-o DIR is required"),
    (["-o", "{tmp}", "--gpu", "nsys", "--", "serve.py"], "--gpu nsys: choose torch or proton"),
    (["-o", "{tmp}", "--steps", "0", "--", "serve.py"], "steps must be a whole number >= 1, not 0"),
    (["-o", "{tmp}", "--skip", "-1", "--", "serve.py"], "skip must be a whole number >= 0, not -1"),
    (["-o", "{tmp}"], "no program to record"),
    (["-o", "{tmp}", "--", "torchrun", "serve.py"], "torchrun: not a Python interpreter"),
    (["-o", "{tmp}", "--", "python", "-c", "print(1)"], "-c code"),
    (["-o", "{tmp}", "--", "python", "-u"], "nothing to run"),
    (["-o", "{tmp}", "--", "python", "-m"], "-m needs a module"),
])
def test_usage_errors_are_one_line_and_status_2(tmp_path, args, says):
    args = [a.replace("{tmp}", str(tmp_path / "run1")) for a in args]
    result = CliRunner().invoke(app, ["record", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr
    assert not (tmp_path / "run1").exists()


@pytest.mark.parametrize("command, expected", [
    (["python", "serve.py", "--port", "8000"],
     ["python", "-m", "tokentrace.record.run", "-o", "{out}", "--gpu", "torch", "--", "serve.py", "--port", "8000"]),
    (["python3.12", "-u", "-X", "dev", "-W", "error", "serve.py"],
     ["python3.12", "-u", "-X", "dev", "-W", "error", "-m", "tokentrace.record.run", "-o", "{out}", "--gpu", "torch",
      "--", "serve.py"]),
    (["/venv/bin/python", "-m", "vllm.entrypoints.api_server", "--model", "m"],
     ["/venv/bin/python", "-m", "tokentrace.record.run", "-o", "{out}", "--gpu", "torch", "--", "-m",
      "vllm.entrypoints.api_server", "--model", "m"]),
    (["python", "-Wd", "-mserve", "-x"],
     ["python", "-Wd", "-m", "tokentrace.record.run", "-o", "{out}", "--gpu", "torch", "--", "-m", "serve", "-x"]),
    (["serve.py", "a"], ["{python}", "-m", "tokentrace.record.run", "-o", "{out}", "--gpu", "torch", "--", "serve.py", "a"]),
])
def test_the_program_is_wrapped_after_the_interpreters_own_options(tmp_path, command, expected):
    out = tmp_path / "run1"
    subst = {"{out}": str(out), "{python}": sys.executable}
    assert wrapped(command, RecordOptions(out)) == [subst.get(w, w) for w in expected]


def test_the_wrapper_gets_the_options_that_differ_from_the_defaults(tmp_path):
    options = RecordOptions(tmp_path / "run1", "proton", rank=3, skip=10, steps=50, profile_id="eng",
                            tracer_entries=2_000_000)
    argv = wrapped(["python", "serve.py"], options)
    assert argv[argv.index("--gpu"):argv.index("--", 3)] == [
        "--gpu", "proton", "--rank", "3", "--skip", "10", "--steps", "50", "--profile-id", "eng",
        "--tracer-entries", "2000000"]
    from tokentrace.record.run import parser

    parsed = parser().parse_args(argv[3:])
    assert (parsed.gpu, parsed.rank, parsed.skip, parsed.steps, parsed.profile_id, parsed.target) == (
        "proton", 3, 10, 50, "eng", ["--", "serve.py"])


def test_a_non_python_program_is_refused():
    with pytest.raises(CommandError, match="not a Python interpreter"):
        wrapped(["bash", "serve.sh"], RecordOptions("run1"))


@pytest.mark.parametrize("gpu, package", [("torch", "torch"), ("proton", "triton")])
def test_a_missing_profiler_is_one_error_line_naming_what_to_install(tmp_path, gpu, package):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    script = tmp_path / "serve.py"
    script.write_text("open('ran', 'w').close()\n")
    done = _tokentrace("record", "-o", str(tmp_path / "run1"), "--gpu", gpu, "--", sys.executable, str(script),
                       cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"pip install {package}" in lines[0], done.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "run1").exists()


def test_a_program_that_cannot_be_found_is_status_127(tmp_path):
    done = _tokentrace("record", "-o", str(tmp_path / "run1"), "--", "python3.999", "serve.py")
    assert done.returncode == 127
    assert done.stderr.strip().splitlines() == ["error: python3.999: cannot run it (No such file or directory)"]


def test_the_wrapper_refuses_a_missing_script(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tokentrace.record.run", "-o", str(tmp_path), "--",
                           str(tmp_path / "nope.py")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "nope.py: no such script" in done.stderr


def test_the_program_gets_the_environment_the_console_script_changed_back(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    # the exec is the one thing replaced: it prints the environment the program would get
    code = ("from tokentrace.cli import main; import tokentrace.runtime.child as c, json, sys; "
            "c.become = lambda argv, env: (print(json.dumps(env.get('OPENBLAS_NUM_THREADS'))), sys.exit(0)); main()")
    done = subprocess.run([sys.executable, "-c", code, "record", "-o", str(tmp_path), "--", "python", "s.py"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is None  # main() set it for its own commands only


def test_importing_tokentrace_imports_no_profiler():
    code = ("import sys, tokentrace, tokentrace.cli, tokentrace.record, tokentrace.record.run, tokentrace.merge, "
            "tokentrace.sources.discover, tokentrace.analysis\n"
            "tokentrace.step(); assert callable(tokentrace.record)\n"
            "print(sorted(m for m in ('torch', 'triton', 'viztracer') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
