"""The notebook facade's former module name: :mod:`tokentrace.notebook`."""

from tokentrace.notebook import Analysis, open_analysis, open_for_batch  # noqa: F401
