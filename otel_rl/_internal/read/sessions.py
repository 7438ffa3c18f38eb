"""Session records: otel_rl's ``sessions-r*.jsonl`` and AReaL's, one session per line.

A record has a ``session_id`` and a ``submit_ts`` or a ``task_id``; otel_rl
also writes ``rank``, ``role``, ``status``, ``reason``, ``finalized_ts``,
``total_s``, ``phases`` (``{name: [{"start_ts", "end_ts"}, ...]}``),
``counters``, ``step``, ``span_id`` and ``trace_id``. A record whose fields
have the wrong JSON type (an id that is a list, a time that is no date) is a
malformed line; what is kept is handed to a row constructor whose parameters
follow ``otel_rl.report.SessionRow``'s.

A file is read a block of lines at a time. Each block is parsed into
*items* (:func:`parse_block`): rows, and the lines that could not be used.
For large inputs (:func:`session_pool`) blocks are parsed in forked worker
processes, on the machine's idle cores, and their items applied here in file
order: the rows and the diagnostics are those of reading here, in the same order.
"""

from __future__ import annotations

import collections
import marshal
import sys
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import orjson

from .checks import ID_TYPES, MAX_S, seconds
from .jsonl import LineProblems
from .limits import InputLimits, long_line_message
from .lines import BLOCK, LONG, line_blocks
from .packed import pack, pack_details
from .pool import fork_pool, idle_cpus
from .ranges import WINDOW, line_ranges, read_range
from .session_facts import FactsBuilder, reason_text
from .source import CHUNK, open_input

__all__ = ["PARALLEL_BYTES", "RESPONSE_LENGTH_COUNTERS", "parse_block", "read_session_records", "record_fields",
           "response_length", "session_pool"]

#: Inputs at least this large are parsed in worker processes (one per CPU) when there are several CPUs.
PARALLEL_BYTES = 32 << 20
#: Session record counters that hold a response length (first found wins).
RESPONSE_LENGTH_COUNTERS = ("response_length", "response_tokens", "output_tokens",
                            "completion_tokens", "num_output_tokens", "generated_tokens")
_LENGTH_NAMES = frozenset(RESPONSE_LENGTH_COUNTERS)
_IDS = ("session_id", "task_id", "span_id", "trace_id")
# Items of parse_block: a row; a malformed line; a malformed line, reported only if its
# worker is kept (what comes after the worker is known); a last line cut short.
_ROW, _BAD, _BAD_IF_KEPT, _TRUNCATED, _FACTS = 0, 1, 2, 3, 4


