"""The journal behind all-or-nothing commands (tokentrace.runtime.journal): what a failed command wrote
goes, what it replaced comes back, whether written atomically or not."""

from __future__ import annotations

import pytest

from tokentrace.runtime.files import write_bytes
from tokentrace.runtime.journal import journal


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_failure_restores_replaced_files_and_removes_new_ones(tmp_path):
    (tmp_path / "tables").mkdir()
    write_bytes(tmp_path / "tables" / "a.parquet", b"old a")
    write_bytes(tmp_path / "tables" / "b.parquet", b"old b")
    write_bytes(tmp_path / "report.html", b"old report")
    before = _files(tmp_path)
    with pytest.raises(RuntimeError), journal() as written:
        written.track(tmp_path / "report.html")
        written.track_tree(tmp_path / "tables")
        write_bytes(tmp_path / "tables" / "a.parquet", b"new a")  # atomic
        (tmp_path / "tables" / "c.png").write_bytes(b"new c")  # written in place (savefig)
        write_bytes(tmp_path / "new" / "deep" / "x.json", b"x")  # folders made on the way
        raise RuntimeError("the command failed")
    assert _files(tmp_path) == before
    assert not (tmp_path / "new").exists()


def test_a_success_keeps_what_was_not_written_again(tmp_path):
    (tmp_path / "tables").mkdir()
    write_bytes(tmp_path / "tables" / "a.parquet", b"old a")
    write_bytes(tmp_path / "tables" / "b.parquet", b"old b")
    with journal() as written:
        written.track_tree(tmp_path / "tables")
        write_bytes(tmp_path / "tables" / "a.parquet", b"new a")
    assert _files(tmp_path) == {"tables/a.parquet": b"new a", "tables/b.parquet": b"old b"}


def test_nested_journals_fold_into_the_outer_one_unless_independent(tmp_path):
    with pytest.raises(KeyboardInterrupt), journal():
        with journal():
            write_bytes(tmp_path / "inner.json", b"1")
        with journal(independent=True):
            write_bytes(tmp_path / "entry" / "manifest.json", b"2")
        raise KeyboardInterrupt
    assert _files(tmp_path) == {"entry/manifest.json": b"2"}  # a complete cache entry stays
