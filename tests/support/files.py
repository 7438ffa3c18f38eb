"""Readers of the files a run writes: the Chrome trace (JSON lines, or a merged
JSON document), the session records, the summary."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PathLike = str | os.PathLike


def read_jsonl(path: PathLike) -> list[dict[str, Any]]:
    """Every non-blank line of a JSON-lines file, each parsed (a cut-off line raises)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_json(path: PathLike) -> Any:
    """A whole JSON document (``summary-r0.json``, a merged trace, a report)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_trace(path: PathLike) -> list[dict[str, Any]]:
    """The events of a Chrome trace: a ``traces-*.jsonl`` file of one event a line,
    or a JSON document (an object with ``traceEvents``, or an array)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        document = json.loads(text)
    except json.JSONDecodeError:  # more than one line: JSON lines
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(document, dict):
        return document["traceEvents"] if "traceEvents" in document else [document]
    return document


def slices(events: list[dict[str, Any]], name: str | None = None,
           phases: tuple[str, ...] = ("X",)) -> list[dict[str, Any]]:
    """The events of the given phases (complete slices by default), of one name if given."""
    return [e for e in events if e.get("ph") in phases and (name is None or e.get("name") == name)]


def slice_names(path: PathLike) -> list[str]:
    """The names of the complete slices of a trace file, in file order."""
    return [e["name"] for e in slices(read_trace(path))]


def read_sessions(path_or_run_dir: PathLike, rank: int = 0) -> list[dict[str, Any]]:
    """The session records of a ``sessions-*.jsonl`` file, or of a run directory's
    ``sessions-r<rank>.jsonl``; ``[]`` when there is none (no session finished)."""
    path = Path(path_or_run_dir)
    if path.is_dir():
        path = path / f"sessions-r{rank}.jsonl"
    return read_jsonl(path) if path.exists() else []
