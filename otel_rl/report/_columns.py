"""Sessions as columns: what the session views read, without an object per session.

A :class:`SessionTable` is built from blocks of facts (:class:`~otel_rl._internal.read.session_facts.FactsBuilder`
results), gathered while reading (in the parsing worker processes for large inputs), or from
:class:`SessionRow` objects (:meth:`SessionTable.from_rows`). The views are computed from it; the
few sessions a view shows one by one are read back as rows (:meth:`SessionTable.rows`).
:class:`LazySessions` is ``RunData.sessions`` of a run read that way: a sequence of rows, each made
when it is used.
"""

from __future__ import annotations

import bisect
import heapq
import marshal
import zlib
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from functools import reduce
from itertools import compress
from operator import add
from typing import Any

from .._internal.read.session_facts import CANDIDATES, FIRST_OPEN, TURN_PHASE, FactsBuilder, reason_text, unpack_span_ids
from .._internal.read.sessions import record_fields
from ._model import RunData, SessionRow, record_row


def _d(raw: bytes) -> array:
    a = array("d")
    a.frombytes(raw)
    return a


def _u(raw: bytes, code: str = "I") -> array:
    a = array(code)
    a.frombytes(raw)
    return a


class _Block:
    __slots__ = ("start", "n", "workers", "statuses", "steps", "key", "status", "finalized", "total", "ready", "ids", "tasks", "span_ids",
                 "cold", "done")


