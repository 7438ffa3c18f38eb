"""Whether a value read from JSON can be used: ids of the right JSON type, times that are dates.

What readers keep can always be hashed, compared and printed: an id that is
a JSON list or object, or a time that is no date, makes its line malformed.
"""

from __future__ import annotations

from typing import Any

from .. import keys

__all__ = ["ID_ARGS", "ID_TYPES", "MAX_NS", "MAX_S", "MAX_US", "bad_id", "is_number", "seconds"]

#: Types an id may have: it keys dictionaries (processes, threads, sessions); a
#: JSON list or object cannot identify anything.
ID_TYPES = frozenset({str, int, float, bool, type(None)})
#: Span args that identify something; a line whose one of them is a list or object is skipped.
ID_ARGS = (*keys.TRACE_ARG_NAMES, keys.TASK_ID, keys.SESSION_ID, keys.STEP, keys.REQUEST_ID, keys.THREAD_ID)
_CONTAINERS = frozenset({dict, list})
#: Times beyond this many seconds from the epoch (either way: years 1019 to 2920)
#: are garbage, not dates; they could not even be printed as one.
MAX_S = 3e10
MAX_US = MAX_S * 1e6
MAX_NS = MAX_S * 1e9


def is_number(value: Any) -> bool:
    """A JSON number (``bool`` is not one)."""
    return type(value) is float or type(value) is int


def bad_id(args: dict[str, Any]) -> str | None:
    """What is wrong with span args whose ids or category are of the wrong JSON type, or ``None``."""
    if not _CONTAINERS.isdisjoint(map(type, args.values())):  # the usual case, at C speed
        for key in ID_ARGS:
            if type(args.get(key)) not in ID_TYPES:
                return f"{key} is not a string or number"
    category = args.get(keys.CATEGORY)
    if category is not None and type(category) is not str:
        return f"{keys.CATEGORY} is not a string"
    return None


def seconds(value: Any, what: str) -> Any:
    """``value`` if it is a time in seconds (or ``None``).

    Raises:
        ValueError: ``value`` is not a number, or not a date; the message names ``what``.
    """
    if value is None:
        return None
    if type(value) is not float and type(value) is not int:
        raise ValueError(f"{what} is not a number: {value!r:.40}")
    if not -MAX_S < value < MAX_S:
        raise ValueError(f"{what} is out of range: {value!r}")
    return value
