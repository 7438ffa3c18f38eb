"""What the compiled encoder (``_native.c``) asks Python for: rare values, formatted as the
Python encoder formats them, so both write the same bytes.

Each takes the UTF-8 (or raw JSON) bytes the compiled encoder holds and returns bytes or ints.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..track_metadata import rank_and_role as _rank_and_role
from .interning import scalar_bytes
from .packets import flow_id as _flow_id

__all__ = ["flow_id", "rank_and_role", "scalar_of", "text_of"]


def text_of(raw: bytes) -> bytes:
    """``str()`` of a list or dict value (its raw JSON), as UTF-8."""
    return str(orjson.loads(raw)).encode("utf-8", "replace")


def scalar_of(raw: bytes) -> bytes:
    """The value part of a debug annotation holding a list or dict (its raw JSON)."""
    part = scalar_bytes(orjson.loads(raw))
    return part if part is not None else b""


def flow_id(text: bytes) -> int:
    """The flow id of a flow marker that is not a plain hex span id."""
    return _flow_id(text.decode("utf-8"))


def rank_and_role(name: bytes) -> tuple[int, bytes | None] | None:
    """The rank and role a process name states (``None`` for another name)."""
    found: Any = _rank_and_role(name.decode("utf-8"))
    if found is None:
        return None
    rank, role = found
    return rank, None if role is None else role.encode("utf-8")
