"""``report.html``: one self-contained page (inline CSS, plots as inline SVG, no scripts, no
network) with the summary per rank, health warnings, the plots and the top stalls per rank.
Times are shown in ms (:func:`tokentrace.units.format_ms`); the Parquet tables next to it keep
nanoseconds. Formatting only: every row and figure comes from the query tables."""

from __future__ import annotations

import html
import re
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from tokentrace import gap_classes, idle_categories
from tokentrace.report.kernel_names import display_name
from tokentrace.report.tables import budget_column, health_summary, of_ranks
from tokentrace.runtime.files import write_bytes
from tokentrace.units import format_ms

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
color:#222;max-width:1400px}
h1{font-size:24px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;overflow-wrap:anywhere}
th{background:#f0f3f7}
td:first-child,th:first-child{text-align:left}
.kernels td:nth-child(2),.kernels th:nth-child(2){text-align:left}
.warn{background:#fff4e5;border-left:4px solid #ff9800;padding:6px 10px;margin:4px 0}
.ok{background:#e8f5e9;border-left:4px solid #4caf50;padding:6px 10px}
.cause{font-size:16px;background:#fdecea;border-left:4px solid #d62728;padding:8px 12px;
margin:6px 0}
figure{margin:6px 0}figure svg{border:1px solid #eee}
code{background:#f4f4f4;padding:1px 4px}
"""

PLOT_TITLES = {"timeline": "GPU timeline per rank", "idle_budget": "Where the GPU idle time went",
               "stall_profile": "Where the host was during the stalls (self time, not causes)",
               "step_breakdown": "Step breakdown", "rank_skew": "Rank skew",
               "idle_heatmap": "GPU idle per rank and step"}


def write_report_html(path: Path, source, trace: Path, results: dict, computed: dict,
                      plots: dict[str, Path], warnings: list[str], skipped: list[str],
                      detail: list[str] | None = None, annotated: list[Path] | None = None) -> Path:
    """Writes the report; returns its path.

    Every rank is in the summary table (most idle first) and the heatmap; the cause lines and
    the per-rank tables show the ``detail`` ranks (default: all), so 64 ranks stay readable.
    ``annotated``: the annotated traces the run writes beside the report; the report names the
    ``tokentrace view`` command that serves them at once (:func:`view_commands`).
    """
    summary = computed["summary"]
    detail = list(summary["rank"]) if detail is None else detail
    shown = summary[summary["rank"].isin(detail)]
    more = len(summary) - len(shown)
    note = (f"<p>{len(shown)} of {len(summary)} ranks in detail: the most idle ones (the summary "
            "table and the heatmap hold every rank; tables/*.parquet every row).</p>" if more else "")
    results = {name: of_ranks(rows, detail) for name, rows in results.items()}
    computed = {name: of_ranks(rows, detail) if name != "summary" else rows for name, rows in computed.items()}
    instant, every = view_commands(path.parent, source, annotated or [])
    parts = ["<h1>tokentrace: why did the GPUs sit idle?</h1>",
             f"<p>Profile <code>{_e(source)}</code>, merged traces in <code>{_e(trace)}</code> "
             f"(the user cache). See the timeline with the GPU gaps and their causes drawn in: "
             f"<code>{_e(instant)}</code>"
             + (f"; all ranks on one timeline (merged into one file first, then cached): "
                f"<code>{_e(every)}</code>" if every != instant else "")
             + f". Written {_now()}.</p>",
             note, _causes(shown), "<h2>Per rank (most GPU idle first)</h2>", _summary(summary),
             "<h2>Trace health</h2>",
             _warnings(warnings, skipped, health_summary(results.get("trace_health")))]
    for name, svg in plots.items():
        parts += [f"<h2>{_e(PLOT_TITLES.get(name, name))}</h2>", _figure(svg)]
    if "gpu_busy" in results:
        parts += ["<h2>GPU busy time by class (gpu_busy)</h2>", _busy(results["gpu_busy"])]
    if "kernels" in computed:
        parts += ["<h2>Kernels with the most GPU time (kernel_summary)</h2>", _kernels(computed["kernels"])]
    parts += ["<h2>Longest GPU gaps per rank</h2>", _top_stalls(computed["top_stalls"], every),
              _class_legend()]
    if "host_stall_profile" in results:
        parts += ["<h2>Where the host was in steady gaps: frames by self time (host_stall_profile; "
                  "the causes are above)</h2>",
                  _profile(results["host_stall_profile"])]
    if "launch_latency" in results:
        parts += ["<h2>Launch latency (launch to kernel start)</h2>",
                  _launch_latency(results["launch_latency"])]
    body = "\n".join(parts)
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>tokentrace report</title><style>{_CSS}</style></head>"
            f"<body>{body}</body></html>")
    return write_bytes(path, page.encode("utf-8"))


def _e(value) -> str:
    return html.escape(str(value))


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def cell_text(value) -> str:
    """A text value for display: '' for NULL (None, NaN or pd.NA; pandas 3 reads a NULL in a
    text column as NaN, which is truthy)."""
    return "" if value is None or pd.isna(value) else str(value)


_FRAME_PATH = re.compile(r" \((?:[^()]*/)?([^/()]+:\d+)\)")


def short_frames(text: str) -> str:
    """Frames named ``func (/long/path/file.py:12)`` shortened to ``func (file.py:12)``."""
    return _FRAME_PATH.sub(r" (\1)", text)


def cause_sentence(row) -> str:
    """``TP0: most GPU idle is host_busy, 45% (162.51 of 364.44 ms), mostly tokenize_requests;
    top stall cause host_stall (...) (blocking in time.sleep): explains 32.45 ms of the 38.12
    ms of GPU idle in 4 of 4 stalls, ...; GPU idle 364.44 ms, 97% of its active time: host_busy
    162.51 ms (45%), ...``, plain text (terminal and report).

    Led by what costs most: the ``idle_budget`` category holding most of the idle
    (``rank_summary.top_category``) and what costs most inside it, then the top stall overall
    (said once where it is that category's). One number per fact: the stalls' idle is the sum
    of their lengths in the gap tables, the part the cause explains is said to be a part of it,
    and the idle by category adds up to the rank's GPU idle (``idle_budget``)."""
    lead = f"{row['rank']}: {category_lead(row)}"
    if not cell_text(row["top_function"]):
        captured = capture_note(row)
        head = (f"{lead}{captured}; no host stall outside the captures" if captured else
                f"{lead}no host stall (no steady host-caused GPU gap is long enough)")
    else:
        per_step = (f", {format_ms(row['top_idle_per_step_ns'])} ms per step over "
                    f"{row['steps']} steps{_step_origin(row)}"
                    if row["steps"] else
                    f" (per step: no step named '{row['step_name']}' in this trace; pass "
                    "--step-name <host frame or scope>)" if row["step_name"] else
                    " (per step: no scheduler step found; pass --step-name <host frame or scope>)")
        also = (f"; stalls by cause: {short_frames(row['next_functions'])}"
                if cell_text(row.get("next_functions")) else "")
        top = short_frames(cell_text(row.get("top_frame"))) or row["top_function"]
        all_stalls = (f" ({format_ms(row['stall_idle_ns'])} ms in all)"
                      if row["top_gaps"] != row["stalls"] else "")
        captured = capture_note(row)
        head = (f"{lead}{captured + '; ' if captured else ''}top stall cause {top}{_cause_detail(row)}: "
                f"explains {format_ms(row['top_idle_ns'])} ms of the "
                f"{format_ms(row['top_stall_ns'])} ms of GPU idle in {row['top_gaps']} of the "
                f"rank's {row['stalls']} stalls{all_stalls}{per_step}{also}")
    starved = row.get("no_work_gaps")
    if _number(starved):
        who = cell_text(row.get("no_work_function"))
        thread = cell_text(row.get("no_work_thread"))
        head += (f"; the engine waited for work in {starved} long gap{'s' if starved != 1 else ''} "
                 f"({format_ms(row['no_work_idle_ns'])} ms, no stalls"
                 + (f": meanwhile {thread} in {who}" if who and thread else f": {who}" if who else "")
                 + ")")
    tail = (f"; host gaps too short to be stalls {format_ms(row['short_idle_ns'])} ms, mostly "
            f"{row['short_top_function']}" if cell_text(row["short_top_function"]) else "")
    budget = (f": {row['idle_budget']}" if cell_text(row.get("idle_budget")) else
              f" (start-up gaps {format_ms(row['idle_startup_ns'])} ms)" if row["idle_startup_ns"] else "")
    idle = (f"; GPU idle {format_ms(row['idle_ns'])} ms, {row['idle_share']:.0%} of its active "
            f"time{budget}")
    hint = cell_text(row.get("idle_hint"))
    if cell_text(row.get("short_gaps_per_step")):
        idle += (f"; short_gaps {row['short_gaps_per_step']:.1f} gaps per step, "
                 f"{format_ms(row['short_idle_per_step_ns'])} ms per step" + (f" ({hint})" if hint else ""))
    elif hint:
        idle += f"; short_gaps: {hint}"
    busy = f"; GPU busy: {row['busy_split']}" if cell_text(row.get("busy_split")) else ""
    waits = (f"; waited {format_ms(row['collective_wait_ns'])} ms inside collectives, mostly for "
             f"{row['collective_wait_for']}" if cell_text(row.get("collective_wait_for")) else "")
    return f"{head}{tail}{idle}{busy}{waits}"


def category_lead(row) -> str:
    """``most GPU idle is gpu_wait, 100% (463.30 of 463.98 ms): hipStreamWaitEvent, ...; ``:
    the category that explains the most idle and what costs most in it, where it is not the top
    stall that follows; '' without idle."""
    category = cell_text(row.get("top_category"))
    if not category:
        return ""
    cause = cell_text(row.get("top_category_cause"))
    if category == f"host_{cell_text(row.get('top_kind'))}" and cause.startswith(
            f"{cell_text(row.get('top_function'))} ("):
        cause = ""  # the top stall overall, said next
    idle = row.get("idle_ns")
    of = f" of {format_ms(idle)}" if _number(idle) else ""
    share = row.get("top_category_share")
    share_text = f"{share:.0%} " if _number(share) else ""
    joined = (", " if cause.startswith("mostly ") else ": ") + short_frames(cause) if cause else ""
    # (not "<category> <ms> ms (<share>)": that is how the budget's own parts read, later)
    return (f"most GPU idle is {category}, {share_text}({format_ms(row['top_category_ns'])}{of} ms)"
            f"{joined}; ")


def capture_note(row) -> str:
    """``graph-capture trace (...)`` for a rank whose trace records CUDA-graph captures and no
    replay (``rank_summary.trace_kind``): the kernels launched inside a capture were recorded,
    not run, so the gaps there are set-up, never stalls; '' for a run."""
    if cell_text(row.get("trace_kind")) != "graph_capture":
        return ""
    captures = row.get("capture_calls")
    count = f"{captures} stream capture{'s' if captures != 1 else ''}" if _number(captures) else "stream captures"
    return (f"graph-capture trace ({count}, no graph replay: the kernels launched inside a capture "
            "were recorded, not run; its gaps are set-up, no stalls)")


def _number(value) -> bool:
    """A count that is there and not zero (NULL, NaN and a missing column are not)."""
    return value is not None and not pd.isna(value) and value != 0


def categories_line(summary: pd.DataFrame) -> str:
    """``idle by category: host_busy: the host ran code ...; ...`` for the ``idle_budget``
    categories the summary's rows show (''  without any)."""
    shown = [c for c in idle_categories.NAMES
             if budget_column(c) in summary and (summary[budget_column(c)] > 0).any()]
    return f"idle by category: {idle_categories.legend(shown)}" if shown else ""


def cause_label(row) -> str:
    """A rank's top stall cause as the timeline labels a gap: ``gil: sort_pending_responses``
    (the kind first unless busy), '' without one."""
    function = cell_text(row.get("top_function"))
    kind = cell_text(row.get("top_kind"))
    return f"{kind}: {function}" if function and kind and kind != "busy" else function


def _cause_detail(row) -> str:
    """`` (gil held by detokenizer in builtins.sorted, the host was mostly in X)``: the top
    cause's kind and its detail (thread, C call, the leaf frame when another one), written as
    in the stalls by cause."""
    kind = cell_text(row.get("top_kind"))
    if not kind:
        return ""
    head = kind + (f" held by {row['top_thread']}" if kind == "gil" and cell_text(row.get("top_thread"))
                   else "")
    parts = [head + (f" in {row['top_call']}" if cell_text(row.get("top_call")) else "")]
    leaf = cell_text(row.get("top_leaf_function"))
    if leaf and leaf != cell_text(row.get("top_function")):
        parts.append(f"the host was mostly in {leaf}")
    return f" ({', '.join(parts)})"


def _step_origin(row) -> str:
    """`` of schedule (found: the host frame run once per launch)`` for a found step frame; for
    steps found from the torch profiler's markers or user annotations, the evidence they came
    from (`tokentrace.steps`)."""
    name = cell_text(row.get("step_name"))
    found = {"auto": "found: the outermost host frame run once per launch",
             "profiler": "found: torch's profiler step markers",
             "annotation": "found: the outermost user annotation around the launches"}
    source = cell_text(row.get("step_source"))
    if source not in found:
        return f" of {name}" if name and name != "decode_step" else ""
    return f" of {name.split(' (')[0] if source == 'auto' else name} ({found[source]})"


def _causes(summary: pd.DataFrame) -> str:
    return "".join(f"<div class='cause'>{_e(cause_sentence(row))}</div>"
                   for _, row in summary.iterrows())


def _summary(summary: pd.DataFrame) -> str:
    """Per rank: the GPU idle and its ``idle_budget`` categories (those any rank has: they add
    up to the GPU idle), then the top stall cause with its stalls' idle and the part of it the
    cause explains; the categories' meanings below."""
    shown = [c for c in idle_categories.NAMES
             if budget_column(c) in summary and (summary[budget_column(c)] > 0).any()]
    table = pd.DataFrame({
        "rank": summary["rank"], "active (ms)": summary["active_ns"].map(format_ms),
        "GPU idle (ms)": summary["idle_ns"].map(format_ms),
        "idle share": summary["idle_share"].map(lambda v: f"{v:.1%}"),
        **{f"{c} (ms)": summary[budget_column(c)].map(format_ms) for c in shown},
        "top stall cause": [cause_label(row) or "-" for _, row in summary.iterrows()],
        "its stalls (ms)": summary["top_stall_ns"].map(format_ms),
        "idle it explains (ms)": summary["top_idle_ns"].map(format_ms),
        "per step (ms)": summary["top_idle_per_step_ns"].map(format_ms)})
    legend = categories_line(summary)
    return table.to_html(index=False, border=0) + (f"<p>{_e(legend)}.</p>" if legend else "")


def _class_legend() -> str:
    items = "; ".join(f"<b>{_e(c.name)}</b>: {_e(c.meaning)}" for c in gap_classes.GAP_CLASSES)
    return f"<p>Gap classes: {items}.</p>"


def _warnings(warnings: list[str], skipped: list[str], ok: str) -> str:
    items = [f"<div class='warn'>{_e(w)}</div>" for w in warnings]
    if skipped:
        items.append(f"<div class='warn'>queries not bundled in this installation (not run): "
                     f"{_e(', '.join(skipped))}</div>")
    return "".join(items) or f"<div class='ok'>{_e(ok)}</div>"


def _figure(svg: Path) -> str:
    return f"<figure>{Path(svg).read_text(encoding='utf-8')}</figure>"


def view_commands(output: Path, source, annotated: list[Path]) -> tuple[str, str]:
    """The ``tokentrace view`` commands the report names: the instant one (the analyze output
    folder when it holds one annotated trace, else the first rank's annotated trace: served as
    it is), and the one that shows every rank on one timeline (the output folder for one trace;
    else the profile folder, merged into one file once, then cached)."""
    if not annotated:
        return f"tokentrace view {source}", f"tokentrace view {source}"
    if len(annotated) == 1:
        return f"tokentrace view {output}", f"tokentrace view {output}"
    return f"tokentrace view {annotated[0]}", f"tokentrace view {source}"


def _top_stalls(top: pd.DataFrame, command: str) -> str:
    """The longest gaps, each linked to that moment of that rank in the Perfetto UI that
    ``command`` (``tokentrace view ...``) serves (the run's common time axis: the gaps' ``ts``)."""
    if top.empty:
        return "<p>No GPU gaps.</p>"
    from tokentrace.annotate import gap_url

    # the window kept at ts >= 0: the common axis starts at 0, and the UI ignores a window
    # that leaves the trace
    links = [f"<a href='{_e(gap_url(int(ts), int(dur), bounds=(0, 2**62)))}'>timeline</a>"
             for ts, dur in zip(top["ts"], top["dur"])]
    table = pd.DataFrame({
        "rank": top["rank"], "gap": top["gap_index"],
        "start (ms)": top["start_ns"].map(format_ms), "length (ms)": top["dur"].map(format_ms),
        "class": top["gap_class"], "phase": top["phase"], "why": top["cause_kind"].fillna(""),
        "host function behind it": top["label"], "C call": top["cause_call"].fillna(""),
        "it explains (ms)": top["cause_ns"].map(format_ms),
        "next kernel": top["next_kernel"].fillna("").str.slice(0, 48)}).map(_e)
    table["see it"] = links  # the only cell of markup: every other one is escaped above
    return (f"<p>The <i>timeline</i> links open the gap, selected on its rank's "
            f"<code>GPU idle (tokentrace)</code> track, in the Perfetto UI served by "
            f"<code>{_e(command)}</code> (port 9001, no network needed).</p>"
            + table.to_html(index=False, border=0, escape=False))


def _busy(busy: pd.DataFrame) -> str:
    table = pd.DataFrame({"rank": busy["rank"], "active (ms)": busy["active_ns"].map(format_ms),
                          **{f"{kind} (ms)": busy[f"{kind}_ns"].map(format_ms)
                             for kind in ("compute", "nccl", "memory", "idle")},
                          **{f"{kind} share": busy[f"{kind}_share"].map(lambda v: f"{v:.1%}")
                             for kind in ("compute", "nccl", "memory", "idle")},
                          "nccl beside other kernels (ms)": busy["nccl_overlap_ns"].map(format_ms),
                          "memory beside compute (ms)": busy["memory_overlap_ns"].map(format_ms)})
    return (table.to_html(index=False, border=0) + "<p>Each instant counts once, for the first class "
            "running of compute, memory, nccl: nccl is communication nothing else hid.</p>")


def _kernels(kernels: pd.DataFrame) -> str:
    """Short names shown, the full demangled name in the cell's tooltip."""
    if kernels.empty:
        return "<p>No kernels.</p>"
    head = ["rank", "kernel", "class", "count", "total (ms)", "mean (µs)", "p50 (µs)", "GPU time share"]
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for _, k in kernels.iterrows():
        full = k["demangled"] + ("" if k["demangled"] == k["kernel"] else f"\n(recorded as {k['kernel']})")
        cells = [_e(k["rank"]), f"<span title='{_e(full)}'>{_e(k['name'])}</span>",
                 _e(cell_text(k["kernel_class"])), _e(k["count"]), format_ms(k["total_dur_ns"]),
                 f"{k['mean_dur_ns'] / 1e3:.1f}", f"{k['p50_dur_ns'] / 1e3:.1f}", f"{k['gpu_time_share']:.1%}"]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table class='kernels'>{''.join(rows)}</table>"


def _launch_latency(latency: pd.DataFrame) -> str:
    """Kernel names readable (demangled, shortened: mangled template names ran to thousands of
    characters, one table row 5000 px wide), the recorded name in the cell's tooltip."""
    columns = ["rank", "kernel", "launch_source", "latency_kind", "count", "p50_ns", "p90_ns",
               "max_ns", "negatives"]
    shown = latency[[c for c in columns if c in latency.columns]].copy()
    names = shown["kernel"].astype(str)
    for column in [c for c in shown.columns if c.endswith("_ns")]:
        shown[column] = shown[column].map(format_ms)
    shown = shown.map(lambda v: _e(cell_text(v)))
    shown["kernel"] = [f"<span title='{_e(name)}'>{_e(_shortened(display_name(name)))}</span>"
                       for name in names]
    shown.columns = [c[:-3] + " (ms)" if c.endswith("_ns") else c for c in shown.columns]
    return shown.to_html(index=False, border=0, escape=False)


def _shortened(name: str, limit: int = 80) -> str:
    """``name`` cut to ``limit`` characters, an ellipsis marking the cut."""
    return name if len(name) <= limit else name[:limit - 1] + "…"


def _profile(profile: pd.DataFrame, per_rank: int = 8) -> str:
    if profile.empty:
        return "<p>No host frame overlaps a GPU gap.</p>"
    rows = profile.groupby("rank", sort=False).head(per_rank)
    return _ms_table(rows, ["rank", "function", "gaps", "self_ns", "total_ns", "idle_share"])


def _ms_table(frame: pd.DataFrame, columns: list[str]) -> str:
    shown = frame[[c for c in columns if c in frame.columns]].copy()
    for column in [c for c in shown.columns if c.endswith("_ns")]:
        shown[column] = shown[column].map(format_ms)
    shown.columns = [c[:-3] + " (ms)" if c.endswith("_ns") else c for c in shown.columns]
    return shown.to_html(index=False, border=0)
