"""Process and thread metadata of a Chrome trace: pids, names and sort order.

Tracks are named and ordered as AReaL's tracer names them (``[trainer] Rank 0,
Process``, training roles first), so a trace otel_rl wrote reads the same in
Perfetto as one AReaL wrote. Every pid and tid stays below 2**32: Perfetto
rejects larger ones.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Container, Mapping
from typing import Any

from .. import keys

#: Roles of the training side: their processes come first in Perfetto, the rest
#: (rollout workers, inference servers) after them, each by rank.
TRAINING_ROLES = frozenset({"trainer", "actor", "critic", "learner", "master", "ref", "train"})
_OTHER_ROLES_FROM = 1 << 20

# Synthetic pids stay above Linux's largest possible pid (2**22), and below 2**32.
_SYNTHETIC_PID_BASE = 1 << 22
_SYNTHETIC_PID_SPAN = 1 << 22


def resource_identity(attributes: Mapping[str, Any]) -> tuple:
    """A hashable, order-independent identity of a resource's attributes."""
    items = []
    for key, value in attributes.items():
        if not isinstance(value, (str, bool, int, float)):
            value = repr(value)
        items.append((key, value))
    items.sort()
    return tuple(items)


def process_pid(attributes: Mapping[str, Any], identity: tuple, taken: Container[int]) -> int:
    """The pid a resource's process is drawn under.

    Its own ``process.pid`` when usable; without one, or when another resource
    already has it, one derived from the resource itself, so the same process
    gets the same pid every time.

    Args:
        attributes: The resource's attributes.
        identity: Its :func:`resource_identity`.
        taken: Pids already given to other resources.
    """
    pid = attributes.get(keys.PROCESS_PID)
    if type(pid) is int and 0 <= pid < (1 << 32) and pid not in taken:
        return pid
    seed = repr(identity).encode()
    pid = _SYNTHETIC_PID_BASE + zlib.crc32(seed) % _SYNTHETIC_PID_SPAN
    salt = 0
    while pid in taken:
        salt += 1
        pid = _SYNTHETIC_PID_BASE + zlib.crc32(seed + str(salt).encode()) % _SYNTHETIC_PID_SPAN
    return pid


def sort_index(rank: int, role: Any) -> int:
    """AReaL's sort index (the rank), with processes of other roles after the training side."""
    if not role or str(role).lower() in TRAINING_ROLES:
        return rank
    return _OTHER_ROLES_FROM + rank


def process_name(attributes: Mapping[str, Any], pid: int) -> str:
    """AReaL's process names (``[trainer] Rank 0, Process``), so the tracks read
    the same as in a trace AReaL's tracer wrote."""
    rank = attributes.get(keys.RANK)
    role = attributes.get(keys.ROLE)
    if rank is not None:
        return f"[{role}] Rank {rank}, Process" if role else f"Rank {rank}, Process"
    service = attributes.get(keys.SERVICE_NAME)
    if service:
        return f"{service} · {role}" if role else str(service)
    return f"pid {pid}"


_PROCESS_NAME = re.compile(r"(?:\[(.+)\] )?Rank (\d+), Process")


def rank_and_role(name: Any) -> tuple[int, str | None] | None:
    """The rank and role a :func:`process_name` states (``None`` for another name)."""
    match = _PROCESS_NAME.fullmatch(name) if type(name) is str else None
    if match is None:
        return None
    return int(match.group(2)), match.group(1)


def add_process_metadata(attributes: Mapping[str, Any], pid: int, out: list[dict[str, Any]]) -> None:
    """Appends a new process's metadata events: its name, sort index (when it has a rank) and labels.

    Args:
        attributes: The process's resource attributes.
        pid: Its pid in the trace.
        out: Event list to append to.
    """
    out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                "args": {"name": process_name(attributes, pid)}})
    rank = attributes.get(keys.RANK)
    if type(rank) is int:
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                    "args": {"sort_index": sort_index(rank, attributes.get(keys.ROLE))}})
    labels = [str(attributes[k]) for k in (keys.EXPERIMENT, keys.TRIAL) if attributes.get(k)]
    if labels:
        out.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                    "args": {"labels": "/".join(labels)}})


def add_lane_metadata(pid: int, tid: int, thread: str, thread_number: int, lane: int,
                      out: list[dict[str, Any]]) -> None:
    """Appends a new lane's track name and sort index.

    Lane 0 is the source thread's own track; further lanes are named
    ``"<thread> · lane N"`` and sort right after it.

    Args:
        pid: The process's pid in the trace.
        tid: The lane's tid.
        thread: Name of the source thread (or instrumentation scope).
        thread_number: Order of that thread within its process.
        lane: The lane's index among the thread's lanes.
        out: Event list to append to.
    """
    name = thread if lane == 0 else f"{thread} · lane {lane}"
    out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
    out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                "args": {"sort_index": thread_number * 1000 + min(lane, 999)}})
