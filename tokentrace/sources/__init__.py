"""Readers of the input traces: VizTracer reports and both Proton dialects (no Perfetto here)."""
