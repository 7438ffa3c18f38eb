"""The compiled twin of the Chrome encoder's line writing (``_chrome_lines.c``), where built.

``native`` is ``None`` where the extension was not built (setup.py builds it as optional):
the encoder then builds every event as a dict and the file exporter writes it with orjson,
which is also the specification: the compiled ``complete`` gives the bytes orjson gives for
the complete event's dict, or ``None`` where it is not sure to (the dict is built then);
``flows`` likewise the two lines of a local flow arrow.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson
from opentelemetry.trace import SpanKind
from opentelemetry.trace.status import StatusCode

from .. import keys
from ..recording import record
from .chrome_markers import FLOW_CATEGORY, FLOW_NAME, LOCAL_FLOW_MIX
from .json_values import ARG_NAMES, DROPPED_ARG, arg_name, json_safe_value

try:
    from . import _chrome_lines as native
except ImportError:  # built without a C compiler
    native = None

__all__ = ["KIND_NAMES", "STATUS_NAMES", "crc32", "join", "line_pid", "native"]

KIND_NAMES = {kind.value: kind.name for kind in SpanKind}
STATUS_NAMES = {code.value: code.name for code in StatusCode}
#: The args keys the encoder sets after the attributes' own (a span whose attributes
#: give one of them is left to the Python encoder, whose dict keeps the first position).
FIXED_KEYS = (keys.TRACE_ARG_TRACE_ID, keys.TRACE_ARG_SPAN_ID, keys.TRACE_ARG_PARENT_ID, "span.kind", "status",
              "status.description", "links")
_PID_KEY = b',"pid":'

if native is not None:
    native.configure({
        "kind_names": KIND_NAMES, "status_names": STATUS_NAMES, "arg_names": ARG_NAMES,
        "dropped": DROPPED_ARG, "arg_name": arg_name, "json_safe_value": json_safe_value,
        "fixed_keys": FIXED_KEYS, "DEFAULT_CATEGORY": keys.DEFAULT_CATEGORY, "dumps": orjson.dumps,
        "FLOW_NAME": FLOW_NAME, "FLOW_CATEGORY": FLOW_CATEGORY,
        "LOCAL_FLOW_MIX": LOCAL_FLOW_MIX, **record.layout(),
    })


def line_pid(line: bytes) -> int | None:
    """The pid of an event line the encoder wrote: the first ``,"pid":`` is the key (a quote
    inside a JSON string is always escaped, so the name and category cannot hold it)."""
    at = line.find(_PID_KEY)
    if at < 0:
        return None
    at += len(_PID_KEY)
    end = at + 1
    while end < len(line) and line[end] in b"0123456789":
        end += 1
    try:
        return int(line[at:end])
    except ValueError:
        return None


#: ``zlib.crc32``, or its compiled twin where the CPU folds blocks with carry-less multiplies
#: (about 3.5 times faster on a batch): the batch marker's checksum, written and verified.
crc32 = native.crc32 if native is not None and native.has_crc_folding() else zlib.crc32


def join(events: list[Any], dumps_event: Any) -> tuple[bytearray, int, set[int]]:
    """The lines of ``events`` (bytes as they are, dicts through ``dumps_event``, which
    returns ``None`` for one it cannot write), their count and the set of their pids."""
    if native is not None:
        return native.join(events, dumps_event)
    # Appending each line to one buffer frees orjson's output at once, which is
    # markedly faster than keeping a list of lines alive until a join.
    body = bytearray()
    pids: set[int] = set()
    lines = 0
    for event in events:
        if type(event) is bytes:
            line: bytes | None = event
            pid = line_pid(event)
        else:
            line = dumps_event(event)
            if line is None:
                continue
            pid = event.get("pid")
        body += line
        body += b"\n"
        lines += 1
        if type(pid) is int:
            pids.add(pid)
    return body, lines, pids
