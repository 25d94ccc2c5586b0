"""Profile folder -> ranks, by the engines' file names.

A rank is one GPU trace (Proton part(s) or one torch-profiler/Kineto trace) plus at most one
VizTracer report. Names read (``[.gz]`` optional everywhere; tags: :mod:`.rank_tags`):

* tokenspeed: ``<profile_id>-<tag><stage>.viztracer.json``,
  ``<profile_id>-<tag><stage>.proton[.part_<N>].chrome_trace`` and the torch profiler's
  ``<profile_id>-<tag><stage>.trace.json``; ``profile_id`` may contain dashes (the tag is matched
  from the right), ``tag`` is ``[DP<d>-][CP<c>-]TP<t>`` or the legacy ``TP-<t>``.
* SGLang (``_ProfilerTorch.stop`` / ``SchedulerProfilerMixin.stop_profile``):
  ``[<prefix>-]<profile_id>-TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>][-<stage>].trace.json.gz``, stage
  ``EXTEND``/``DECODE`` (or ``prefill``/``decode``, read as EXTEND/DECODE); a VizTracer report
  beside it is ``<same stem>.viztracer.json``. Its ``<profile_id>-host.trace.json.gz`` is the
  TokenizerManager's own torch-profiler trace (``HostProfilerMixin``): another process, no rank,
  so it is never paired and never counts as a profile id.
* vLLM (``get_worker_rank_suffix`` + torch's ``tensorboard_trace_handler``):
  ``[<prefix>_]dp<d>_pp<p>_tp<t>_dcp<c>_ep<e>_rank<r>.<ns>.pt.trace.json.gz``; profile id = the
  prefix (``vllm`` without one); a VizTracer report is ``<same stem>[.<ns>].viztracer.json``.

A Proton trace needs its VizTracer report (Proton has no host timeline); a torch-profiler trace
is a rank alone too. Anything ambiguous is an error, never a guess. Proton's tree data
(``<profile_id>-<tag>.proton[.part_<N>].hatchet[_msgpack]``: Proton's default, and tokenspeed's
unless ``TOKENSPEED_KERNEL_PROFILE_DATA=trace``) is a rank's GPU file refused by name, with the
settings that record a trace (:func:`~.detect.hatchet_message`).

A folder with none of these names is read by content (:mod:`.kineto_ranks`): every torch-profiler
trace in it (torch's default ``<host>_<pid>.<ns>.pt.trace.json[.gz]``, or any ``*.json[.gz]`` with
Kineto's top keys) is a candidate, its rank taken from ``distributedInfo``. :func:`find_folder` is
the one step that does this and returns the ranks with their identity; commands reach it once,
through :func:`~tokentrace.sources.profile.find_profile`.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import warnings
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from tokentrace.errors import DiscoveryError, InputError, TokentraceWarning
from tokentrace.sources.detect import TraceKind, hatchet_message, is_hatchet_name, mismatch_message, sniff
from tokentrace.sources.kineto_identity import KinetoIdentity, read_identity
from tokentrace.sources.kineto_ranks import KinetoRanks, is_candidate, kineto_ranks
from tokentrace.sources.rank_tags import TAG_PATTERN, VLLM_TAG_PATTERN, RankTag

_NAME_RE = re.compile(
    rf"^(?P<profile>.+?)-{TAG_PATTERN}"
    r"\.(?P<kind>viztracer\.json|trace\.json|proton(?:\.part_(?P<part>\d+))?\.(?P<format>chrome_trace|hatchet(?:_msgpack)?))"
    r"(?:\.gz)?$"
)
_VLLM_RE = re.compile(
    rf"^(?:(?P<profile>.+)_)?{VLLM_TAG_PATTERN}(?:\.(?P<ns>\d+))?\.(?P<kind>pt\.trace\.json|viztracer\.json)(?:\.gz)?$"
)
_SGLANG_HOST_RE = re.compile(r"^(?P<profile>.+)-host\.trace\.json(?:\.gz)?$")
VLLM_DEFAULT_PROFILE_ID = "vllm"  # vLLM traces recorded without a profile prefix
_PATTERNS = (
    "<profile_id>-<tag>.viztracer.json[.gz] with <profile_id>-<tag>.proton.chrome_trace[.gz] or "
    "<profile_id>-<tag>.trace.json[.gz] (tokenspeed, SGLang), "
    "[<prefix>_]dp<d>_pp<p>_tp<t>_dcp<c>_ep<e>_rank<r>.<ns>.pt.trace.json[.gz] (vLLM), "
    "and no torch-profiler trace (<host>_<pid>.<ns>.pt.trace.json[.gz], or *.json[.gz] with "
    "traceEvents and deviceProperties or distributedInfo)"
)
_HOST_NOTE = (
    "SGLang's <profile_id>-host.trace.json.gz is the TokenizerManager's torch-profiler trace (another "
    "process, no rank): it is not merged"
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
        identity: what a torch-profiler trace says about its process (``distributedInfo``: rank,
            world size, process groups); ``None`` when not read (Proton, named files).
        windows: the rank's other profiler windows (earlier traces of the same process), not
            analysed; ``()`` for one window.
    """

    profile_id: str
    tag: RankTag
    viztracer: Path | None
    gpu: tuple[Path, ...]
    gpu_format: GpuFormat = GpuFormat.PROTON
    identity: KinetoIdentity | None = dataclasses.field(default=None, compare=False)
    windows: tuple[Path, ...] = dataclasses.field(default=(), compare=False)

    @property
    def first_input(self) -> Path:
        """The file that names the rank in messages: its VizTracer report, else its GPU trace."""
        return self.viztracer if self.viztracer is not None else self.gpu[0]


