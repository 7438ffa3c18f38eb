"""Internals of otel_rl. Nothing here is public API; import from ``otel_rl``."""
