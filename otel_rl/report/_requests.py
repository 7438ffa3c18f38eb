"""Request identity: one id is one request only where it was made unambiguously.

Engines number requests per process (the demo's workers both count from 0, as
vLLM and SGLang servers do), while a pipeline passes one request id from stage
to stage across processes (sglang-omni's thinker, talker, coordinator). Both
show up as the same id in several processes. What tells them apart: a
pipeline's processes serve *different* stages of the request, replicas serve
the *same* stage. So an id whose events come from two processes at one stage
names several requests, one per process, keyed ``"<id>@<worker>"``; any other
id stays one request across its processes (hops between stages intact).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ._model import RunData


def scoped_key(request_id: Any, worker: str) -> str:
    """The key of a request that shares its id with requests of other processes."""
    return f"{request_id}@{worker}"


def scope_request_ids(data: RunData) -> int:
    """Splits ids that several processes used for different requests (see module doc).

    Returns:
        How many ids were split.
    """
    worker_of_pid = {info.get("pid"): worker for worker, info in data.workers.items()
                     if info.get("pid") is not None}
    split = 0
    for rid in list(data.requests):
        events = data.requests[rid]
        pids_of_stage: dict[Any, set] = defaultdict(set)
        for _ts, stage, _name, pid, _md in events:
            pids_of_stage[stage].add(pid)
        if all(len(pids) < 2 for pids in pids_of_stage.values()):
            continue
        split += 1
        del data.requests[rid]
        for event in events:
            pid = event[3]
            key = scoped_key(rid, worker_of_pid.get(pid) or f"pid{pid}")
            data.requests.setdefault(key, []).append(event)
    return split


def session_requests(data: RunData, session_id: Any, worker: str,
                     index: dict[tuple[str, Any], list[tuple]] | None = None) -> list[tuple] | None:
    """The request events of a session: the requests its worker made for it (their
    first event's metadata names the session: ``session_id``), else the request
    whose id is the session id (from that worker when the id was split).

    Args:
        index: :func:`requests_by_session` of ``data``, when looking up many sessions.
    """
    index = requests_by_session(data) if index is None else index
    found = index.get((worker, session_id))
    if found:
        return found
    for key in (scoped_key(session_id, worker), session_id, str(session_id)):
        found = data.requests.get(key)
        if found is not None:
            return found
    return None


def requests_by_session(data: RunData) -> dict[tuple[str, Any], list[tuple]]:
    """``(worker, session id) -> events`` of the requests whose metadata names their session."""
    worker_of_pid = {info.get("pid"): worker for worker, info in data.workers.items()
                     if info.get("pid") is not None}
    index: dict[tuple[str, Any], list[tuple]] = {}
    for events in data.requests.values():
        if not events:
            continue
        first = events[0]
        metadata = first[4]
        session = metadata.get("session_id") if isinstance(metadata, dict) else None
        worker = worker_of_pid.get(first[3])
        if session is None or worker is None:
            continue
        try:
            index.setdefault((worker, session), []).extend(events)
        except TypeError:  # an unhashable session id in someone's metadata: not linkable
            continue
    for events in index.values():
        events.sort(key=lambda e: e[0])
    return index
