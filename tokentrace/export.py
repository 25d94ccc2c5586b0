"""Old home of :mod:`tokentrace.catalog.export`, kept because it is public: earlier
docs/queries.md told users to read a result file's provenance with
``tokentrace.export.read_metadata(path)``, and ``tokentrace.cli.query`` still imports from here.
New code imports :mod:`tokentrace.catalog.export`."""

from tokentrace.catalog.export import FORMATS, METADATA_KEY, read_metadata, result_metadata, write_result

__all__ = ["FORMATS", "METADATA_KEY", "read_metadata", "result_metadata", "write_result"]
