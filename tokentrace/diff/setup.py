"""What each side of a diff ran on: GPU model, driver and runtime versions, world size, read
from the raw inputs' heads (never from the merged events: the merge keeps none of it).

A torch-profiler (Kineto) trace opens with its top-level keys before ``traceEvents``:
``deviceProperties`` (one entry per visible device, ``name`` as ``NVIDIA A100-PG509-200``),
``distributedInfo`` (``rank``, ``world_size``; at the very end in 2022 traces), and since 2024
``cuda_driver_version`` / ``cuda_runtime_version`` (``13000``: 13.0) or ROCm's
``hip_runtime_version`` (``60443483``: 6.4.43483). Proton and VizTracer traces carry none of these:
a side without a fact says nothing about it.

The inputs are found from what was given: a profile folder (its discovered GPU traces), a raw
Kineto trace, a merged trace (the ``tokentrace`` block at its end names the inputs), an
``analyze`` output (the trace its tables name), or an open trace (its source).
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pandas as pd

from tokentrace.errors import TokentraceError
from tokentrace.sources.detect import TraceKind, sniff
from tokentrace.sources.fileio import read_head, read_tail

_EVENTS_RE = re.compile(rb'"traceEvents"\s*:')
_BLOCK_RE = re.compile(rb'"tokentrace"\s*:\s*')
# words before a GPU's model in deviceProperties names: "NVIDIA A100-...", "Tesla V100-...",
# "AMD Instinct MI300X", "NVIDIA GeForce RTX 4090"
_BRANDS = {"nvidia", "tesla", "amd", "instinct", "geforce", "radeon", "quadro"}


def read_setup(source: str | Path | None) -> dict:
    """``{"gpu": [names], "cuda_driver": ..., "cuda_runtime": ..., "hip_runtime": ...,
    "world_size": int}`` of the run at ``source``: only the facts some input states; ``{}``
    when none does or the inputs cannot be found (a fact is context: never an error)."""
    facts: dict = {}
    for trace in _inputs(Path(source)) if source else []:
        for key, value in _trace_facts(trace).items():
            if key == "gpu":
                facts.setdefault("gpu", [])
                facts["gpu"] += [name for name in value if name not in facts["gpu"]]
            elif key == "world_size":
                facts[key] = max(facts.get(key, 0), value)
            else:
                facts.setdefault(key, value)
    return facts


def _inputs(path: Path) -> list[Path]:
    """The raw GPU traces behind ``path`` (profile folder, trace file, analyze output)."""
    try:
        if (path / "tables" / "idle_budget.parquet").is_file():
            from tokentrace.catalog.export import read_metadata

            trace = read_metadata(path / "tables" / "idle_budget.parquet").get("trace")
            return _inputs(Path(trace)) if trace and Path(trace) != path else []
        if path.is_dir():
            from tokentrace.merge import find_profile

            with warnings.catch_warnings():  # discovery's warnings were given by the merge
                warnings.simplefilter("ignore")
                return [rank.gpu[0] for rank in find_profile(path).ranks if rank.gpu]
        if not path.is_file():
            return []
        kind = sniff(path)
        if kind is TraceKind.KINETO:
            return [path]
        if kind is TraceKind.MERGED:
            return [Path(p) for p in _merged_inputs(path) if Path(p) != path and Path(p).is_file()]
    except (TokentraceError, OSError, ValueError):
        return []
    return []


def _merged_inputs(path: Path) -> list[str]:
    """The GPU inputs a merged file names in its ``tokentrace`` block (written last); ``[]``
    for a gzip file, whose end is known only once inflated."""
    tail = read_tail(path, 1 << 20)
    starts = list(_BLOCK_RE.finditer(tail))
    if not starts:
        return []
    try:
        block, _ = json.JSONDecoder().raw_decode(tail[starts[-1].end():].decode("utf-8", "replace"))
    except ValueError:
        return []
    return [gpu for rank in block.get("ranks", []) if isinstance(rank, dict)
            for gpu in rank.get("gpu") or [] if isinstance(gpu, str)]


def _trace_facts(path: Path) -> dict:
    """A Kineto trace's top-level facts (its keys before ``traceEvents``)."""
    head = read_head(path)
    match = _EVENTS_RE.search(head)
    top: dict = {}
    if match:
        try:
            top = json.loads(head[:match.start()].rstrip().rstrip(b",") + b"}")
        except ValueError:
            top = {}
    facts: dict = {}
    names = [d.get("name") for d in top.get("deviceProperties") or [] if isinstance(d, dict)]
    if names := list(dict.fromkeys(n.strip() for n in names if isinstance(n, str) and n.strip())):
        facts["gpu"] = names
    for key, text in (("cuda_driver_version", _cuda_version), ("cuda_runtime_version", _cuda_version),
                      ("hip_runtime_version", _hip_version)):
        if isinstance(top.get(key), int) and top[key] > 0:
            facts[key.removesuffix("_version")] = text(top[key])
    info = top.get("distributedInfo")
    if not isinstance(info, dict):
        from tokentrace.sources.kineto_identity import read_identity

        world = read_identity(path, gpu=False).world_size
    else:
        world = info.get("world_size")
    if isinstance(world, int) and world > 0:
        facts["world_size"] = world
    return facts


