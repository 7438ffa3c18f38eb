"""Torch profiler traces otel_rl writes (``torch-*.trace.json``): Chrome JSON documents that name their rank.

Their events are read by :mod:`.chrome_json`; what is particular to them is
their name (a report reads them only when named: their kernels would swamp
its views) and the rank's trace file they name, so that their kernels land in
that rank's process.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..keys import TRACE_JOIN_KEY

__all__ = ["is_torch_trace", "joined_traces_file"]

_TORCH_TRACE_RE = re.compile(r"^torch-.*\.trace\.json(?:\.gz)?$")


def is_torch_trace(path: str) -> bool:
    """Whether ``path`` is named as otel_rl names the torch profiler traces it writes."""
    return bool(_TORCH_TRACE_RE.match(os.path.basename(path)))


def joined_traces_file(path: str, doc: Any) -> str | None:
    """The rank's trace file a torch trace otel_rl wrote names (``"otel_rl": {"traces_file": ...}``),
    as a path beside ``path``; ``None`` for any other document."""
    join = doc.get(TRACE_JOIN_KEY) if isinstance(doc, dict) else None
    name = join.get("traces_file") if isinstance(join, dict) else None
    if not isinstance(name, str):
        return None
    return os.path.join(os.path.dirname(path), name)
