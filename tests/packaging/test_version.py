"""The version is read from the installed metadata without importlib.metadata, the same as
importlib.metadata says: the first ``.dist-info`` or ``.egg-info`` on the path decides."""

from __future__ import annotations

import sys
from importlib.metadata import version

from tokentrace import version as version_module


def test_the_version_is_what_importlib_metadata_says():
    version_module.tool_version.cache_clear()
    assert version_module.tool_version() == version("tokentrace")
    assert version_module._dist_info_version() == version("tokentrace")


def _dist(folder, name, text):
    (folder / name).mkdir(parents=True)
    (folder / name / "METADATA").write_text(text)


def test_the_first_metadata_on_the_path_decides(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    _dist(first, "Tokentrace-9.8.7.dist-info", "Metadata-Version: 2.1\nName: tokentrace\nVersion: 9.8.7\n\nbody\n")
    _dist(second, "tokentrace-1.0.0.dist-info", "Name: tokentrace\nVersion: 1.0.0\n")
    (first / "tokentrace-view-x.html").write_text("")  # a name that is no metadata
    _dist(first, "tokentrace_extra-1.0.dist-info", "Version: 5\n")  # another project
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(first), str(second)])
    assert version_module._dist_info_version() == "9.8.7"


def test_an_egg_info_first_decides_as_for_importlib(tmp_path, monkeypatch):
    (tmp_path / "tokentrace.egg-info").mkdir()
    (tmp_path / "tokentrace.egg-info" / "PKG-INFO").write_text("Metadata-Version: 2.1\nVersion: 2.0\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert version_module._dist_info_version() == version("tokentrace") == "2.0"


def test_metadata_without_a_version_is_left_to_importlib(tmp_path, monkeypatch):
    _dist(tmp_path, "tokentrace-1.dist-info", "Name: tokentrace\n\nVersion: 3\n")  # in the body
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert version_module._dist_info_version() is None
