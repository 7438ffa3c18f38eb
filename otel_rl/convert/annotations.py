"""What the trainer said of sessions afterwards, joined into their spans in the merged trace.

``otel_rl.consume`` and ``otel_rl.annotate`` append lines to ``annotations-*.jsonl``
(never rewriting a trace file). The converter reads those lines first and adds
them to the args of each session's span as it copies it: ``rl.session.consumed_step``,
``rl.session.staleness``, ``rl.session.crossed_update`` and ``rl.annotation.<name>``,
so clicking a session in Perfetto shows its staleness and advantage. A line is
joined by the session span's id, which it carries when ``consume`` / ``annotate``
knew the session's span (ids alone repeat across rollout processes).
"""

from __future__ import annotations

from typing import Any

import orjson

from .._internal import keys
from .._internal.encode.chrome_markers import slice_id
from .._internal.read.annotations import read_annotations
from .._internal.read.limits import InputLimits

__all__ = ["SessionNotes"]

#: How a span id's arg starts in a line, in the trace file's names and in older files'.
_SPAN_ID_KEYS = tuple(b'"%s":"' % name.encode() for name in (keys.TRACE_ARG_SPAN_ID, "span_id"))
#: What a session's span gets of its consume line: its field -> the arg.
_CONSUMED_ARGS = (("step", keys.SESSION_CONSUMED_STEP), ("staleness", keys.SESSION_STALENESS),
                  ("crossed_update", keys.SESSION_CROSSED_UPDATE))


class SessionNotes:
    """Session span id (hex) -> the args its consume and annotation lines add."""

    def __init__(self) -> None:
        self.args: dict[bytes, dict[str, Any]] = {}
        self.joined = 0

    def read(self, path: str, limits: InputLimits, problems: Any) -> int:
        """Reads an annotations file (``problems`` told of lines it cannot use); returns its lines."""
        return read_annotations(path, limits, problems, self.add)

    def add(self, line: dict[str, Any]) -> None:
        """Takes one line as :func:`read_annotations` gives it."""
        span_id = line.get("span_id")
        if not isinstance(span_id, str):
            return
        args = self.args.setdefault(span_id.encode(), {})
        if line["kind"] == "consume":
            for field, arg in _CONSUMED_ARGS:
                if line.get(field) is not None:
                    args[arg] = line[field]
        else:
            for name, value in line["values"].items():
                args[keys.ANNOTATION_PREFIX + str(name)] = value

    def join(self, blob: bytes, sep: bytes = b",\n") -> bytes:
        """``blob`` (events joined by ``sep``) with the notes added to the args of the spans they name."""
        if not self.args or not any(key in blob for key in _SPAN_ID_KEYS):
            return blob
        parts = blob.split(sep)
        changed = False
        for i, part in enumerate(parts):
            if not self._names_noted(part):
                continue
            event = orjson.loads(part)
            args = event.get("args")
            # Looked up again from the parsed args: the span's own id, wherever the key sits.
            extra = (self.args.get(str(slice_id(args, keys.TRACE_ARG_SPAN_ID)).encode())
                     if type(args) is dict else None)
            if extra is None:
                continue
            args.update(extra)
            parts[i] = orjson.dumps(event)
            self.joined += 1
            changed = True
        return sep.join(parts) if changed else blob

    def _names_noted(self, part: bytes) -> bool:
        """Whether an id arg of the line ``part`` (any of them: a nested value may use the same
        key) is a span with notes, found without parsing the line."""
        for key in _SPAN_ID_KEYS:
            at = part.find(key)
            while at >= 0:
                start = at + len(key)
                if part[start:part.find(b'"', start)] in self.args:
                    return True
                at = part.find(key, start)
        return False
