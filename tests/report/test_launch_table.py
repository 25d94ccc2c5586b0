"""The report's launch-latency table on the real t39 sample: mangled kernel names (cuBLAS,
CUTLASS templates) shown readable and at most 80 characters, the recorded name in the tooltip,
and every cell free to wrap (a row had been 5000 px wide)."""

from __future__ import annotations

import html
import re

from tokentrace.catalog import run_query
from tokentrace.report.html import _CSS, _launch_latency


def test_kernel_names_are_short_with_the_full_name_in_the_tooltip(merged_t39):
    _, engine = merged_t39
    latency = run_query(engine, "launch_latency")
    assert latency["kernel"].str.len().max() > 80  # the sample holds long mangled names
    table = _launch_latency(latency)
    shown = [html.unescape(s) for s in re.findall(r"<span title='[^']*'>([^<]*)</span>", table)]
    titles = [html.unescape(t) for t in re.findall(r"<span title='([^']*)'>", table)]
    assert len(shown) == len(latency) and titles == latency["kernel"].tolist()
    assert max(len(name) for name in shown) <= 80
    assert "overflow-wrap:anywhere" in _CSS
