"""Bundled PerfettoSQL: runnable queries (``*.sql``) and the ``tokentrace`` module package.

Installed as ``tokentrace.sql``; this file only makes the folder importable as package data.
"""
