"""Profile folder -> rank pairs, by tokenspeed's file names.

``<profile_id>-<tag><stage>.viztracer.json[.gz]`` and
``<profile_id>-<tag><stage>.proton[.part_<N>].chrome_trace[.gz]``, where ``profile_id`` may
contain dashes (the tag is matched from the right) and ``tag`` is ``[DP<d>-][CP<c>-]TP<t>`` or
the legacy ``TP-<t>``. Anything ambiguous is an error, never a guess.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from tokentrace.errors import DiscoveryError, InputError
from tokentrace.sources.detect import TraceKind, sniff
from tokentrace.sources.rank_tags import TAG_PATTERN, RankTag

_NAME_RE = re.compile(
    rf"^(?P<profile>.+?)-{TAG_PATTERN}"
    r"\.(?P<kind>viztracer\.json|proton(?:\.part_(?P<part>\d+))?\.chrome_trace)(?:\.gz)?$"
)


class GpuFormat(str, enum.Enum):
    """What recorded a rank's GPU side."""

    PROTON = "proton"  # Triton Proton chrome trace(s): tokenspeed
    KINETO = "kineto"  # torch profiler (Kineto) chrome trace: vLLM, SGLang, tokenspeed


@dataclasses.dataclass(frozen=True)
class RankFiles:
    """The input files of one rank: one GPU trace and, when present, one VizTracer report.

    Attributes:
        profile_id: the profile id of the file names (``""`` for explicit unnamed files).
        tag: the rank.
        viztracer: the VizTracer report; ``None`` for a torch-profiler trace alone (its
            ``python_function`` events are then the host timeline).
        gpu: the GPU trace file(s): Proton parts in part order, or one Kineto trace.
        gpu_format: what wrote ``gpu``.
    """

    profile_id: str
    tag: RankTag
    viztracer: Path | None
    gpu: tuple[Path, ...]
    gpu_format: GpuFormat = GpuFormat.PROTON

    @property
    def first_input(self) -> Path:
        """The file that names the rank in messages: its VizTracer report, else its GPU trace."""
        return self.viztracer if self.viztracer is not None else self.gpu[0]


@dataclasses.dataclass(frozen=True)
class NamedFile:
    """A file whose name follows the convention."""

    path: Path
    profile_id: str
    tag: RankTag
    kind: str  # "viztracer" or "proton"
    part: int | None


def parse_name(path: Path) -> NamedFile | None:
    """Parses a tokenspeed trace file name; ``None`` for other files."""
    match = _NAME_RE.match(path.name)
    if not match:
        return None
    kind = "viztracer" if match["kind"].startswith("viztracer") else "proton"
    part = int(match["part"]) if match["part"] is not None else None
    return NamedFile(path, match["profile"], RankTag.from_match(match), kind, part)


def discover(folder: Path, profile_id: str | None = None) -> list[RankFiles]:
    """Finds every rank's file pair in ``folder``, sorted by rank.

    Args:
        folder: the profile output folder.
        profile_id: keep only this profile id (needed when the folder holds several).

    Raises:
        DiscoveryError: no trace files, several profile ids, unpaired files, two files for one rank.
        InputError: ``folder`` does not exist.
    """
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder; pass a profile folder or the trace files")
    named = [n for n in map(parse_name, sorted(folder.iterdir())) if n is not None]
    if profile_id is not None:
        named = [n for n in named if n.profile_id == profile_id]
    if not named:
        raise DiscoveryError(
            f"{folder}: no trace files named <profile_id>-<tag>.viztracer.json[.gz] / "
            "<profile_id>-<tag>.proton.chrome_trace[.gz]"
            + (f" for profile id {profile_id!r}" if profile_id else "")
            + "; pass the files explicitly: tokentrace merge VIZ.json PROTON.chrome_trace"
        )
    return pair_named(named, folder)


def pair_named(named: Sequence[NamedFile], where: Path | str) -> list[RankFiles]:
    """Groups named files into ranks; every rank needs one VizTracer and >= 1 Proton file."""
    ids = sorted({n.profile_id for n in named})
    if len(ids) > 1:
        raise DiscoveryError(
            f"{where}: several profile ids ({', '.join(ids)}); choose one with --profile-id ID"
        )
    by_rank: dict[RankTag, list[NamedFile]] = defaultdict(list)
    for item in named:
        by_rank[item.tag].append(item)
    return [_rank_files(ids[0], tag, by_rank[tag]) for tag in sorted(by_rank)]


def _rank_files(profile_id: str, tag: RankTag, files: list[NamedFile]) -> RankFiles:
    viz = [f.path for f in files if f.kind == "viztracer"]
    proton = sorted((f for f in files if f.kind == "proton"), key=lambda f: (f.part is not None, f.part or 0))
    if len(viz) > 1:
        raise DiscoveryError(f"two VizTracer files claim rank {tag}: {_names(viz)}; remove or move one")
    parts = [f.part for f in proton]
    if len(parts) != len(set(parts)) or (None in parts and len(parts) > 1):
        raise DiscoveryError(f"several Proton files claim rank {tag}: {_names(f.path for f in proton)}; remove or move the extra")
    if not viz:
        raise DiscoveryError(f"{proton[0].path}: no VizTracer file for rank {tag} (expected {profile_id}-{tag}.viztracer.json[.gz])")
    if not proton:
        raise DiscoveryError(f"{viz[0]}: no Proton file for rank {tag} (expected {profile_id}-{tag}.proton.chrome_trace[.gz])")
    return RankFiles(profile_id, tag, viz[0], tuple(f.path for f in proton))


def _names(paths) -> str:
    return ", ".join(str(Path(p).name) for p in paths)


def pair_explicit(paths: Sequence[Path]) -> list[RankFiles]:
    """Pairs files given on the command line: by name when all follow the convention, else
    one VizTracer report with its Proton file(s) (told apart by content).

    Raises:
        InputError: a file is missing.
        DiscoveryError: the files do not make rank pairs.
    """
    for path in paths:
        if not path.is_file():
            raise InputError(f"{path}: no such file; check the path")
    named = [parse_name(p) for p in paths]
    if all(named) and sum(n.kind == "viztracer" for n in named) > 1:  # type: ignore[union-attr]
        return pair_named(named, "the given files")  # type: ignore[arg-type]
    kinds = {p: sniff(p) for p in paths}
    viz = [p for p, k in kinds.items() if k is TraceKind.VIZTRACER]
    proton = [p for p, k in kinds.items() if k is not TraceKind.VIZTRACER]
    if len(viz) != 1 or not proton:
        raise DiscoveryError(
            "explicit files: give one VizTracer report and its Proton file(s) "
            "(tokentrace merge VIZ.json PROTON.chrome_trace), or a profile folder"
        )
    first = parse_name(viz[0])
    tag = first.tag if first else RankTag(tp=0)
    profile_id = first.profile_id if first else viz[0].name.split(".")[0]
    return [RankFiles(profile_id, tag, viz[0], tuple(proton))]