def read_session_records(path: str, limits: InputLimits, problems: LineProblems,
                         worker_of: Callable[[Any, Any], str | None], make: Callable[..., Any],
                         add: Callable[[Any], None], on_read: Callable[[int], None] | None = None,
                         pool: Executor | None = None,
                         add_facts: Callable[[dict[str, Any], list[str]], None] | None = None,
                         cold: str = "all", joins: bool = True,
                         floors: Callable[[], tuple[float, float, float] | None] | None = None) -> int:
    """Reads a session records file; returns how many rows it added.

    Args:
        path: The file (optionally gzipped).
        limits: Bounds on reading it.
        problems: Told of every line that could not be used, and why.
        worker_of: ``(rank, role)`` of a record -> its worker (``rank`` an int,
            ``role`` a string or ``None``; ``rank`` is ``None`` when the record has
            no integer rank); ``None`` leaves the record out.
        make: Builds a row from ``(worker, status, submit, finalized, total,
            step, phases, tokens, details)``: times in seconds, ``phases`` a flat
            tuple ``(name, start, end, ...)`` with ``end`` ``None`` for a phase
            still open, packed (:func:`.packed.pack`), ``tokens`` the response length
            (:func:`response_length`), ``details`` what few rows are shown with,
            packed (:func:`.packed.pack_details`); statuses and phase names are interned strings.
        add: Takes each row.
        on_read: Called with the size of each chunk read (for progress bars).
        pool: Worker processes that parse blocks of lines (:func:`session_pool`);
            blocks are parsed here when ``None``.
        add_facts: Given, every record is kept: blocks of records are gathered as
            columns (:class:`.session_facts.FactsBuilder`), each handed to
            ``add_facts(facts, workers)`` (``workers``: the worker of each of the
            block's keys) instead of rows to ``make`` and ``add``.
        cold: With ``add_facts``: what is kept of what few sessions are shown with
            (``FactsBuilder``'s ``cold``).
        joins: With ``add_facts``: keep what joins annotation lines to sessions
            (``FactsBuilder``'s ``joins``).
        floors: With ``add_facts``: what a session must pass to be kept as a candidate, as
            the blocks added so far stand (``FactsBuilder``'s ``floors``), asked for each block.
    """
    workers: dict[Any, str | None] = {}
    count = 0
    columns = cold if add_facts is not None else None

    def apply(items: list[tuple], base: int = 0) -> None:
        """Items of a block; ``base``: the line before the block (its line numbers count from there)."""
        nonlocal count
        for item in items:
            kind = item[0]
            if kind == _ROW:
                _, rank, role, fields = item
                key = (rank, role) if rank is not None else None
                if key in workers:
                    worker = workers[key]
                else:
                    worker = workers[key] = worker_of(rank, role)
                if worker is not None:
                    add(make(worker, *fields))
                    count += 1
            elif kind == _FACTS:
                facts = item[1]
                labels = []
                for rank, role in facts["keys"]:
                    key = (rank, role) if rank is not None else None
                    if key in workers:
                        worker = workers[key]
                    else:
                        worker = workers[key] = worker_of(rank, role)
                    labels.append(worker)
                add_facts(facts, labels)  # type: ignore[misc, arg-type]
                count += facts["n"]
            elif kind == _BAD:
                problems.bad_line(path, base + item[1], item[2])
            elif kind == _BAD_IF_KEPT:
                _, lineno, message, rank, role = item
                key = (rank, role) if rank is not None else None
                if key in workers:
                    worker = workers[key]
                else:
                    worker = workers[key] = worker_of(rank, role)
                if worker is not None:
                    problems.bad_line(path, base + lineno, message)
            else:
                problems.truncated(path, base + item[1])

    in_flight = 2 * idle_cpus()  # a block being parsed by every worker, and one waiting
    # Blocks in flight, applied strictly in file order: marshalled items, or a line over the bound.
    pending: collections.deque[tuple[bool, Any]] = collections.deque()
    lineno = 0  # lines read (with a pool: lines applied; workers count their blocks' lines)

    def apply_next() -> None:
        nonlocal lineno
        parsed, job = pending.popleft()
        if parsed:
            lines, items = marshal.loads(job.result())
            apply(items, lineno)
            lineno += lines
        else:
            lineno += 1
            problems.bad_line(path, lineno, long_line_message(job, limits))

    # Workers read their blocks themselves where every block is sure to hold only lines within the bound.
    ranges = line_ranges(path) if pool is not None and limits.max_line_bytes >= CHUNK + WINDOW else None
    with open_input(path, limits, on_read) as f:
        try:
            if ranges is not None:
                blocks, rest = ranges
                for start, end in blocks:
                    if on_read is not None:
                        on_read(end - start)
                    pending.append((True, pool.submit(_parse_range, path, start, end, columns, joins,  # type: ignore[union-attr]
                                                      floors() if floors else None)))
                    while len(pending) > in_flight:
                        apply_next()
                f.skip_to(rest)
            for kind, payload in line_blocks(f, limits.max_line_bytes):
                if kind == BLOCK:
                    if pool is None:
                        apply(parse_block(payload, lineno, columns=columns, joins=joins,
                                          floors=floors() if floors else None))
                        lineno += payload.count(b"\n")
                    else:
                        pending.append((True, pool.submit(_parse_counted, payload, columns, joins,
                                                          floors() if floors else None)))
                        while len(pending) > in_flight:
                            apply_next()
                elif kind == LONG:
                    if pool is None:
                        lineno += 1
                        problems.bad_line(path, lineno, long_line_message(payload, limits))
                    else:
                        pending.append((False, payload))
                else:
                    while pending:
                        apply_next()
                    apply(parse_block(payload, lineno, last=True, columns=columns, joins=joins))
        except (OSError, EOFError):
            # A file damaged part way: what was read before counts, as it does when read here.
            while pending:
                apply_next()
            raise
        while pending:
            apply_next()
        if f.cut_short:
            problems.cut_short(path, f.cut_message())
    return count


def session_pool(input_bytes: int) -> Executor | None:
    """Worker processes for reading session records among ``input_bytes`` of input: one per
    CPU from :data:`PARALLEL_BYTES` on, when there are several CPUs and forking is safe
    (:func:`~.pool.fork_pool`); ``None`` otherwise. The caller shuts it down."""
    cpus = idle_cpus()
    if input_bytes < PARALLEL_BYTES or cpus < 2:
        return None
    return fork_pool(cpus)


