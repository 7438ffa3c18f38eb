"""The session views over columns gathered while reading are the views over the rows themselves.

A run read with every record kept (no ``--step`` / ``--rank``) is gathered as
columns, a block of records at a time (in forked workers for large inputs);
the views must give the same report, to the last digit, as over
:class:`SessionRow` objects (``SessionTable.from_rows``), whichever way the
blocks were read, and whatever the report CLI left out of what sessions are
shown with.
"""

from __future__ import annotations

import random

import orjson
import pytest

from otel_rl import report
from otel_rl._internal.read import sessions as session_reader
from otel_rl.report import _columns, _load
from otel_rl.report import cli as report_cli

VIEWS = ("summary", "phases", "longtail", "lifecycle", "timeline")


def _records(rank: int, count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        submit = 1.8e9 + i * 0.5 + rng.random()
        t = submit
        phases: dict[str, list] = {}
        for turn in range(rng.choice((0, 1, 2, 3))):
            d = rng.lognormvariate(-1, 0.8)
            phases.setdefault("generate", []).append({"start_ts": t, "end_ts": t + d})
            t += d
            if turn and rng.random() < 0.5:
                phases.setdefault("toolcall", []).append({"start_ts": t - d / 2, "end_ts": t + 0.01})
        rec = {"task_id": i // 4, "session_id": i + rank * count, "rank": rank, "role": "rollout",
               "status": rng.choice(("accepted", "rejected", "failed")), "reason": None,
               "submit_ts": submit, "step": i * 5 // count, "trace_id": f"{rng.getrandbits(128):032x}",
               "span_id": f"{rng.getrandbits(64):016x}"}
        if rng.random() < 0.05:  # still open: no finalization, an open phase
            phases.setdefault("reward", []).append({"start_ts": t, "end_ts": None})
        else:
            rec["finalized_ts"] = t + rng.expovariate(20)
            if rng.random() < 0.8:
                rec["counters"] = {"output_tokens": rng.randint(1, 900)}
        if rng.random() < 0.05:
            rec.pop("step")
        rec["phases"] = phases
        out.append(rec)
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("columns-run")
    for rank in range(3):
        with open(root / f"sessions-rollout-r{rank}.jsonl", "wb") as f:
            f.writelines(orjson.dumps(r) + b"\n" for r in _records(rank, 3000, rank))
    return str(root)


def _doc(data, **kwargs):
    doc = report.build(data, VIEWS, **kwargs)
    doc.pop("generated_at")
    return orjson.loads(orjson.dumps(doc, default=str, option=orjson.OPT_NON_STR_KEYS))


def _from_rows(data):
    """The same run with its sessions as plain rows: the views build their table from them."""
    rows = list(data.sessions)
    assert all(type(r) is report.SessionRow for r in rows)
    data.sessions = rows
    return data


def test_columns_give_the_report_of_the_rows(run):
    data = report.load(run)
    assert isinstance(data.sessions, _columns.LazySessions)
    columns = _doc(data)
    assert columns == _doc(_from_rows(report.load(run)))
    assert columns["summary"]["sessions"] == 9000
    assert columns["lifecycle"]["open_sessions"]["count"] > 0


def test_columns_hold_what_the_rows_hold(run):
    data = report.load(run)
    table = data.sessions.table
    rows = list(data.sessions)
    from_rows = _columns.SessionTable.from_rows(rows)
    assert table.n == from_rows.n == len(rows)
    assert table.status_counts == from_rows.status_counts
    assert list(table.steps) == list(from_rows.steps)
    assert table.phase.keys() == from_rows.phase.keys()
    for step, group in table.phase.items():
        assert group[3] == from_rows.phase[step][3]  # share sums, added in session order
    done = list(table.done_indices())
    assert done == [i for i, r in enumerate(rows)
                    if r.total is not None and r.submit is not None and r.finalized is not None]
    for i in done[::97]:
        r = rows[i]
        assert table.scatter_point(i) == (r.finalized, r.total, r.status, r.worker, r.session_id)
    # Rows read back are new objects holding the record's values.
    again = data.sessions[5]
    assert again is not rows[5] and again.identity() == rows[5].identity()
    assert again.phases == rows[5].phases and again.tokens == rows[5].tokens


def test_forked_and_in_process_reading_give_the_same_report(run, monkeypatch):
    forked = _doc(report.load(run))
    monkeypatch.setattr(session_reader, "PARALLEL_BYTES", 1)  # every file through the workers
    monkeypatch.setattr(_load, "session_pool", lambda total: session_reader.session_pool(1 << 40))
    assert _doc(report.load(run)) == forked
    monkeypatch.setattr(_load, "session_pool", lambda total: None)
    assert _doc(report.load(run)) == forked


def test_the_cli_keeps_only_the_sessions_it_shows(run, monkeypatch):
    # Fewer candidates than sessions, pruned: only what the views show is kept.
    monkeypatch.setattr(_columns.SessionTable.__init__, "__defaults__", (_columns.TURN_PHASE, 1000, "all"))
    data = _load.load_run(run, every_row=False)
    table = data.sessions.table
    table.prune()
    assert len(table.first_submit) == len(table.top_total) == 1000
    assert sum(len(b.cold) for b in table.blocks) < table.n
    kept = _doc(data, outliers=10, timeline_limit=20, gantt_limit=1000)
    full = _doc(_from_rows(report.load(run)), outliers=10, timeline_limit=20, gantt_limit=1000)
    assert kept == full


def test_the_cli_report_is_that_of_every_row(run, tmp_path):
    out = tmp_path / "r.json"
    assert report_cli.main([run, "--format", "json", "--out", str(out), "-q", "--no-progress"]) == 0
    doc = orjson.loads(out.read_bytes())
    doc.pop("generated_at")
    full = _doc(_from_rows(report.load(run)))
    for view in VIEWS:
        assert doc[view] == full[view]


def test_rows_that_were_not_kept_are_said_so(run):
    data = _load.load_run(run, every_row=False)
    table = data.sessions.table
    table.candidates = 1
    table.prune()
    kept = set(table.top_total) | set(table.top_done) | set(table.first_submit) | set(table.first_open)
    missing = next(i for i in range(table.n) if i not in kept)
    with pytest.raises(LookupError):
        data.sessions[missing]
    assert data.sessions[next(iter(kept))].worker.startswith("rollout-r")