@dataclasses.dataclass(frozen=True)
class NamedFile:
    """A file whose name follows one of the conventions."""

    path: Path
    profile_id: str
    tag: RankTag
    kind: str  # "viztracer", "proton", "kineto" or "hatchet" (Proton's tree data: refused by name)
    part: int | None


def parse_name(path: Path) -> NamedFile | None:
    """Parses a tokenspeed, SGLang or vLLM trace file name; ``None`` for other files (SGLang's
    ``-host`` trace included: see :func:`is_sglang_host`)."""
    match = _NAME_RE.match(path.name)
    if match:
        kind = {"v": "viztracer", "t": "kineto", "p": "proton"}[match["kind"][0]]
        if match["format"] is not None and match["format"].startswith("hatchet"):
            kind = "hatchet"
        part = int(match["part"]) if match["part"] is not None else None
        return NamedFile(path, match["profile"], RankTag.from_match(match), kind, part)
    match = _VLLM_RE.match(path.name)
    if match:
        kind = "viztracer" if match["kind"].startswith("viztracer") else "kineto"
        profile_id = match["profile"] or VLLM_DEFAULT_PROFILE_ID
        return NamedFile(path, profile_id, RankTag.from_vllm(match), kind, None)
    return None


def is_sglang_host(path: Path) -> bool:
    """True for SGLang's ``<profile_id>-host.trace.json[.gz]`` (the TokenizerManager's trace)."""
    return _SGLANG_HOST_RE.match(path.name) is not None


@dataclasses.dataclass(frozen=True)
class FolderRanks:
    """A folder's ranks, found once (:func:`find_folder`).

    Attributes:
        folder: the folder read.
        ranks: every rank's files, sorted by rank, each with its identity where read.
        warnings: what the discovery has to say (CPU-only traces left out, windows, ranks
            numbered by name), emitted by :func:`discover`.
        left_out: trace files seen and not analysed (CPU-only traces).
    """

    folder: Path
    ranks: tuple[RankFiles, ...]
    warnings: tuple[str, ...] = ()
    left_out: tuple[Path, ...] = ()


def discover(folder: Path, profile_id: str | None = None) -> list[RankFiles]:
    """Finds every rank's files in ``folder``, sorted by rank; :func:`find_folder`'s warnings are
    emitted as :class:`~tokentrace.errors.TokentraceWarning` s.

    Args:
        folder: the profile output folder.
        profile_id: keep only this profile id (needed when the folder holds several).

    Raises:
        DiscoveryError: no trace files, several profile ids, unpaired files, two files for one rank.
        InputError: ``folder`` does not exist.
    """
    found = find_folder(folder, profile_id)
    for message in found.warnings:
        warnings.warn(message, TokentraceWarning, stacklevel=2)
    return list(found.ranks)


def find_folder(folder: Path, profile_id: str | None = None) -> FolderRanks:
    """The one discovery step: ``folder``'s ranks with their identity. By names first
    (tokenspeed, SGLang, vLLM); with none of those names, by content (:mod:`.kineto_ranks`).
    Commands call it once, through :func:`~tokentrace.sources.profile.find_profile`, and pass
    the profile down.

    Raises:
        DiscoveryError, InputError: as :func:`discover`.
    """
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder; pass a profile folder or the trace files")
    return _find(folder, sorted(folder.iterdir()), profile_id)