def _cuda_version(value: int) -> str:
    """CUDA's ``1000 * major + 10 * minor``: ``12040`` -> ``12.4``."""
    return f"{value // 1000}.{value % 1000 // 10}"


def _hip_version(value: int) -> str:
    """HIP's ``10^7 * major + 10^5 * minor + patch``: ``60443483`` -> ``6.4.43483``."""
    return f"{value // 10_000_000}.{value // 100_000 % 100}.{value % 100_000}"


def short_gpu(name: str) -> str:
    """The model without brand words and board suffix: ``NVIDIA A100-PG509-200`` -> ``A100``,
    ``Tesla V100-SXM2-16GB`` -> ``V100``, ``AMD Instinct MI300X`` -> ``MI300X``."""
    words = name.split()
    while len(words) > 1 and words[0].lower() in _BRANDS:
        words = words[1:]
    return " ".join(words).split("-")[0].strip() or name


def gpu_text(names: list[str], other: list[str]) -> str:
    """The side's GPUs as the verdict names them: short names, or the full names (brands
    dropped) where the short ones would not tell the two sides apart."""
    short, other_short = [short_gpu(n) for n in names], [short_gpu(n) for n in other]
    if short == other_short and names != other:
        short = [" ".join(w for w in n.split() if w.lower() not in _BRANDS) or n for n in names]
    return " + ".join(short)


# setup_diff's facts, in order: (fact, the read_setup key); profiler, step and world size
# come from the tables where the inputs do not say.
VERSION_FACTS = (("CUDA driver", "cuda_driver"), ("CUDA runtime", "cuda_runtime"),
                 ("HIP runtime", "hip_runtime"))


def run_facts(setup: dict, tables: dict) -> dict[str, str]:
    """``{fact: text}`` of one run: ``GPU``, versions, ``world size`` (``distributedInfo``, else
    the ranks with GPU activity), ``profiler`` (``trace_health.gpu_format``), ``step`` (the
    step names of ``rank_summary``; ``none`` without steps). A fact no input states is absent."""
    facts = {}
    if setup.get("gpu"):
        facts["GPU"] = " + ".join(setup["gpu"])
    for fact, key in VERSION_FACTS:
        if setup.get(key):
            facts[fact] = setup[key]
    ranks = tables["gpu_windows"]["rank"].nunique()
    if setup.get("world_size") or ranks:
        facts["world size"] = str(setup.get("world_size") or ranks)
    formats = sorted({f for f in tables["trace_health"]["gpu_format"] if isinstance(f, str) and f})
    if formats:
        facts["profiler"] = ", ".join(formats)
    summary = tables["rank_summary"]
    names = sorted({n.split(" (")[0] for n, s in zip(summary["step_name"], summary["steps"])
                    if isinstance(n, str) and n and s and s > 0})
    facts["step"] = ", ".join(names) or "none"
    return facts


def setup_diff(before, after) -> pd.DataFrame:
    """One row per fact either run states: ``fact``, ``before``, ``after`` (NULL where that
    run's inputs do not say), ``same`` (NULL unless both say)."""
    old, new = run_facts(before.setup, before.tables), run_facts(after.setup, after.tables)
    rows = [{"fact": fact, "before": old.get(fact), "after": new.get(fact),
             "same": None if fact not in old or fact not in new else old[fact] == new[fact]}
            for fact in ("GPU", *(f for f, _ in VERSION_FACTS), "world size", "profiler", "step")
            if fact in old or fact in new]
    return pd.DataFrame(rows, columns=["fact", "before", "after", "same"]).astype({"same": "boolean"})


def setup_line(setup: pd.DataFrame) -> list[str]:
    """``not like for like: A100 vs V100, world size 8 vs 2``: the facts both runs state and
    that differ; nothing when none does."""
    parts = []
    for _, row in setup[setup["same"].fillna(True) == False].iterrows():  # noqa: E712 (NA-aware)
        if row["fact"] == "GPU":
            old, new = row["before"].split(" + "), row["after"].split(" + ")
            parts.append(f"{gpu_text(old, new)} vs {gpu_text(new, old)}")
        else:
            parts.append(f"{row['fact']} {row['before']} vs {row['after']}")
    return [f"not like for like: {', '.join(parts)}"] if parts else []
