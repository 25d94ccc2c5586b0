"""The packages a wheel installs: every package of the source tree. An editable install (the
README's, CI's) imports any package from the tree, listed in pyproject.toml or not; a wheel holds
only those listed (a wheel of 0.1.0 lacked tokentrace.runtime and failed on its first import)."""

from __future__ import annotations

import pytest

from support.paths import REPO

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def test_pyproject_lists_every_package_of_the_tree():
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "tokentrace").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
    assert config["package-dir"]["tokentrace.sql"] == "queries" and "tokentrace.sql" in listed
    assert listed - found == {"tokentrace.sql"}  # nothing listed that the tree lacks
