"""Whose files a recording writes, and their names.

The rank comes from ``torch.distributed`` when it is initialised when recording starts, else
from the caller (``rank=``, ``--rank``), else from ``$RANK`` (torchrun sets it in each worker),
else 0. The names are the ones discovery reads (:mod:`tokentrace.sources.discover`):
``<profile_id>-TP<rank>.viztracer.json`` beside ``<profile_id>-TP<rank>.trace.json`` (torch
profiler) or ``<profile_id>-TP<rank>.proton.chrome_trace`` (Proton).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from tokentrace.record.options import RecordError, RecordOptions


@dataclasses.dataclass(frozen=True)
class RankPaths:
    """The files of one rank's recording."""

    # The rank in the names.
    rank: int
    # <out>/<profile_id>-TP<rank>: every file of the rank begins with it.
    base: Path
    # The GPU profiler ("torch" or "proton").
    gpu: str

    @property
    def host(self) -> Path:
        """VizTracer's report."""
        return self.base.with_name(self.base.name + ".viztracer.json")

    @property
    def proton_name(self) -> Path:
        """The name given to ``proton.start``, which adds ``.chrome_trace`` to it."""
        return self.base.with_name(self.base.name + ".proton")

    @property
    def gpu_trace(self) -> Path:
        """The GPU profiler's trace."""
        if self.gpu == "proton":
            return self.proton_name.with_name(self.proton_name.name + ".chrome_trace")
        return self.base.with_name(self.base.name + ".trace.json")

    def existing(self) -> list[Path]:
        """This rank's files already in the folder, of any profiler (an earlier recording's)."""
        folder, stem = self.base.parent, self.base.name + "."
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir() if p.name.startswith(stem)
                      and (".viztracer.json" in p.name or ".trace.json" in p.name or ".proton" in p.name))


def current_rank(given: int | None) -> int:
    """The rank of this process: ``torch.distributed``'s when initialised (read without importing
    torch: a program that never imported it has not initialised it), else ``given``, else
    ``$RANK``, else 0."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    if given is not None:
        return given
    env = os.environ.get("RANK", "")
    return int(env) if env.isdigit() else 0


def rank_paths(options: RecordOptions, rank: int) -> RankPaths:
    """The files of ``rank``, in a folder that exists and holds none of them yet.

    Raises:
        RecordError: the folder cannot be made, or already holds this rank's files.
    """
    out = Path(os.path.abspath(options.out))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecordError(f"{out}: cannot make the profile folder ({exc.strerror})") from None
    paths = RankPaths(rank, out / f"{options.name}-TP{rank}", options.gpu)
    found = paths.existing()
    if found:
        raise RecordError(f"{out} already holds rank {rank}'s files of profile {options.name!r} "
                          f"({', '.join(p.name for p in found)}); record into a new folder, or move them")
    return paths