def _parse_range(path: str, start: int, end: int, columns: str | None, joins: bool, floors: tuple | None) -> bytes:
    """:func:`_parse_counted` over the lines of a byte range of a file, read in the worker (:mod:`.ranges`)."""
    return _parse_counted(read_range(path, start, end), columns, joins, floors)


def _parse_counted(data: bytes, columns: str | None, joins: bool, floors: tuple | None) -> bytes:
    """:func:`parse_block` in a worker process: ``(lines in the block, items)`` marshalled, line
    numbers counted from the block's start (the reading process makes them the file's: counting
    a block's lines costs about as much as reading it, so it is done here, beside the parsing)."""
    return marshal.dumps((data.count(b"\n"), parse_block(data, 0, columns=columns, joins=joins, floors=floors)))


def parse_block(data: bytes, lineno: int, packed: bool = False, last: bool = False,
                columns: str | None = None, joins: bool = True,
                floors: tuple[float, float, float] | None = None) -> Any:
    """Parses whole lines of session records into items, in line order.

    Runs in worker processes for large files, so it only touches its arguments.

    Args:
        data: Lines, each ending with a newline (with ``last``: one line without).
        lineno: The number of the line before ``data``'s first.
        packed: Return the items marshalled (to send them from a worker process).
        last: ``data`` is a last line without a newline (a writer may have died
            half way through it).
        columns: Gather the records as columns, keeping this much of what few sessions
            are shown with (``FactsBuilder``'s ``cold``): one ``(_FACTS, facts)`` item
            last (:meth:`.session_facts.FactsBuilder.result`; keys ``(rank, role)``),
            every record kept (no ``_ROW`` or ``_BAD_IF_KEPT`` items).
        joins: With ``columns``: keep what joins annotation lines to sessions.
        floors: With ``columns``: what a session must pass to be kept as a candidate
            (``FactsBuilder``'s ``floors``).

    Returns:
        The items: ``(_ROW, rank, role, fields)`` for a record (``rank`` ``None``
        unless it is an int; ``fields`` as ``make`` takes them after the worker),
        ``(_BAD, line, message)``, ``(_BAD_IF_KEPT, line, message, rank, role)``
        for a record found wrong once its worker was known, ``(_TRUNCATED, line)``.
    """
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    ids_ok = ID_TYPES.issuperset
    items: list[tuple] = []
    out = items.append
    ints: dict[int, int] = {}  # steps and token counts repeat: one object for each value
    lines = [data] if last else data.split(b"\n")
    if not last:
        lines.pop()
    if columns and not last:
        # Records as otel_rl writes them, a few Python operations each; a block with
        # anything else (a line that cannot be used, a blank one) is read again line by line below.
        builder = FactsBuilder(cold=columns, joins=joins, floors=floors)
        if builder.add_lines(lines, lambda rec: _careful(rec, ints), response_length, data,
                             RESPONSE_LENGTH_COUNTERS):
            items = [(_FACTS, builder.result())]
            return marshal.dumps(items) if packed else items
    builder = FactsBuilder(cold=columns, joins=joins, floors=floors) if columns else None
    for line in lines:
        lineno += 1
        if not line or line.isspace():
            continue
        try:
            rec = loads(line)
        except decode_error as exc:
            out((_TRUNCATED, lineno) if last else (_BAD, lineno, str(exc)))
            continue
        if type(rec) is not dict:
            out((_BAD, lineno, "not a JSON object"))
            continue
        get = rec.get
        if "session_id" not in rec:
            out((_BAD, lineno, "not a session record (no session_id)"))
            continue
        rank = get("rank")
        role = get("role")
        if role is not None and type(role) is not str:
            out((_BAD, lineno, "role is not a string"))
            continue
        if not ids_ok(map(type, map(get, _IDS))):
            name = next(name for name in _IDS if type(get(name)) not in ID_TYPES)
            out((_BAD, lineno, f"{name} is not a string or number"))
            continue
        if type(rank) is not int:
            rank = None
        try:
            if builder is None:
                out((_ROW, rank, role, _fields(rec, ints)))
            else:
                builder.add((rank, role) if rank is not None else (None, None), *_fields(rec, ints, False), line=line)
        except (ValueError, TypeError, AttributeError) as exc:
            out((_BAD_IF_KEPT, lineno, str(exc), rank, role) if builder is None else (_BAD, lineno, str(exc)))
    if builder is not None:
        out((_FACTS, builder.result()))
    return marshal.dumps(items) if packed else items


