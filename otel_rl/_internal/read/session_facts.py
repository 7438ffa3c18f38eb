"""What the report's session views need of a block of sessions, as compact columns.

A report over a million sessions cannot afford a Python object per session,
nor a pass over each in the process that builds the report: the facts the
views are computed from are gathered here, a block of sessions at a time
(in the worker process that parsed the block, for large inputs), as arrays
of floats grouped the way the views group them, already sorted where a view
sorts. What only a few sessions are shown with (phases, ids, reason,
counters) is kept per session, compressed, and read back for those few.

Every value is computed with the same operations, in the same order, as a
view over the sessions themselves would: the report is the same to the last
digit whichever way it was built. Sums whose value depends on their order
(``avg_share``) are kept as the values in session order and summed by the
caller in that order.
"""

from __future__ import annotations

import heapq
import marshal
import zlib
from array import array
from collections.abc import Callable
from typing import Any

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


def _index(table: dict[Any, int]) -> Callable[[Any], int]:
    def index(value: Any) -> int:
        i = table.get(value)
        if i is None:
            i = table[value] = len(table)
        return i
    return index


def _sorted(values: list[float]) -> bytes:
    values.sort()
    return array("d", values).tobytes()


class FactsBuilder:
    """Gathers the facts of sessions added one at a time (:meth:`add`); :meth:`result` gives them.

    Args:
        turn_phase: The phase whose instances are turns.
        candidates: How many sessions to keep in each candidate list.
        cold: Keep what few sessions are shown with, compressed (the rows are
            not kept elsewhere).
    """

    def __init__(self, turn_phase: str = TURN_PHASE, candidates: int = CANDIDATES, cold: bool = True) -> None:
        self.turn_phase = turn_phase
        self.candidates = candidates
        self.keep_cold = cold
        self.keys: dict[Any, int] = {}
        self.statuses: dict[Any, int] = {}
        self.steps: dict[Any, int] = {}
        self.key_of = _index(self.keys)
        self.status_of = _index(self.statuses)
        self.step_of = _index(self.steps)
        self.col_key = array("H")
        self.col_status = array("H")
        self.col_finalized = array("d")
        self.col_total = array("d")
        self.col_submit: list[Any] = []  # None kept: candidate keys
        self.ids: list[Any] = []
        self.cold: list[bytes] = []
        self.done = bytearray()
        self.finalized_n = 0
        self.tmin: Any = None
        self.tmax: Any = None
        self.exact = True  # every time a float (or None): what the columns hold is what was read
        self.phase: dict[int, list] = {}
        self.dgroups: dict[tuple[int, int, int], list[list[float]]] = {}
        self.tokens: dict[int, list[list[float]]] = {}
        self.turns: dict[tuple[int, int], list[float]] = {}
        self.bycount: dict[tuple[int, int], list[float]] = {}
        self.seen = False
        self.first_open: list[int] = []

    def add(self, key: Any, status: Any, submit: Any, finalized: Any, total: Any, step: Any,
            phases: tuple, tokens: Any, details: tuple) -> None:
        """One session: ``phases`` flat ``(name, start, end, ...)``, ``details``
        ``(task_id, session_id, reason, counters, span_id, trace_id)``."""
        i = len(self.col_total)
        k = self.key_of(key)
        st = self.status_of(status)
        sp = self.step_of(step)
        self.col_key.append(k)
        self.col_status.append(st)
        self.col_finalized.append(_NAN if finalized is None else finalized)
        self.col_total.append(_NAN if total is None else total)
        self.col_submit.append(submit)
        self.ids.append(details[1])
        if self.keep_cold:
            self.cold.append(marshal.dumps((submit, step, phases, tokens, details)))
        for t in (submit, finalized, total):
            if t is not None:
                if type(t) is not float:
                    self.exact = False
                    break
        for t in (submit, finalized):
            if t is not None:
                if self.tmin is None or t < self.tmin:
                    self.tmin = t
                if self.tmax is None or t > self.tmax:
                    self.tmax = t
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
                    shares.setdefault(name, []).append(d / total)
                shares.setdefault(UNATTRIBUTED, []).append(unattributed / total)
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
        turn = self.turn_phase
        inst = [(phases[j + 1], phases[j + 2]) for j in range(0, len(phases), 3)
                if phases[j] == turn and phases[j + 2] is not None]
        n = len(inst)
        if n > 1:
            inst.sort()
        if n:
            self.seen = True
        self.bycount.setdefault((sp, n), []).append(total)
        for t, (s, e) in enumerate(inst, 1):
            self.turns.setdefault((sp, t), []).append(e - s)

    def result(self) -> dict[str, Any]:
        """The facts gathered (only ints, floats, strings, bytes, lists, tuples and dicts: marshallable)."""
        n = len(self.col_total)
        total = self.col_total
        submit = self.col_submit
        with_total = [i for i in range(n) if total[i] == total[i]]
        done = [i for i in range(n) if self.done[i]]
        k = self.candidates
        top_total = heapq.nlargest(k, with_total, key=total.__getitem__)
        top_done = heapq.nlargest(k, done, key=total.__getitem__)
        first = heapq.nsmallest(k, done, key=submit.__getitem__)
        by_key: dict[int, list[tuple[float, float]]] = {}
        dgroups = {}
        for g, (s, f, t, spans) in self.dgroups.items():
            by_key.setdefault(g[1], []).extend(zip(s, f))
            dgroups[g] = (_sorted(s), _sorted(f), _sorted(t), array("d", spans).tobytes())
        phase = {}
        for sp, (durations, opened, with_phase, shares, unattr, totals) in self.phase.items():
            phase[sp] = ({name: _sorted(v) for name, v in durations.items()}, opened, with_phase,
                         {name: array("d", v).tobytes() for name, v in shares.items()},
                         _sorted(unattr), _sorted(totals))
        cold = b""
        if self.keep_cold:
            cold = zlib.compress(marshal.dumps(self.cold), 1)
        return {
            "n": n, "keys": list(self.keys), "statuses": list(self.statuses), "steps": list(self.steps),
            "key": self.col_key.tobytes(), "status": self.col_status.tobytes(),
            "finalized": self.col_finalized.tobytes(), "total": total.tobytes(),
            "ids": marshal.dumps(self.ids), "cold": cold, "done": bytes(self.done),
            "finalized_n": self.finalized_n, "tmin": self.tmin, "tmax": self.tmax, "exact": self.exact,
            "phase": phase, "dgroups": dgroups,
            "comps": {key: array("d", _components(pairs)).tobytes() for key, pairs in by_key.items()},
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
