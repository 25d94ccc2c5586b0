"""Issue 31, data loss: tokentrace removes only what it wrote. A profile folder's
``.tokentrace-cache`` that is a link to another folder, a cache folder the user named
(``cache_dir=``; earlier releases' ``analyze -o OUT/merged``), the user cache's ``annotated/``: the
user's folders and files there stay, whatever their names, ages or contents; and the trace
``view`` serves is sent whole while it is replaced."""

from __future__ import annotations

import json
import os
import threading
import time
from http.client import HTTPConnection, IncompleteRead

import pytest

from support.hostile import aged_sample
from tokentrace.merge import cache
from tokentrace.view import TraceServer
from tokentrace.view.prepare import KEEP_COPIES, _drop_old_copies

TWO_HOURS = 2 * 3600.0


@pytest.fixture()
def profile(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENTRACE_CACHE_DIR", str(tmp_path / "user-cache"))
    return aged_sample(tmp_path)


def _users_folders(parent):
    """Folders a user keeps: one plain, one named like an entry with a manifest of its own, and
    more than a cache keeps; all older than a partial entry may be."""
    made = []
    for name, manifest in [("results", None), ("0123456789abcdef", {"key": "mine"}),
                           *[(f"{i:016x}", {"runs": i}) for i in range(cache.KEEP_ENTRIES + 2)]]:
        folder = parent / name
        folder.mkdir(parents=True)
        (folder / "notes.txt").write_text("keep me")
        if manifest is not None:
            (folder / cache.MANIFEST).write_text(json.dumps(manifest))
        stamp = time.time() - TWO_HOURS
        for path in (*folder.iterdir(), folder):
            os.utime(path, (stamp, stamp))
        made.append(folder)
    return made


def _all_there(folders):
    return [f.name for f in folders if not (f / "notes.txt").is_file()] == []


def test_a_linked_profile_cache_leads_nowhere(profile, tmp_path):
    sibling = tmp_path / "sibling"
    kept = _users_folders(sibling)
    (profile / cache.CACHE_DIR_NAME).symlink_to(sibling)
    merged = cache.merged_folder(profile)
    assert _all_there(kept)  # before: every folder of the sibling was removed
    assert merged.folder.parent == tmp_path / "user-cache" / "merged"
    assert sorted(p.name for p in sibling.iterdir()) == sorted(f.name for f in kept)


@pytest.mark.parametrize("combined", [False, True])
def test_a_named_cache_folder_keeps_the_users_folders(profile, tmp_path, combined):
    root = tmp_path / "out" / "merged"  # cache_dir= (earlier releases: analyze -o out)
    kept = _users_folders(root)
    (root / "0000000000000042").symlink_to(tmp_path / "sibling", target_is_directory=True)
    _users_folders(tmp_path / "sibling")
    merged = cache.merged_folder(profile, root, combined=combined)
    assert _all_there(kept) and _all_there(list((tmp_path / "sibling").iterdir()))
    assert (merged.folder / cache.ENTRY_MARK).read_text() == merged.folder.name


@pytest.mark.slow
def test_its_own_entries_are_still_pruned(profile, tmp_path):
    root = tmp_path / "merged"
    kept = _users_folders(root)
    for offset in range(cache.KEEP_ENTRIES + 2):
        from tokentrace.options import MergeOptions

        cache.merged_folder(profile, root, MergeOptions(align="offset", offset_us=72198000000.0 + offset),
                            combined=False)
        time.sleep(0.02)
    entries = [p for p in root.iterdir() if (p / cache.ENTRY_MARK).is_file()]
    assert len(entries) == cache.KEEP_ENTRIES and _all_there(kept)


def test_annotated_copies_leave_the_users_files(tmp_path):
    folder = tmp_path / "annotated"
    folder.mkdir()
    users = [folder / "run.json", folder / "notes.txt"]
    copies = [folder / f"run.{i:016x}.json" for i in range(KEEP_COPIES + 2)]
    for age, path in enumerate([*users, *copies]):
        path.write_text("{}")
        stamp = time.time() - TWO_HOURS + age
        os.utime(path, (stamp, stamp))
    _drop_old_copies(folder, keep=copies[-1])
    assert all(p.is_file() for p in users)  # before: the oldest files went, the user's first
    assert sorted(p for p in copies if p.is_file()) == sorted(copies[-KEEP_COPIES:])


def test_the_served_trace_is_whole_while_it_is_replaced(tmp_path):
    served = tmp_path / "trace.json"
    small, large = b'{"traceEvents": []}', b'{"traceEvents": [' + b" " * 300_000 + b"]}"
    served.write_bytes(small)
    stop = threading.Event()

    def replace_again_and_again():
        for turn in range(10**6):
            if stop.is_set():
                return
            staged = tmp_path / f"staged-{turn % 2}"
            staged.write_bytes(large if turn % 2 else small)
            os.replace(staged, served)

    swapper = threading.Thread(target=replace_again_and_again)
    with TraceServer(served, 0).start() as server:
        swapper.start()
        try:
            bad = 0
            for _ in range(300):
                connection = HTTPConnection("127.0.0.1", server.port, timeout=30)
                try:
                    connection.request("GET", f"/localtrace?token={server.token}")
                    response = connection.getresponse()
                    length = int(response.getheader("Content-Length"))
                    body = response.read()
                    bad += body not in (small, large) or len(body) != length
                except (OSError, IncompleteRead):
                    bad += 1
                finally:
                    connection.close()
        finally:
            stop.set()
            swapper.join()
    assert bad == 0  # before: responses cut short or of the wrong length
