"""``tokentrace analyze``: one profile folder -> merged trace, every stall query as Parquet,
plots and a self-contained report.html. :mod:`.pipeline` runs it, :mod:`.tables` picks rows,
:mod:`.html` writes the page."""

from tokentrace.report.pipeline import REPORT_QUERIES, AnalyzeResult, analyze

__all__ = ["REPORT_QUERIES", "AnalyzeResult", "analyze"]
