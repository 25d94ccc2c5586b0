"""notebooks/stall_analysis.ipynb runs top to bottom (nbclient, kernel `python3` of this
environment) on a copy of the bundled sample, and its outputs show the injected stalls."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from support.folder_state import folder_state

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "stall_analysis.ipynb"


def test_notebook_is_stored_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_notebook_executes_and_shows_the_stalls(sample_t39, tmp_path, monkeypatch):
    profile = shutil.copytree(sample_t39, tmp_path / "profile")
    before = folder_state(profile)
    monkeypatch.setenv("TOKENTRACE_PROFILE", str(profile))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    text = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for out in cell.outputs)
    assert "host_stall cost" in text and "on rank TP0" in text and "on rank TP1" in text
    assert "TP0: GPU idle" in text and "(+0.0 points)" in text  # the diff cell: a run against itself
    images = [out for cell in notebook.cells if cell.cell_type == "code"
              for out in cell.outputs if "image/png" in out.get("data", {})]
    assert len(images) == 3
    assert folder_state(profile) == before  # the merge went to the user cache, nothing here
