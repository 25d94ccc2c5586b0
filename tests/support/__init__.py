"""Helpers and session fixtures shared by the test packages (registered once, in conftest)."""
