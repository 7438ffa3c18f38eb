"""What the report's session views need of a block of sessions, as compact columns.

A report over a million sessions cannot afford a Python object per session,
nor a pass over each in the process that builds the report: the facts the
views are computed from are gathered here, a block of sessions at a time
(in the worker process that parsed the block, for large inputs), as arrays
of floats grouped the way the views group them, already sorted where a view
sorts. What only a few sessions are shown with (phases, ids, reason,
counters) is kept as the record's own line (compressed when every one is
kept), and read again for those few.

Every value is computed with the same operations, in the same order, as a
view over the sessions themselves would: the report is the same to the last
digit whichever way it was built. Sums whose value depends on their order
(``avg_share``) are kept as the values in session order and summed by the
caller in that order.
"""

from __future__ import annotations

import marshal
import math
import sys
import zlib
from array import array
from collections.abc import Callable
from itertools import chain
from operator import itemgetter
from typing import Any

import orjson

from .checks import ID_TYPES, MAX_S
from .compiled import facts_native as _native
from .compiled import powers_of_five

__all__ = ["CANDIDATES", "FIRST_OPEN", "TURN_PHASE", "UNATTRIBUTED", "FactsBuilder", "covered_length"]

#: The phase whose instances are turns, when no other is asked for.
TURN_PHASE = "generate"
#: Name of the row for session time spent in no phase.
UNATTRIBUTED = "(unattributed)"
#: Per block, the most sessions kept as candidates for each "slowest" / "first" list.
CANDIDATES = 2000
#: Sessions never finalized listed as examples.
FIRST_OPEN = 10
_NAN = float("nan")
# What add_lines reads of a record: its fields, the ids it only checks, a phase instance's times.
_FIELDS = itemgetter("session_id", "rank", "role", "status", "submit_ts", "finalized_ts", "total_s", "step",
                     "phases", "counters", "task_id", "span_id", "trace_id")
_OPEN = b'"end_ts":null'
_SPAN = itemgetter("start_ts", "end_ts")
_END = itemgetter(1)


def pack_span_ids(span_ids: list[Any]) -> bytes:
    """Session span ids, as 8 bytes each (``b"Q"`` then an ``array("Q")``) when every one is 16 hex
    digits, the way otel_rl writes them: an eighth of the memory of the text; else marshalled."""
    try:
        if all(len(s) == 16 for s in span_ids):
            return b"Q" + array("Q", [int(s, 16) for s in span_ids]).tobytes()
    except (TypeError, ValueError):
        pass
    return b"M" + marshal.dumps(span_ids)


def unpack_span_ids(packed: bytes) -> list[Any]:
    """The span ids :func:`pack_span_ids` packed (as hex text)."""
    if packed[:1] == b"Q":
        ids = array("Q")
        ids.frombytes(packed[1:])
        return [f"{i:016x}" for i in ids]
    return marshal.loads(packed[1:])


def reason_text(reason: Any) -> str:
    """A finalization reason as text: a structured one as the JSON it was written as."""
    if type(reason) is str:
        return reason
    if type(reason) is dict or type(reason) is list:
        return orjson.dumps(reason).decode()
    return str(reason)


