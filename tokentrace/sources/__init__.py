"""Trace files in, plain records out: file access, kind detection, discovery of rank files,
rank tags, the VizTracer and Proton readers. Nothing here knows Perfetto."""
