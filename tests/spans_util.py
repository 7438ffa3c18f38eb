"""Helpers for comparing exported spans as plain dicts."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    """A ReadableSpan as a plain dict (ids in hex, attributes as a dict)."""
    return {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "status": span.status.status_code.name,
        "status_message": span.status.description,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
    }


def by_name(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]


def one(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = by_name(spans, name)
    assert len(found) == 1, f"expected one span {name!r}, got {len(found)}: {[s['name'] for s in spans]}"
    return found[0]


def without_thread(attributes: dict[str, Any]) -> dict[str, Any]:
    """Attributes minus the per-run thread identity, for exact comparisons."""
    return {k: v for k, v in attributes.items() if not k.startswith("thread.")}