class SessionTable:
    """The facts of every session of a run, merged in session order."""

    def __init__(self, turn_phase: str = TURN_PHASE, candidates: int = CANDIDATES, cold: str = "all",
                 joins: bool = True) -> None:
        self.cold = cold  # what the blocks keep of the sessions (FactsBuilder's cold)
        self.joins = joins  # whether they keep what joins annotation lines (FactsBuilder's joins)
        self.turn_phase = turn_phase
        self.candidates = candidates
        self.n = 0
        self.blocks: list[_Block] = []
        self._starts: list[int] = []
        self.rows_list: list[SessionRow] | None = None
        self.steps: dict[Any, None] = {}  # every step, in order of first appearance
        self.workers: set[str] = set()
        self.status_counts: Counter = Counter()
        #: (status, reason) -> sessions finalized so (every session, not only those kept as rows)
        self.reasons: Counter = Counter()
        self.finalized_n = 0
        self.tmin: Any = None
        self.tmax: Any = None
        self.exact = True
        # step -> [durations {name: [bytes]}, open {name: n}, with {name: n}, share sums {name: float},
        #          unattributed [bytes], totals [bytes]]
        self.phase: dict[Any, list] = {}
        self.dgroups: dict[tuple[Any, str, str], list[list[bytes]]] = {}
        self.comps: dict[str, list[bytes]] = {}
        self.tokens: dict[Any, list[list[bytes]]] = {}
        self.turns: dict[tuple[Any, int], list[bytes]] = {}
        self.bycount: dict[tuple[Any, int], list[bytes]] = {}
        self.seen = False
        self.top_total = array("I")
        self.top_done = array("I")
        self.first_submit = array("I")
        self.top_total_v = array("d")
        self.top_done_v = array("d")
        self.first_submit_v = array("d")
        self.first_open: list[int] = []
        self._cold: tuple[int, list] | None = None
        self._floors: tuple[float, float, float] | None = None

    @classmethod
    def from_rows(cls, rows: Sequence[SessionRow], turn_phase: str = TURN_PHASE,
                  candidates: int | None = None) -> SessionTable:
        """The table of ``rows`` (every row a candidate unless ``candidates`` says otherwise)."""
        rows = list(rows)
        k = len(rows) if candidates is None else candidates
        table = cls(turn_phase, k)
        builder = FactsBuilder(turn_phase, k, cold="none")
        for r in rows:
            task_id, session_id, reason, _counters, span_id, _trace_id = r.details()
            builder.add(r.worker, r.status, r.submit, r.finalized, r.total, r.step, r.phases, r.tokens,
                        session_id, task_id, None if reason is None else reason_text(reason), span_id)
        facts = builder.result()
        table.add(facts, facts["keys"])
        table.rows_list = rows
        return table

    def add(self, facts: dict[str, Any], workers: list[str]) -> None:
        """Appends a block of sessions: ``facts`` of a ``FactsBuilder``, ``workers`` the worker of each of its keys."""
        b = _Block()
        b.start = start = self.n
        b.n = n = facts["n"]
        if not n:
            return
        b.workers = workers
        b.statuses = statuses = facts["statuses"]
        b.steps = steps = facts["steps"]
        b.key = _u(facts["key"], "H")
        b.status = _u(facts["status"], "H")
        b.finalized = _d(facts["finalized"])
        b.total = _d(facts["total"])
        b.ready = _d(facts["ready"]) if facts["ready"] is not None else None
        b.ids = facts["ids"]
        b.tasks = facts["tasks"]
        b.span_ids = facts["span_ids"]
        for status, reason, count in facts["reasons"]:
            self.reasons[(status, reason)] += count
        b.cold = facts["cold"]
        b.done = facts["done"]
        self.blocks.append(b)
        self._starts.append(start)
        self.n += n
        for s in steps:
            self.steps.setdefault(s, None)
        self.workers.update(workers)
        for i, c in Counter(b.status).items():
            self.status_counts[statuses[i]] += c
        self.finalized_n += facts["finalized_n"]
        for t in (facts["tmin"], facts["tmax"]):
            if t is not None:
                if self.tmin is None or t < self.tmin:
                    self.tmin = t
                if self.tmax is None or t > self.tmax:
                    self.tmax = t
        self.exact = self.exact and facts["exact"]
        for sp, (durations, opened, with_phase, shares, unattr, totals) in facts["phase"].items():
            g = self.phase.get(steps[sp])
            if g is None:
                g = self.phase[steps[sp]] = [{}, {}, {}, {}, [], []]
            for name, raw in durations.items():
                g[0].setdefault(name, []).append(raw)
            for name, c in opened.items():
                g[1][name] = g[1].get(name, 0) + c
            for name, c in with_phase.items():
                g[2][name] = g[2].get(name, 0) + c
            sums = g[3]
            for name, raw in shares.items():
                sums[name] = reduce(add, _d(raw), sums.get(name, 0.0))  # in session order
            g[4].append(unattr)
            g[5].append(totals)
        for (sp, k, st), raws in facts["dgroups"].items():
            group = self.dgroups.setdefault((steps[sp], workers[k], statuses[st]), [[], [], [], []])
            for target, raw in zip(group, raws):
                target.append(raw)
        for k, raw in facts["comps"].items():
            self.comps.setdefault(workers[k], []).append(raw)
        for sp, (tok, tot) in facts["tokens"].items():
            lists = self.tokens.setdefault(steps[sp], [[], []])
            lists[0].append(tok)
            lists[1].append(tot)
        for (sp, t), raw in facts["turns"].items():
            self.turns.setdefault((steps[sp], t), []).append(raw)
        for (sp, c), raw in facts["bycount"].items():
            self.bycount.setdefault((steps[sp], c), []).append(raw)
        self.seen = self.seen or facts["seen"]
        for name in ("top_total", "top_done", "first_submit"):
            getattr(self, name).extend(i + start for i in _u(facts[name]))
            getattr(self, name + "_v").frombytes(facts[name + "_v"])
        if len(self.first_open) < FIRST_OPEN:
            self.first_open.extend(i + start for i in facts["first_open"][:FIRST_OPEN - len(self.first_open)])
        if type(b.cold) is dict and self.n > 2 * self.candidates and len(self.blocks) % 4 == 0:
            self.prune()

    def floors(self) -> tuple[float, float, float] | None:
        """What a session of a block still to come must pass to make a candidate list: the
        worst value of each list, as of the last :meth:`prune`, once each holds ``candidates``
        (``FactsBuilder``'s ``floors``); ``None`` before. Later sessions lose ties, so only a
        strictly better value can enter, and the lists only get better: a block parsed with
        these floors keeps every session that can still be shown."""
        return self._floors

    def prune(self) -> None:
        """Keeps only the sessions that can still make a candidate list (of a table that keeps
        only those: ``FactsBuilder(cold="candidates")``)."""
        keep = set(self.first_open)
        for name in ("top_total", "top_done", "first_submit"):
            ids, values = getattr(self, name), getattr(self, name + "_v")
            pick = heapq.nsmallest if name == "first_submit" else heapq.nlargest
            positions = sorted(pick(self.candidates, range(len(ids)), key=values.__getitem__))
            setattr(self, name, array("I", [ids[j] for j in positions]))
            setattr(self, name + "_v", array("d", [values[j] for j in positions]))
            keep.update(getattr(self, name))
        full = min(len(self.top_total), len(self.top_done), len(self.first_submit)) == self.candidates
        if full and self.candidates:
            self._floors = (min(self.top_total_v), min(self.top_done_v), max(self.first_submit_v))
        # Each block against only the kept sessions that fall in it: a pass over every block's
        # lines at each prune would grow with the square of the blocks.
        kept = sorted(keep)
        for b in self.blocks:
            if type(b.cold) is dict and b.cold:
                lo = bisect.bisect_left(kept, b.start)
                hi = bisect.bisect_left(kept, b.start + b.n, lo)
                if hi - lo < len(b.cold):
                    cold = b.cold
                    b.cold = {j: cold[j] for j in (i - b.start for i in kept[lo:hi]) if j in cold}

    # --- one session ----------------------------------------------------------------------------
    def _at(self, i: int) -> tuple[_Block, int]:
        b = self.blocks[bisect.bisect_right(self._starts, i) - 1]
        return b, i - b.start

    def largest(self, k: int, which: str = "top_done") -> list[int]:
        """The ``k`` sessions of a candidate list first by its value (largest totals, or for
        ``first_submit`` smallest submissions), ties in session order."""
        ids, values = getattr(self, which), getattr(self, which + "_v")
        pick = heapq.nsmallest if which == "first_submit" else heapq.nlargest
        return [ids[j] for j in pick(k, range(len(ids)), key=values.__getitem__)]

    def done_indices(self) -> list[int]:
        """Indices of the finished sessions (a total, a submission and a finalization), in order."""
        done: list[int] = []
        for b in self.blocks:
            done += compress(range(b.start, b.start + b.n), b.done)
        return done

    def scatter_point(self, i: int) -> tuple[float, float, str, str, Any]:
        """``(finalized, total, status, worker, session_id)`` of a session, without reading it back whole."""
        if self.rows_list is not None:
            r = self.rows_list[i]
            return r.finalized, r.total, r.status, r.worker, r.session_id  # type: ignore[return-value]
        b, j = self._at(i)
        if type(b.ids) is bytes:
            b.ids = marshal.loads(b.ids)
        return (b.finalized[j], b.total[j], b.statuses[b.status[j]], b.workers[b.key[j]],
                b.ids[j])  # type: ignore[index]

    def lookup(self, wanted: set[Any]) -> dict[Any, tuple[str, str, float, float] | None]:
        """``key -> (worker, status, ready, total)`` of the sessions ``wanted`` names, each by its
        session span's id (hex text) or by ``(task_id, session_id)``; a pair that several sessions
        have (ids repeat across processes) maps to ``None``. ``ready``: the end of the session's
        last phase, else its finalization; NaN when unknown, as is an unknown total. Read from the
        columns: every session looked at, none read back."""
        out: dict[Any, tuple[str, str, float, float] | None] = {}
        if not wanted:
            return out
        nan = float("nan")

        def found(keys: tuple, value: tuple[str, str, float, float]) -> None:
            span_id, pair = keys
            if span_id in wanted:
                out[span_id] = value
            if pair in wanted:
                out[pair] = None if pair in out else value

        if self.rows_list is not None:
            for r in self.rows_list:
                task_id, session_id, _reason, _counters, span_id, _trace_id = r.details()
                if span_id not in wanted and (task_id, session_id) not in wanted:
                    continue
                ends = [e for e in r.phases[2::3] if e is not None]
                ready = max(ends) if ends else nan if r.finalized is None else r.finalized
                found((span_id, (task_id, session_id)), (r.worker, r.status, ready, nan if r.total is None else r.total))
            return out
        for b in self.blocks:
            if b.ready is None:
                raise LookupError("sessions read without what joins annotation lines to them")
            if type(b.ids) is bytes:
                b.ids = marshal.loads(b.ids)
            tasks = marshal.loads(b.tasks) if type(b.tasks) is bytes else b.tasks
            span_ids = unpack_span_ids(b.span_ids) if type(b.span_ids) is bytes else b.span_ids
            for j, (span_id, pair) in enumerate(zip(span_ids, zip(tasks, b.ids))):
                if span_id in wanted or pair in wanted:
                    found((span_id, pair), (b.workers[b.key[j]], b.statuses[b.status[j]], b.ready[j], b.total[j]))
        return out

    def row(self, i: int) -> SessionRow:
        """Session ``i``, read back (a new row each time, for a table of rows the row itself)."""
        if self.rows_list is not None:
            return self.rows_list[i]
        b, j = self._at(i)
        if type(b.cold) is dict:
            entry = b.cold.get(j)
            if entry is None:
                raise LookupError(f"session {i} was not kept (read for a report that does not show it)")
        else:
            if self._cold is None or self._cold[0] != b.start:
                self._cold = (b.start, zlib.decompress(b.cold).split(b"\n"))
            entry = self._cold[1][j]
        return record_row(b.workers[b.key[j]], *record_fields(entry))

    def rows(self, indices: Sequence[int]) -> list[SessionRow]:
        """Sessions read back, in the order asked (each compressed block is read once)."""
        out: dict[int, SessionRow] = {}
        for i in sorted(set(indices)):
            out[i] = self.row(i)
        return [out[i] for i in indices]