def _find(folder: Path, paths: list[Path], profile_id: str | None) -> FolderRanks:
    all_named = [n for n in map(parse_name, paths) if n is not None]
    named = all_named if profile_id is None else [n for n in all_named if n.profile_id == profile_id]
    if named:
        return FolderRanks(folder, tuple(pair_named(named, folder)))
    hosts = [p for p in paths if is_sglang_host(p)]
    candidates = [] if all_named else [p for p in paths if p not in hosts and is_candidate(p)]
    if candidates and profile_id in (None, folder.name):
        return from_content(kineto_ranks(candidates, folder), folder.name, folder)
    hatchets = [p for p in paths if is_hatchet_name(p)]
    if hatchets:  # Proton's default output (data="tree"), under any name: say what records a trace
        raise DiscoveryError(hatchet_message(hatchets[0]))
    if hosts:
        raise DiscoveryError(
            f"{folder}: only SGLang host traces ({_names(hosts)}); {_HOST_NOTE}. Record the "
            "scheduler ranks too (POST /start_profile writes <profile_id>-TP-<t>.trace.json.gz)"
        )
    raise DiscoveryError(
        f"{folder}: no trace files named {_PATTERNS}"
        + (f" for profile id {profile_id!r}" if profile_id else "")
        + "; pass the files explicitly: tokentrace merge VIZ.json GPU_TRACE"
    )


def from_content(found: KinetoRanks, profile_id: str, folder: Path) -> FolderRanks:
    """The ranks that :func:`~.kineto_ranks.kineto_ranks` found, as each rank's files."""
    ranks = tuple(RankFiles(profile_id, r.tag, None, (r.trace,), GpuFormat.KINETO, r.identity, r.windows)
                  for r in found.ranks)
    return FolderRanks(folder, ranks, found.warnings, found.left_out)


def pair_named(named: Sequence[NamedFile], where: Path | str) -> list[RankFiles]:
    """Groups named files into ranks: each has one GPU trace and, for Proton, one VizTracer report."""
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
    kineto = [f.path for f in files if f.kind == "kineto"]
    proton = sorted((f for f in files if f.kind == "proton"), key=lambda f: (f.part is not None, f.part or 0))
    hatchet = [f.path for f in files if f.kind == "hatchet"]
    if hatchet and not proton and not kineto:  # the rank's only GPU file is Proton's tree data
        raise DiscoveryError(hatchet_message(hatchet[0]))
    if len(viz) > 1:
        raise DiscoveryError(f"two VizTracer files claim rank {tag}: {_names(viz)}; remove or move one")
    if proton and kineto:
        raise DiscoveryError(
            f"rank {tag} has both a Proton and a torch-profiler trace: {_names([*kineto, *(f.path for f in proton)])}; "
            "a rank takes one GPU trace: move one of them out of the folder"
        )
    if len(kineto) > 1:
        raise DiscoveryError(
            f"several torch-profiler traces claim rank {tag}: {_names(kineto)} (each profiler start/stop "
            "writes one); keep one per rank in the folder, or pass the files explicitly"
        )
    if kineto:
        return RankFiles(profile_id, tag, viz[0] if viz else None, (kineto[0],), GpuFormat.KINETO)
    parts = [f.part for f in proton]
    if len(parts) != len(set(parts)) or (None in parts and len(parts) > 1):
        raise DiscoveryError(f"several Proton files claim rank {tag}: {_names(f.path for f in proton)}; remove or move the extra")
    if not viz:
        raise DiscoveryError(
            f"{proton[0].path}: no VizTracer file for rank {tag} (expected {profile_id}-{tag}.viztracer.json[.gz]; "
            "a Proton trace has no host timeline)"
        )
    if not proton:
        raise DiscoveryError(
            f"{viz[0]}: no Proton file for rank {tag} (expected {profile_id}-{tag}.proton.chrome_trace[.gz]) "
            f"and no torch-profiler trace ({profile_id}-{tag}.trace.json[.gz])"
        )
    return RankFiles(profile_id, tag, viz[0], tuple(f.path for f in proton))


def _names(paths) -> str:
    return ", ".join(str(Path(p).name) for p in paths)