def _fields(rec: dict[str, Any], ints: dict[int, int], packed: bool = True) -> tuple:
    """What a row is made of (all but its worker), checked; ``ints`` shares equal ints.
    ``packed`` false: phases and details as tuples (what ``FactsBuilder.add`` takes)."""
    get = rec.get
    intern = sys.intern
    lo, hi = -MAX_S, MAX_S
    # Plain floats within range pass at once; anything else is checked (and named) by seconds().
    submit = get("submit_ts")
    if not (type(submit) is float and lo < submit < hi):
        submit = seconds(submit, "submit_ts")
    finalized = get("finalized_ts")
    if not (type(finalized) is float and lo < finalized < hi):
        finalized = seconds(finalized, "finalized_ts")
    total = get("total_s")
    if finalized is None:
        total = None  # still open: no duration
    elif total is None:
        if submit is not None:
            total = finalized - submit
    elif not (type(total) is float and lo < total < hi):
        total = seconds(total, "total_s")
    phases = get("phases")
    if phases:
        if type(phases) is not dict:
            raise ValueError("phases is not an object")
        flat: list[Any] = []
        add = flat.extend
        for name, instances in phases.items():
            if type(instances) is not list:
                raise ValueError(f"phases.{name} is not a list")
            name = intern(name)
            for inst in instances:
                try:
                    s = inst["start_ts"]
                    e = inst.get("end_ts")
                except (TypeError, KeyError, AttributeError):
                    raise ValueError(f"phases.{name}: an instance without start_ts") from None
                if not (type(s) is float and type(e) is float and lo < s < hi and lo < e < hi):
                    _check_instance(name, s, e)
                add((name, s, e))
        phases = pack(tuple(flat)) if packed else tuple(flat)
    else:
        phases = ()
    step = get("step")
    if step is None:
        step = get("global_step")
    if type(step) is int:
        step = ints.setdefault(step, step)
    else:
        step = None
    status = get("status") or "unknown"
    if type(status) is not str:
        status = str(status)
    counters = get("counters")
    reason = get("reason")
    if type(reason) is dict or type(reason) is list:
        reason = reason_text(reason)  # shown as text, as structured as it was written
    if type(counters) is dict and counters:
        tokens = response_length(counters)
        if type(tokens) is int:
            tokens = ints.setdefault(tokens, tokens)
    else:
        counters = tokens = None
    if not packed:
        return (intern(status), submit, finalized, total, step, phases, tokens, rec["session_id"],
                get("task_id"), None if reason is None else reason_text(reason), get("span_id"))
    return (intern(status), submit, finalized, total, step, phases, tokens,
            pack_details(get("task_id"), rec["session_id"], reason, counters, get("span_id"), get("trace_id")))


def _careful(rec: dict[str, Any], ints: dict[int, int]) -> tuple:
    """What ``FactsBuilder.add`` takes of a record (all but its line), checked as
    :func:`parse_block` checks it; raises ``ValueError`` for a record it would refuse."""
    get = rec.get
    role = get("role")
    if "session_id" not in rec or (role is not None and type(role) is not str) or \
            not ID_TYPES.issuperset(map(type, map(get, _IDS))):
        raise ValueError("not a usable session record")
    rank = get("rank")
    return ((rank, role) if type(rank) is int else (None, None), *_fields(rec, ints, False))


def record_fields(line: bytes) -> tuple:
    """A row's fields (``make``'s arguments after the worker) from the line of a record
    :func:`parse_block` kept (the values it read, read again)."""
    return _fields(orjson.loads(line), {})


def response_length(counters: dict[str, Any] | None, from_spans: float | None = None) -> float | None:
    """A session's response length: its first counter named in :data:`RESPONSE_LENGTH_COUNTERS`
    that is a number, else ``from_spans`` (output tokens summed over its phase spans) when non-zero."""
    if counters:
        found = _LENGTH_NAMES.intersection(counters)
        if found:
            for name in RESPONSE_LENGTH_COUNTERS if len(found) > 1 else found:
                value = counters.get(name)
                if type(value) is float or type(value) is int:
                    return value
    return from_spans if from_spans else None


def _check_instance(name: str, s: Any, e: Any) -> None:
    """Raises ``ValueError`` unless ``s`` is a time and ``e`` a time or ``None`` (an open phase)."""
    if (type(s) is not float and type(s) is not int) or (
            e is not None and type(e) is not float and type(e) is not int):
        raise ValueError(f"phases.{name}: start_ts / end_ts are not numbers")
    if not -MAX_S < s < MAX_S or (e is not None and not -MAX_S < e < MAX_S):
        raise ValueError(f"phases.{name}: start_ts / end_ts out of range")
