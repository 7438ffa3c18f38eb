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

import marshal
import zlib
from array import array
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
_dumps = marshal.dumps


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
        cold: What to keep of what few sessions are shown with: ``"all"`` (every
            session's, compressed), ``"candidates"`` (only the sessions of a
            candidate list's, for a report that never reads other sessions back)
            or ``"none"`` (the caller keeps the rows).
    """

    def __init__(self, turn_phase: str = TURN_PHASE, candidates: int = CANDIDATES, cold: str = "all") -> None:
        self.turn_phase = turn_phase
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
        self.col_submit: list[Any] = []  # None kept: candidate keys
        self.col_finals: list[Any] = []
        self.ids: list[Any] = []
        self.cold: list[tuple] = []
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
            phases: tuple, tokens: Any, details: tuple) -> None:
        """One session: ``phases`` flat ``(name, start, end, ...)``, ``details``
        ``(task_id, session_id, reason, counters, span_id, trace_id)``."""
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
        self.col_submit.append(submit)
        self.col_finals.append(finalized)
        self.ids.append(details[1])
        if self.keep_cold:
            self.cold.append((submit, step, phases, tokens, details))
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

    def result(self) -> dict[str, Any]:
        """The facts gathered (only ints, floats, strings, bytes, lists, tuples and dicts: marshallable)."""
        n = len(self.col_total)
        total = self.col_total
        submit = self.col_submit
        with_total = [i for i in range(n) if total[i] == total[i]]
        done = [i for i in range(n) if self.done[i]]
        k = self.candidates
        # heapq.nlargest / nsmallest, ties in session order (a stable sort), at C speed.
        top_total = sorted(with_total, key=total.__getitem__, reverse=True)[:k]
        top_done = sorted(done, key=total.__getitem__, reverse=True)[:k]
        first = sorted(done, key=submit.__getitem__)[:k]
        times = [t for t in submit if t is not None]
        times += [t for t in self.col_finals if t is not None]
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
        cold: bytes | dict[int, bytes] = b""
        if self.cold_mode == "all":
            cold = zlib.compress(_dumps(list(map(_dumps, self.cold))), 1)
        elif self.cold_mode == "candidates":
            entries = self.cold
            cold = {i: _dumps(entries[i]) for i in {*top_total, *top_done, *first, *self.first_open}}
        return {
            "n": n, "keys": list(self.keys), "statuses": list(self.statuses), "steps": list(self.steps),
            "key": self.col_key.tobytes(), "status": self.col_status.tobytes(),
            "finalized": self.col_finalized.tobytes(), "total": total.tobytes(),
            "ids": marshal.dumps(self.ids), "cold": cold, "done": bytes(self.done),
            "finalized_n": self.finalized_n, "tmin": min(times, default=None),
            "tmax": max(times, default=None), "exact": self.exact,
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
