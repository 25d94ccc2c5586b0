"""Writes every merged output and every bundled query's rows for the real trace sets to a folder,
so two versions of tokentrace can be compared byte for byte (``diff -r A B``).

Usage: python benchmarks/snapshot_outputs.py OUT [SET ...]
       (default sets: tests/data/sample_t39_tp2 tests/data/sample_t36_tp2
        ../shared/traces/t39_tp2 ../shared/traces/t36_tp2)

Per set: each rank's merged file and the ``--combine`` file (as written), and for the combined
file every bundled query with its default parameters, as CSV (rows sorted as the SQL orders them).
Used once per restructuring: run it with the old and the new code and diff the folders.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SETS = [ROOT / "tests/data/sample_t39_tp2", ROOT / "tests/data/sample_t36_tp2",
                ROOT.parent / "shared/traces/t39_tp2", ROOT.parent / "shared/traces/t36_tp2"]


def snapshot(folder: Path, out: Path) -> None:
    """Merges ``folder`` (per rank and combined) into ``out`` and writes each query's CSV."""
    out.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-c", "import sys; from tokentrace.cli import main; sys.argv[0] = 'tokentrace'; main()"]
    subprocess.run([*cli, "merge", str(folder), "-o", str(out / "ranks")], check=True)
    combined = out / "combined.merged.json"
    subprocess.run([*cli, "merge", str(folder), "--combine", "-o", str(combined)], check=True)
    names = subprocess.run([*cli, "queries", "--names"], check=False, capture_output=True,
                           text=True).stdout.split()
    if not names:  # older CLIs have no --names: read the folder of bundled queries
        names = sorted(p.stem for p in (ROOT / "queries").glob("*.sql"))
    for name in names:
        subprocess.run([*cli, "query", name, str(combined), "-o", str(out / f"{name}.csv")],
                       check=True)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out, sets = Path(argv[0]), [Path(a) for a in argv[1:]] or DEFAULT_SETS
    warnings.simplefilter("ignore")
    for folder in sets:
        if folder.is_dir():
            print(f"{folder.name} ...", flush=True)
            snapshot(folder, out / folder.name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
