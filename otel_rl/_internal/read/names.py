"""What a run file's name says: the worker it belongs to, or that it is the run's own bookkeeping."""

from __future__ import annotations

import os
import re

__all__ = ["file_label", "is_conventional_name", "is_run_summary"]

_LABEL_RE = re.compile(r"^(?:traces|sessions|events|metrics|stats)[-_](.+?)\.jsonl?(?:\.gz)?$")
_SUMMARY_RE = re.compile(r"^summary-(?:.+-)?r\d+(?:-pid\d+)?\.json$")


def file_label(path: str) -> str:
    """``traces-rollout-r0.jsonl`` -> ``rollout-r0``; other names -> their stem."""
    name = os.path.basename(path)
    m = _LABEL_RE.match(name)
    if m:
        return m.group(1)
    for suffix in (".gz", ".jsonl", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def is_conventional_name(path: str) -> bool:
    """Whether the file is named as otel_rl names a worker's files (``traces-rollout-r0.jsonl``)."""
    return bool(_LABEL_RE.match(os.path.basename(path)))


def is_run_summary(path: str) -> bool:
    """A run summary (``summary-r{rank}.json``): the run's own bookkeeping, not its work."""
    return bool(_SUMMARY_RE.match(os.path.basename(path)))