def covered_length(spans: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals (sorted in place)."""
    if len(spans) == 1:
        s, e = spans[0]
        return e - s
    spans.sort()
    total = 0.0
    cur_s, cur_e = spans[0]
    for s, e in spans:
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    return total + cur_e - cur_s


def _components(pairs: list[tuple[float, float]]) -> list[float]:
    """The union of ``(start, end)`` intervals as disjoint ``[s0, e0, s1, e1, ...]`` (touching ones merged)."""
    if not pairs:
        return []
    pairs.sort()
    out: list[float] = []
    cur_s, cur_e = pairs[0]
    for s, e in pairs:
        if s > cur_e:
            out += (cur_s, cur_e)
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    out += (cur_s, cur_e)
    return out


def _sorted(values: list[float]) -> bytes:
    values.sort()
    return array("d", values).tobytes()


class FactsBuilder:
    """Gathers the facts of sessions added one at a time (:meth:`add`); :meth:`result` gives them.

    Args:
        turn_phase: The phase whose instances are turns.
        candidates: How many sessions to keep in each candidate list.
        cold: What to keep of the lines the sessions were read from (:meth:`add`'s
            ``line``), for what few sessions are shown with: ``"all"`` (every
            session's, compressed), ``"candidates"`` (only the sessions of a
            candidate list's, for a report that never reads other sessions back)
            or ``"none"`` (the caller keeps the rows).
        joins: Keep what joins annotation lines (``otel_rl.consume`` / ``annotate``) to
            sessions: task and span ids, when each sample was ready (its last phase's end).
        floors: ``(total, total, submission)``: only sessions past them can still make the
            candidate lists (totals above the first for the slowest, above the second for the
            slowest finished, submissions below the third for the first submitted), as the
            lists of the sessions before this block stand (:meth:`SessionTable.floors`): the
            others are not kept as candidates.
    """

    def __init__(self, turn_phase: str = TURN_PHASE, candidates: int = CANDIDATES, cold: str = "all",
                 joins: bool = True, floors: tuple[float, float, float] | None = None) -> None:
        self.turn_phase = turn_phase
        self.floors = floors
        self.joins = joins
        self.candidates = candidates
        self.keep_cold = cold != "none"
        self.cold_mode = cold
        self.keys: dict[Any, int] = {}
        self.statuses: dict[Any, int] = {}
        self.steps: dict[Any, int] = {}
        self.col_key = array("H")
        self.col_status = array("H")
        self.col_finalized = array("d")
        self.col_total = array("d")
        # When the session's sample was ready: its last phase's end (else its finalization).
        self.col_ready = array("d")
        self.col_submit: list[Any] = []  # None kept: candidate keys
        self.col_finals: list[Any] = []
        self.ids: list[Any] = []
        self.tasks: list[Any] = []
        self.span_ids: list[Any] = []
        # (status, reason) -> sessions that ended so: why sessions were rejected or dropped, for every session
        self.reasons: dict[tuple[Any, str], int] = {}
        self.lines: list[bytes] = []
        self.done = bytearray()
        self.finalized_n = 0
        self.exact = True  # every time a float (or None): what the columns hold is what was read
        self.phase: dict[int, list] = {}
        self.dgroups: dict[tuple[int, int, int], list[list[float]]] = {}
        self.tokens: dict[int, list[list[float]]] = {}
        self.turns: dict[tuple[int, int], list[float]] = {}
        self.bycount: dict[tuple[int, int], list[float]] = {}
        self.seen = False
        self.first_open: list[int] = []

    def add(self, key: Any, status: Any, submit: Any, finalized: Any, total: Any, step: Any,
            phases: tuple, tokens: Any, session_id: Any, task_id: Any = None, reason: Any = None,
            span_id: Any = None, line: bytes = b"") -> None:
        """One session: ``phases`` flat ``(name, start, end, ...)``, ``reason`` its finalization
        reason as text, ``line`` the record it was read from (kept as ``cold`` says)."""
        i = len(self.col_total)
        table = self.keys
        k = table.get(key)
        if k is None:
            k = table[key] = len(table)
        table = self.statuses
        st = table.get(status)
        if st is None:
            st = table[status] = len(table)
        table = self.steps
        sp = table.get(step)
        if sp is None:
            sp = table[step] = len(table)
        self.col_key.append(k)
        self.col_status.append(st)
        self.col_finalized.append(_NAN if finalized is None else finalized)
        self.col_total.append(_NAN if total is None else total)
        ends = [e for e in phases[2::3] if e is not None]
        self.col_ready.append(max(ends) if ends else _NAN if finalized is None else finalized)
        self.col_submit.append(submit)
        self.col_finals.append(finalized)
        self.ids.append(session_id)
        self.tasks.append(task_id)
        self.span_ids.append(span_id)
        if reason is not None:
            self.reasons[(status, reason)] = self.reasons.get((status, reason), 0) + 1
        if self.keep_cold:
            self.lines.append(line)
        if not ((type(submit) is float or submit is None) and (type(finalized) is float or finalized is None)
                and (type(total) is float or total is None)):
            self.exact = False
        if finalized is None:
            if len(self.first_open) < FIRST_OPEN:
                self.first_open.append(i)
        else:
            self.finalized_n += 1
        # The phase breakdown (every session, grouped by step).
        g = self.phase.get(sp)
        if g is None:
            g = self.phase[sp] = [{}, {}, {}, {}, [], []]
        durations, opened, with_phase, shares, unattr, totals = g
        per: dict[str, float] = {}
        spans: list[tuple[float, float]] = []
        turn = self.turn_phase
        inst = []
        for j in range(0, len(phases), 3):
            name = phases[j]
            end = phases[j + 2]
            if end is None:
                opened[name] = opened.get(name, 0) + 1
                continue
            start = phases[j + 1]
            d = end - start
            values = durations.get(name)
            if values is None:
                durations[name] = [d]
            else:
                values.append(d)
            per[name] = per.get(name, 0.0) + d
            spans.append((start, end))
            if name == turn:
                inst.append((start, end))
        if total is not None:
            totals.append(total)
            unattributed = total - covered_length(spans) if spans else total
            if unattributed < 0.0:
                unattributed = 0.0
            unattr.append(unattributed)
            for name in per:
                with_phase[name] = with_phase.get(name, 0) + 1
            if total > 0:
                for name, d in per.items():
                    values = shares.get(name)
                    if values is None:
                        shares[name] = [d / total]
                    else:
                        values.append(d / total)
                values = shares.get(UNATTRIBUTED)
                if values is None:
                    shares[UNATTRIBUTED] = [unattributed / total]
                else:
                    values.append(unattributed / total)
        if total is None or submit is None or finalized is None:
            self.done.append(0)
            return
        # Finished sessions: the long tail and the lifecycle.
        self.done.append(1)
        group = self.dgroups.get((sp, k, st))
        if group is None:
            group = self.dgroups[(sp, k, st)] = [[], [], [], []]
        group[0].append(submit)
        group[1].append(finalized)
        group[2].append(total)
        group[3].append(finalized - submit)
        if tokens is not None:
            tok = self.tokens.get(sp)
            if tok is None:
                tok = self.tokens[sp] = [[], []]
            tok[0].append(float(tokens))
            tok[1].append(float(total))
        n = len(inst)
        if n > 1:
            inst.sort()
        if n:
            self.seen = True
        values = self.bycount.get((sp, n))
        if values is None:
            self.bycount[(sp, n)] = [total]
        else:
            values.append(total)
        turns = self.turns
        for t, (s, e) in enumerate(inst, 1):
            values = turns.get((sp, t))
            if values is None:
                turns[(sp, t)] = [e - s]
            else:
                values.append(e - s)

    def add_lines(self, lines: list[bytes], careful: Callable[[dict[str, Any]], tuple],
                  tokens_of: Callable[[dict[str, Any]], Any], block: bytes | None = None,
                  counter_names: tuple[str, ...] | None = None) -> bool:
        """Adds a session per line of otel_rl's session records, most at a few Python
        operations each: a record with every field this reads, of the types otel_rl
        writes (times floats in range, phases closed), is added here, any other by
        ``careful(record)`` (``(key, status, submit, finalized, total, step, phases,
        tokens, session_id)`` as :meth:`add` takes them; raises ``ValueError``,
        ``TypeError`` or ``AttributeError`` for a record that cannot be used).

        Returns ``False``, the builder then spoiled, when a line is not a JSON object
        with a ``session_id``, when ``careful`` refuses a record, or when what is
        checked in bulk (ids, phase times) does not hold: the caller then reads the
        lines one by one, naming each line that cannot be used. ``block``: the lines as read,
        if the caller has them. ``counter_names``: ``tokens_of`` answers the first of these
        counters a record holds as a number (the compiled loop then reads them itself).
        """
        # A phase still open ("end_ts": null) is read by careful(); a line can only hold one where it says so.
        open_phases = _OPEN in block if block is not None else any(_OPEN in line for line in lines)
        try:
            if _native is not None:
                return _native.add_lines(self, lines, careful, tokens_of, open_phases, counter_names)
            return self._add_lines(lines, careful, tokens_of, open_phases)
        except (KeyError, TypeError, AttributeError, ValueError):
            return False  # a phase that is not a list of {start_ts, end_ts}: a line that cannot be used

    def _add_lines(self, lines: list[bytes], careful: Callable[[dict[str, Any]], tuple],
                   tokens_of: Callable[[dict[str, Any]], Any], open_phases: bool) -> bool:
        # The specification of ``_facts_native.add_lines``, which follows it statement by statement.
        loads = orjson.loads
        decode_error = orjson.JSONDecodeError
        fields = _FIELDS
        span_of = _SPAN
        keys, statuses, steps = self.keys, self.statuses, self.steps
        # (key, status, finalized, total, submit, session_id, task_id, span_id, ready, line)
        rows: list[tuple] = []
        reasons = self.reasons
        row = rows.append
        phase, dgroups, tokens_by, turns, bycount = self.phase, self.dgroups, self.tokens, self.turns, self.bycount
        turn = self.turn_phase
        lo, hi = -MAX_S, MAX_S
        other_ids: list[tuple] = []
        checked = other_ids.append
        times: list[list[tuple[float, float]]] = []
        add_times = times.append
        last_sp = -1
        seen = False
        g: list = []
        for line in lines:
            try:
                rec = loads(line)
            except decode_error:
                return False
            try:
                (sid, rank, role, status, submit, finalized, total, step, phases, counters, task_id, span_id,
                 trace_id) = fields(rec)
            except KeyError:
                rec_ok = False
            else:
                checked((sid, task_id, span_id, trace_id))
                rec_ok = (submit.__class__ is float and finalized.__class__ is float and total.__class__ is float
                          and lo < submit < hi and lo < finalized < hi and lo < total < hi
                          and phases.__class__ is dict and status.__class__ is str and status != ""
                          and not (open_phases and _OPEN in line))
            if not rec_ok:
                self._flush(rows)
                self.add(*careful(rec), line=line)
                continue
            if role is not None and role.__class__ is not str:
                return False
            key = (rank, role) if rank.__class__ is int else (None, None)
            k = keys.get(key)
            if k is None:
                k = keys[key] = len(keys)
            st = statuses.get(status)
            if st is None:
                st = statuses[sys.intern(status)] = len(statuses)
            if step is None:
                step = rec.get("global_step")
            if step.__class__ is not int:
                step = None
            sp = steps.get(step)
            if sp is None:
                sp = steps[step] = len(steps)
            reason = rec.get("reason")
            if reason is not None:
                why = (status, reason if reason.__class__ is str else reason_text(reason))
                reasons[why] = reasons.get(why, 0) + 1
            if sp != last_sp:
                g = phase.get(sp)
                if g is None:
                    g = phase[sp] = [{}, {}, {}, {}, [], []]
                last_sp = sp
            durations, _, with_phase, shares, unattr, totals = g
            spans: list[tuple[float, float]] = []
            inst: list[tuple[float, float]] = []
            positive = total > 0
            for name, instances in phases.items():
                if len(instances) == 1 and instances.__class__ is list:  # the usual case
                    pair = span_of(instances[0])
                    spans.append(pair)
                    if name == turn:
                        inst = [pair]
                    d = pair[1] - pair[0]
                    values = durations.get(name)
                    if values is None:
                        durations[name] = [d]
                    else:
                        values.append(d)
                    d = 0.0 + d
                else:
                    if not instances:
                        if instances.__class__ is not list:
                            return False
                        continue
                    pairs = list(map(span_of, instances))
                    spans += pairs
                    if name == turn:
                        inst = pairs
                    ds = [e - s for s, e in pairs]
                    values = durations.get(name)
                    if values is None:
                        durations[name] = ds
                    else:
                        values += ds
                    d = 0.0
                    for x in ds:
                        d += x
                with_phase[name] = with_phase.get(name, 0) + 1
                if positive:
                    values = shares.get(name)
                    if values is None:
                        shares[name] = [d / total]
                    else:
                        values.append(d / total)
            totals.append(total)
            if spans:
                add_times(spans)
                if len(spans) == 1:
                    s, e = spans[0]
                    unattributed = total - (e - s)
                else:
                    unattributed = total - covered_length(spans)
                if unattributed < 0.0:
                    unattributed = 0.0
                ready = max(map(_END, spans))
            else:
                unattributed = total
                ready = finalized
            row((k, st, finalized, total, submit, sid, task_id, span_id, ready, line))
            unattr.append(unattributed)
            if positive:
                values = shares.get(UNATTRIBUTED)
                if values is None:
                    shares[UNATTRIBUTED] = [unattributed / total]
                else:
                    values.append(unattributed / total)
            group = dgroups.get((sp, k, st))
            if group is None:
                group = dgroups[(sp, k, st)] = [[], [], [], []]
            group[0].append(submit)
            group[1].append(finalized)
            group[2].append(total)
            group[3].append(finalized - submit)
            if counters.__class__ is dict and counters:
                tokens = tokens_of(counters)
                if tokens is not None:
                    tok = tokens_by.get(sp)
                    if tok is None:
                        tok = tokens_by[sp] = [[], []]
                    tok[0].append(float(tokens))
                    tok[1].append(total)
            n = len(inst)
            values = bycount.get((sp, n))
            if values is None:
                bycount[(sp, n)] = [total]
            else:
                values.append(total)
            if n == 1:
                seen = True
                s, e = inst[0]
                values = turns.get((sp, 1))
                if values is None:
                    turns[(sp, 1)] = [e - s]
                else:
                    values.append(e - s)
            elif n:
                seen = True
                t = 0
                for s, e in sorted(inst):
                    t += 1
                    values = turns.get((sp, t))
                    if values is None:
                        turns[(sp, t)] = [e - s]
                    else:
                        values.append(e - s)
        self._flush(rows)
        if seen:
            self.seen = True
        # What was not checked record by record: the ids' JSON types, the phases' times.
        if not ID_TYPES.issuperset(map(type, chain.from_iterable(other_ids))):
            return False
        values = list(chain.from_iterable(chain.from_iterable(times)))
        if values and not (set(map(type, values)) == {float} and lo < min(values) and max(values) < hi):
            return False
        return True

    def _flush_columns(self, keys: bytes, statuses: bytes, finalized: bytes, total: bytes, ready: bytes) -> None:
        """Appends the array columns of finished sessions the compiled loop gathered (packed as the
        arrays hold them; it appends to the list columns itself)."""
        n = len(total) // 8
        self.col_key.frombytes(keys)
        self.col_status.frombytes(statuses)
        self.col_finalized.frombytes(finalized)
        self.col_total.frombytes(total)
        self.col_ready.frombytes(ready)
        self.done += b"\x01" * n
        self.finalized_n += n

    def _flush(self, rows: list[tuple]) -> None:
        """Appends the columns of finished sessions held as rows by :meth:`add_lines` (and clears them)."""
        if not rows:
            return
        k, st, finalized, total, submit, sid, task, span, ready, line = zip(*rows)
        self.col_key.extend(k)
        self.col_status.extend(st)
        self.col_finalized.extend(finalized)
        self.col_total.extend(total)
        self.col_ready.extend(ready)
        self.col_submit += submit
        self.col_finals += finalized
        self.ids += sid
        self.tasks += task
        self.span_ids += span
        if self.keep_cold:
            self.lines += line
        self.done += b"\x01" * len(rows)
        self.finalized_n += len(rows)
        rows.clear()

    def result(self) -> dict[str, Any]:
        """The facts gathered (only ints, floats, strings, bytes, lists, tuples and dicts: marshallable)."""
        n = len(self.col_total)
        total = self.col_total
        submit = self.col_submit
        k = self.candidates
        if _native is not None:
            top_total, top_done, first = _native.candidates(total, self.done, submit, k, self.floors)
            tmin, tmax = _native.extent(submit, self.col_finals)
        else:
            above_total, above_done, below_submit = self.floors or (-math.inf, -math.inf, math.inf)
            with_total = [i for i in range(n) if total[i] == total[i] and total[i] > above_total]
            finished = [i for i in range(n) if self.done[i]]
            done = [i for i in finished if total[i] > above_done]
            first = [i for i in finished if submit[i] < below_submit]
            # heapq.nlargest / nsmallest, ties in session order (a stable sort), at C speed.
            top_total = sorted(with_total, key=total.__getitem__, reverse=True)[:k]
            top_done = sorted(done, key=total.__getitem__, reverse=True)[:k]
            first = sorted(first, key=submit.__getitem__)[:k]
            times = [t for t in submit if t is not None]
            times += [t for t in self.col_finals if t is not None]
            tmin, tmax = min(times, default=None), max(times, default=None)
        by_key: dict[int, list] = {}  # (submissions, finalizations) of each group, per key
        dgroups = {}
        for g, (s, f, t, spans) in self.dgroups.items():
            by_key.setdefault(g[1], []).append((s, f))
            dgroups[g] = (_sorted(s), _sorted(f), _sorted(t), array("d", spans).tobytes())
        phase = {}
        for sp, (durations, opened, with_phase, shares, unattr, totals) in self.phase.items():
            phase[sp] = ({name: _sorted(v) for name, v in durations.items()}, opened, with_phase,
                         {name: array("d", v).tobytes() for name, v in shares.items()},
                         _sorted(unattr), _sorted(totals))
        cold: bytes | dict[int, bytes] = b""
        if self.cold_mode == "all":
            cold = zlib.compress(b"\n".join(self.lines), 1)
        elif self.cold_mode == "candidates":
            lines = self.lines
            cold = {i: lines[i] for i in {*top_total, *top_done, *first, *self.first_open}}
        return {
            "n": n, "keys": list(self.keys), "statuses": list(self.statuses), "steps": list(self.steps),
            "key": self.col_key.tobytes(), "status": self.col_status.tobytes(),
            "finalized": self.col_finalized.tobytes(), "total": total.tobytes(),
            "ids": marshal.dumps(self.ids),
            "tasks": marshal.dumps(self.tasks) if self.joins else None,
            "span_ids": pack_span_ids(self.span_ids) if self.joins else None,
            "ready": self.col_ready.tobytes() if self.joins else None,
            "reasons": [(status, reason, n) for (status, reason), n in self.reasons.items()], "cold": cold, "done": bytes(self.done),
            "finalized_n": self.finalized_n, "tmin": tmin, "tmax": tmax, "exact": self.exact,
            "phase": phase, "dgroups": dgroups,
            "comps": {key: _native.components(groups) if _native is not None else
                      array("d", _components([p for s, f in groups for p in zip(s, f)])).tobytes()
                      for key, groups in by_key.items()},
            "tokens": {sp: (array("d", v[0]).tobytes(), array("d", v[1]).tobytes())
                       for sp, v in self.tokens.items()},
            "turns": {g: _sorted(v) for g, v in self.turns.items()},
            "bycount": {g: _sorted(v) for g, v in self.bycount.items()},
            "seen": self.seen,
            "top_total": array("I", top_total).tobytes(), "top_done": array("I", top_done).tobytes(),
            "first_submit": array("I", first).tobytes(), "first_open": list(self.first_open),
            "top_total_v": array("d", map(total.__getitem__, top_total)).tobytes(),
            "top_done_v": array("d", map(total.__getitem__, top_done)).tobytes(),
            "first_submit_v": array("d", map(submit.__getitem__, first)).tobytes(),
        }


if _native is not None:
    _native.configure(orjson.loads, reason_text, MAX_S, UNATTRIBUTED, powers_of_five())
