"""Clock skew between hosts, told from spans that start before their cross-process parents."""

from __future__ import annotations

from collections import defaultdict

from ._model import RunData


def align_clocks(data: RunData, apply: bool) -> None:
    """Detects workers whose clock is behind, from cross-process parent / child spans.

    A span started from a context another process sent (a server span under a
    client's request span, a worker's span under the trainer's) cannot start
    before its parent did, whatever the messaging in between. When children on
    worker B start before their parents on worker A, B's clock is behind A's
    by at least the largest such gap; B's times are shifted by that much (the
    smallest shift that restores causality). Clocks that agree are never
    touched, and offsets chain from the worker with the most spans.

    Args:
        data: The run; its offsets go to ``data.diagnostics.clock_offsets``.
        apply: Shift the times of the workers found behind (else only report them).
    """
    by_id = {s.span_id: s for s in data.spans if s.span_id}
    need: dict[tuple[str, str], float] = {}
    pairs: dict[frozenset, int] = defaultdict(int)
    violations: dict[tuple[str, str], int] = defaultdict(int)
    for span in data.spans:
        parent = by_id.get(span.parent_id) if span.parent_id else None
        if parent is None or parent.worker == span.worker:
            continue
        key = (parent.worker, span.worker)
        pairs[frozenset(key)] += 1
        gap = parent.start - span.start
        if gap > 0:
            violations[key] += 1
            if gap > need.get(key, 0.0):
                need[key] = gap
    if not pairs:
        return
    counts: dict[str, int] = defaultdict(int)
    for span in data.spans:
        counts[span.worker] += 1
    edges: dict[str, list[tuple[str, float, int, int]]] = defaultdict(list)
    for pair, n in pairs.items():
        a, b = sorted(pair) if len(pair) == 2 else (next(iter(pair)),) * 2
        ab, ba = need.get((a, b), 0.0), need.get((b, a), 0.0)
        v = violations.get((a, b), 0) + violations.get((b, a), 0)
        if ab and ba:
            data.diagnostics.warn(f"clocks of {a} and {b} contradict each other (children start before "
                                  "their parents both ways): not aligned")
            off = 0.0
        else:
            off = -ab if ab else ba  # b's clock minus a's
        edges[a].append((b, off, n, v))
        edges[b].append((a, -off, n, v))
    reference = max(counts, key=lambda w: (counts[w], w))
    offsets = {reference: 0.0}
    frontier = [reference]
    while frontier:
        nxt = []
        for a in frontier:
            for b, off, n, v in edges[a]:
                if b in offsets:
                    continue
                offsets[b] = offsets[a] + off
                nxt.append(b)
                data.diagnostics.clock_offsets.append({
                    "worker": b, "relative_to": reference, "offset_s": offsets[b], "pairs": n,
                    "violations": v, "applied": bool(apply and offsets[b] != 0.0)})
        frontier = nxt
    shift = {w: off for w, off in offsets.items() if off} if apply else {}
    if not shift:
        return
    for span in data.spans:
        d = shift.get(span.worker)
        if d:
            span.start -= d
            span.end -= d
    data.instants = [(w, n, t - shift.get(w, 0.0), a) for w, n, t, a in data.instants]
    data.counters = [(w, n, t - shift.get(w, 0.0), v) for w, n, t, v in data.counters]
    for row in data.sessions:
        d = shift.get(row.worker)
        if not d:
            continue
        if row.submit is not None:
            row.submit -= d
        if row.finalized is not None:
            row.finalized -= d
        p = list(row.phases)
        for i in range(0, len(p), 3):
            p[i + 1] -= d
            if p[i + 2] is not None:
                p[i + 2] -= d
        row.phases = tuple(p)
