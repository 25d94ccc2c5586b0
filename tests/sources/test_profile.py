"""Issue 46: a profile is found once and passed down. A cold `tokentrace analyze` (check, merge,
the queries riding on it), `tokentrace merge` and `tokentrace view` each list the profile folder
once; the profile says what was found (ranks, inputs, sizes) and a folder that changes after it
was found is merged as found."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokentrace.cli import app
from tokentrace.merge import find_profile, merged_folder
from tokentrace.sources import discover
from tokentrace.view import prepare_trace


@pytest.fixture
def listings(monkeypatch):
    """Every folder discovery lists, in order."""
    seen: list[Path] = []
    real = discover.find_folder

    def counted(folder, profile_id=None):
        seen.append(Path(folder))
        return real(folder, profile_id)

    monkeypatch.setattr(discover, "find_folder", counted)
    return seen


def test_the_profile_says_what_was_found(sample_t39):
    profile = find_profile(sample_t39)
    assert [str(r.tag) for r in profile.ranks] == ["TP0", "TP1"]
    assert profile.source == sample_t39 and profile.is_folder
    assert set(profile.inputs) == {p for p in sample_t39.iterdir() if "truth" not in p.name}
    assert profile.input_bytes == sum(p.stat().st_size for p in profile.inputs)
    files = find_profile([profile.ranks[0].viztracer, *profile.ranks[0].gpu])
    assert not files.is_folder and [str(r.tag) for r in files.ranks] == ["TP0"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["analyze", "merge"])
def test_a_cold_command_lists_the_profile_folder_once(sample_t39, tmp_path, listings, command):
    folder = shutil.copytree(sample_t39, tmp_path / "profile")  # a new folder: no cached merge
    args = {"analyze": ["analyze", str(folder), "-o", str(tmp_path / "out"), "--no-plots", "-q"],
            "merge": ["merge", str(folder), "-o", str(tmp_path / "merged"), "-q"]}[command]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert listings == [folder]


@pytest.mark.slow
def test_view_lists_the_profile_folder_once(sample_t39, tmp_path, listings):
    folder = shutil.copytree(sample_t39, tmp_path / "profile")
    served = prepare_trace(folder)
    assert served.merged and listings == [folder]


def test_a_folder_changed_after_it_was_found_is_merged_as_found(sample_t39, tmp_path, listings):
    folder = shutil.copytree(sample_t39, tmp_path / "profile")
    profile = find_profile(folder)
    (folder / "extra-TP2.viztracer.json").write_text("{}")  # would be an unpaired rank now
    merged = merged_folder(profile, tmp_path / "cache", combined=False)
    assert [tag for tag, _, _ in merged.ranks] == ["TP0", "TP1"] and listings == [folder]