def pair_explicit(paths: Sequence[Path]) -> list[RankFiles]:
    """Pairs files given on the command line: by name when all follow a convention and name
    several ranks, else told apart by content: one VizTracer report with its Proton file(s), or
    one torch-profiler trace with or without its VizTracer report.

    Raises:
        InputError: a file is missing.
        DiscoveryError: the files do not make ranks.
    """
    for path in paths:
        if not path.is_file():
            raise InputError(f"{path}: no such file; check the path")
    hosts = [p for p in paths if is_sglang_host(p)]
    if hosts:
        raise DiscoveryError(
            f"{_names(hosts)}: {_HOST_NOTE}; pass the scheduler ranks' <profile_id>-TP-<t>.trace.json.gz instead"
        )
    named = [parse_name(p) for p in paths]
    by_name = [n.kind for n in named if n is not None]
    if len(by_name) == len(paths) and (by_name.count("viztracer") > 1 or by_name.count("kineto") > 1):
        return pair_named(named, "the given files")  # type: ignore[arg-type]
    kinds = {p: _content_kind(p, n) for p, n in zip(paths, named)}
    for path, kind in kinds.items():
        if kind in (TraceKind.MERGED, TraceKind.CHROME_ARRAY):
            raise InputError(mismatch_message(path, TraceKind.VIZTRACER if kind is TraceKind.MERGED
                                              else TraceKind.PROTON, kind))
    viz = [p for p, k in kinds.items() if k is TraceKind.VIZTRACER]
    kineto = [p for p, k in kinds.items() if k is TraceKind.KINETO]
    proton = [p for p, k in kinds.items() if k not in (TraceKind.VIZTRACER, TraceKind.KINETO)]
    if kineto:
        return _explicit_kineto(viz, kineto, proton)
    if len(viz) != 1 or not proton:
        raise DiscoveryError(
            "explicit files: give one VizTracer report and its Proton file(s) "
            "(tokentrace merge VIZ.json PROTON.chrome_trace), one torch-profiler trace with or "
            "without its VizTracer report (tokentrace merge [VIZ.json] TRACE.json.gz), or a profile folder"
        )
    profile_id, tag = _identity(viz[0])
    return [RankFiles(profile_id, tag, viz[0], tuple(proton))]


def _content_kind(path: Path, named: NamedFile | None) -> TraceKind:
    """The kind by content; a torch-profiler name decides when the content cannot (empty or
    cut files: the reader then says what is wrong)."""
    kind = sniff(path)
    if kind in (TraceKind.EMPTY, TraceKind.UNKNOWN) and named is not None and named.kind == "kineto":
        return TraceKind.KINETO
    return kind


def _explicit_kineto(viz: list[Path], kineto: list[Path], other: list[Path]) -> list[RankFiles]:
    if other:
        raise DiscoveryError(
            f"explicit files: {_names(kineto)} is a torch-profiler trace and {_names(other)} is not "
            "(a Proton trace?); a rank takes one GPU trace: give the torch-profiler trace with at most "
            "its VizTracer report, or the Proton file(s) with theirs"
        )
    if len(kineto) > 1 and not viz:  # several ranks (or windows): told apart by content
        found = from_content(kineto_ranks(kineto, "the given files"), _common_id(kineto), kineto[0].parent)
        for message in found.warnings:
            warnings.warn(message, TokentraceWarning, stacklevel=3)
        return list(found.ranks)
    if len(kineto) > 1:
        raise DiscoveryError(
            f"explicit files: several torch-profiler traces ({_names(kineto)}) with a VizTracer report; "
            "a report pairs with one trace: give one, or pass the traces alone (one rank each)"
        )
    if len(viz) > 1:
        raise DiscoveryError(
            f"explicit files: two VizTracer reports ({_names(viz)}) for one torch-profiler trace; give one"
        )
    profile_id, tag = _identity(viz[0] if viz else kineto[0])
    identity = None
    named = parse_name(kineto[0])
    if named is not None:  # the trace's name may carry the rank when the report's does not
        if viz and parse_name(viz[0]) is None:
            profile_id, tag = named.profile_id, named.tag
    elif parse_name(viz[0] if viz else kineto[0]) is None:  # no rank in any name: the trace's own
        identity = read_identity(kineto[0], gpu=False)
        if identity.rank is not None:
            tag = RankTag(tp=identity.rank, global_rank=identity.rank)
    return [RankFiles(profile_id, tag, viz[0] if viz else None, (kineto[0],), GpuFormat.KINETO, identity)]


def _common_id(paths: Sequence[Path]) -> str:
    """The profile id of explicit traces of several ranks: their folder's name."""
    return Path(paths[0]).resolve().parent.name or Path(paths[0]).name.split(".")[0]


def _identity(path: Path) -> tuple[str, RankTag]:
    """Profile id and tag from a file's name; unnamed: its stem and ``TP0``."""
    named = parse_name(path)
    if named is not None:
        return named.profile_id, named.tag
    return path.name.split(".")[0], RankTag(tp=0)
