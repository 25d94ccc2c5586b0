"""Placeholder: the offset estimator (issue 5) replaces this module."""
