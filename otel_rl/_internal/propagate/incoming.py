"""Baggage that arrives from outside (request headers, the environment carrier) is
limited before anything sees it: otel_rl's own keys (:data:`~.keys.BAGGAGE_KEYS`) are
kept, other keys only when ``OTEL_RL_BAGGAGE_ALLOW`` names them (``*``: all), and
never more than the W3C limits (180 entries, 8192 bytes). What is left out is
counted in ``diagnostics()``: ``baggage_dropped`` (a key not allowed) and
``baggage_trimmed`` (over a limit).
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import baggage as baggage_api
from opentelemetry import context as context_api

from ... import environment_variables as ev
from .. import diagnostics, guard, keys
from ..state import STATE

#: W3C Baggage limits.
MAX_ENTRIES = 180
MAX_BYTES = 8192
_ALL = "*"
_parsed: tuple[str, frozenset[str] | str] | None = None


def allowed() -> frozenset[str] | str:
    """The extra keys allowed (a set, or ``"*"``) from the settings, or the
    environment when otel_rl is not configured."""
    global _parsed
    settings = STATE.settings if STATE.configured else None
    text = settings.baggage_allow if settings is not None else os.environ.get(ev.OTEL_RL_BAGGAGE_ALLOW, "")
    cached = _parsed
    if cached is not None and cached[0] == text:
        return cached[1]
    names = {part.strip() for part in text.split(",") if part.strip()}
    value: frozenset[str] | str = _ALL if _ALL in names else frozenset(names)
    _parsed = (text, value)
    return value


def header_of(carrier: Any) -> str | None:
    """The raw ``baggage`` header of a carrier (any case of the name), or ``None``."""
    try:
        value = carrier.get("baggage")
        if value is None:
            value = next((v for k, v in carrier.items() if isinstance(k, str) and k.lower() == "baggage"),
                         None)
    except Exception:  # noqa: BLE001 - an odd carrier: nothing to count
        return None
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return value if isinstance(value, str) else None


def _over_header_limits(header: str | None) -> int:
    """Entries of a raw header the W3C propagator leaves out for its size: all of
    them past 8192 bytes, those past the 180th otherwise."""
    if not header:
        return 0
    entries = sum(1 for part in header.split(",") if part.strip())
    if len(header.encode("utf-8", "replace")) > MAX_BYTES:
        return entries
    return max(0, entries - MAX_ENTRIES)


def limit(ctx: context_api.Context, header: str | None = None) -> context_api.Context:
    """``ctx`` with its baggage limited as the module says; ``header``, the raw
    header it was extracted from, lets entries the propagator left out be counted."""
    over = _over_header_limits(header)
    if over:
        guard.count(diagnostics.BAGGAGE_TRIMMED, over)
    bag = baggage_api.get_all(ctx)
    if not bag:
        return ctx
    allow = allowed()
    own = [key for key in keys.BAGGAGE_KEYS if key in bag]
    ordered = own + [key for key in bag if key not in keys.BAGGAGE_KEYS]
    kept: dict[str, Any] = {}
    size = dropped = trimmed = 0
    for key in ordered:
        if key not in keys.BAGGAGE_KEYS and allow is not _ALL and key not in allow:
            dropped += 1
            continue
        # ``key=value`` plus the comma that separates it from the previous entry.
        entry = len(key.encode()) + len(str(bag[key]).encode()) + 1 + (1 if kept else 0)
        if len(kept) >= MAX_ENTRIES or size + entry > MAX_BYTES:
            trimmed += 1
            continue
        kept[key] = bag[key]
        size += entry
    if not dropped and not trimmed:
        return ctx
    if dropped:
        guard.count(diagnostics.BAGGAGE_DROPPED, dropped)
    if trimmed:
        guard.count(diagnostics.BAGGAGE_TRIMMED, trimmed)
    ctx = baggage_api.clear(ctx)
    for key, value in kept.items():
        ctx = baggage_api.set_baggage(key, value, ctx)
    return ctx
