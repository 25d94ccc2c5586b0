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
