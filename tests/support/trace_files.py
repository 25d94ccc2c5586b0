"""Reading the JSON trace files in tests (plain or gzip)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def load_json(path: Path):
    """Loads a plain or gzip JSON file."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rb") as handle:
        return json.load(handle)


def load_json_documents(path: Path) -> list:
    """Every JSON document of a plain or gzip file, in order: Proton of triton 3.6 writes one per
    CUDA stream into one chrome trace."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    decoder, documents, at = json.JSONDecoder(), [], 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
    return documents
