"""Kept for the modules that still import it; the helpers live in :mod:`support.spans`."""

from support.spans import as_dict, by_name, one, without_thread  # noqa: F401