class LazySessions(Sequence):
    """``RunData.sessions`` of a run read as columns: each :class:`SessionRow` is made when it is used
    (a new one each time). Appending to it turns it into a plain list of rows first."""

    def __init__(self, table: SessionTable) -> None:
        self.table = table

    def __len__(self) -> int:
        return self.table.n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self.table.row(i) for i in range(*index.indices(self.table.n))]
        n = self.table.n
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("session index out of range")
        return self.table.row(index)

    def __iter__(self) -> Iterator[SessionRow]:
        row = self.table.row
        for i in range(self.table.n):
            yield row(i)

    def __bool__(self) -> bool:
        return self.table.n > 0

    def __eq__(self, other: object) -> bool:
        return list(self) == other if isinstance(other, list) else NotImplemented


def session_table(data: RunData, turn_phase: str = TURN_PHASE, candidates: int = 0) -> SessionTable:
    """The table of ``data``'s sessions: the one built while reading when it answers what is asked
    (its turn phase; ``candidates`` sessions in each candidate list), else one built from the rows."""
    sessions = data.sessions
    if isinstance(sessions, LazySessions):
        table = sessions.table
        if table.turn_phase == turn_phase and table.candidates >= candidates and table.exact:
            return table
    return SessionTable.from_rows(sessions, turn_phase)
