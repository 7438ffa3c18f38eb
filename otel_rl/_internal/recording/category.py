"""Categories of traced work (AReaL's values and aliases)."""

from __future__ import annotations

from enum import Enum
from typing import Any

from .. import diagnostics, guard


class Category(str, Enum):
    """Kinds of traced work, as in AReaL (``rl.category`` on spans, ``cat`` in Perfetto)."""

    COMPUTE = "compute"
    COMM = "comm"
    IO = "io"
    SYNC = "sync"
    SCHEDULER = "scheduler"
    INSTR = "instr"
    MISC = "misc"

    # AReaL's longer spellings.
    COMMUNICATION = "comm"
    SYNCHRONIZATION = "sync"
    INSTRUMENTATION = "instr"


#: Accepted string spellings of each category (lower-case).
CATEGORY_ALIASES: dict[str, Category] = {
    **{c.value: c for c in Category},
    "communication": Category.COMM,
    "synchronization": Category.SYNC,
    "instrumentation": Category.INSTR,
    "schedule": Category.SCHEDULER,
    "other": Category.MISC,
}


#: Exact spellings (and members) to their canonical string: the fast path.
_CANONICAL: dict[Any, str] = {
    **{name: member.value for name, member in CATEGORY_ALIASES.items()},
    **{member: member.value for member in Category},
}


def normalize_category(category: Any) -> str | None:
    """The category's canonical string. A known name or alias (any case) becomes
    its canonical value; any other non-blank string is kept as given, as AReaL
    keeps it (``"rollout.sess-0"``); a blank one is ``misc``, a wrong type is
    counted and recorded as ``misc`` (never raised)."""
    if category is None:
        return None
    try:
        found = _CANONICAL.get(category)
    except TypeError:  # unhashable
        found = None
    if found is not None:
        return found
    if isinstance(category, Category):
        return category.value
    if isinstance(category, str):
        stripped = category.strip()
        found = CATEGORY_ALIASES.get(stripped.lower())
        if found is not None:
            return found.value
        return str(category) if stripped else Category.MISC.value
    guard.report(diagnostics.BAD_CATEGORY_TYPE, "category must be a Category or str, got %s",
                 type(category).__name__)
    return Category.MISC.value
