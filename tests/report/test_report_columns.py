"""The session views over columns gathered while reading are the views over the rows themselves.

A run read with every record kept (no ``--step`` / ``--rank``) is gathered as
columns, a block of records at a time (in forked workers for large inputs);
the views must give the same report, to the last digit, as over
:class:`SessionRow` objects (``SessionTable.from_rows``), whichever way the
blocks were read, and whatever the report CLI left out of what sessions are
shown with.
"""

from __future__ import annotations

import marshal
import random
import sys

import orjson
import pytest
from support import run_python

from otel_rl import report
from otel_rl._internal.read import session_facts
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


def _odd(rec: dict, rng: random.Random, floats: bool = False) -> None:
    """One thing otel_rl's exporter may write, or another writer, or a damaged line
    (``floats``: session times stay floats)."""
    choice = rng.randrange(22)
    while floats and choice in (10, 11):
        choice = rng.randrange(22)
    if choice == 0:  # still open
        rec["finalized_ts"] = rec["total_s"] = None
        rec["phases"].setdefault("reward", []).append({"start_ts": rec["submit_ts"] + 1, "end_ts": None})
    elif choice == 1:  # an interrupted phase of a finished session
        rec["phases"].setdefault("toolcall", []).append({"start_ts": rec["submit_ts"], "end_ts": None})
    elif choice == 2:
        rec["step"] = None
    elif choice == 3:
        rec["step"] = None
        rec["global_step"] = 7
    elif choice == 4:
        rec["step"] = "3"
    elif choice == 5:
        rec["status"] = rng.choice((None, "", 1, "pending"))
    elif choice == 6:
        rec["rank"] = rng.choice((None, True, 1.0, "0"))
    elif choice == 7:
        rec["role"] = None
    elif choice == 8:
        rec["counters"] = rng.choice(({}, {"response_length": 3.5, "output_tokens": 2}, {"output_tokens": "x"}, []))
    elif choice == 9:
        rec["phases"] = rng.choice(({}, None, {"generate": []}))
    elif choice == 10:
        rec["total_s"] = rng.choice((0.0, -0.5, 1))
    elif choice == 11:
        rec["submit_ts"] = int(rec["submit_ts"])
    elif choice == 12:  # phases overlapping, out of order, a custom one
        rec["phases"]["custom"] = [{"start_ts": rec["submit_ts"] - 1.0, "end_ts": rec["submit_ts"] + 0.5},
                                   {"start_ts": rec["submit_ts"] + 0.25, "end_ts": rec["submit_ts"] + 0.3}]
    elif choice == 13:
        rec["phases"]["generate"] = [{"start_ts": 1800000000, "end_ts": 1800000001.5}]  # an int time
    elif choice == 14:
        rec["task_id"] = rng.choice(([1], {"a": 1}, None))
    elif choice == 15:
        del rec[rng.choice(("task_id", "span_id", "counters", "total_s", "step", "rank"))]
    elif choice == 16:
        rec["reason"] = rng.choice(({"why": "timeout"}, ["a"], "cancelled"))
    elif choice == 17:
        rec["phases"]["generate"] = rng.choice(("x", {"start_ts": 1.0}, [1], [{"end_ts": 2.0}]))
    elif choice == 18:
        rec["role"] = rng.choice((["rollout"], 3))
    elif choice == 19:
        rec["finalized_ts"] = 1e300
    elif choice == 20:
        rec["session_id"] = rng.choice((["s"], 2.5, "s-1"))
    else:
        rec.pop("session_id")


def _exported(rank: int, count: int, seed: int, odd: float = 0.0, floats: bool = False) -> list[bytes]:
    """Session record lines as otel_rl's exporter writes them (every field, closed phases back to
    back, per-phase totals), a share ``odd`` of them changed by :func:`_odd`."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        submit = 1.8e9 + i * 0.3 + rng.random() * 20
        t = submit
        phases: dict[str, list] = {}
        turns = rng.choice((1, 1, 2, 3))
        for turn in range(turns):
            d = rng.lognormvariate(-1.0, 0.8)
            phases.setdefault("generate", []).append({"start_ts": t, "end_ts": t + d})
            t += d
            if turn < turns - 1:
                d = rng.expovariate(20.0)
                phases.setdefault("toolcall", []).append({"start_ts": t, "end_ts": t + d})
                t += d
        if rng.random() < 0.9:
            d = rng.expovariate(200.0)
            phases["reward"] = [{"start_ts": t, "end_ts": t + d}]
            t += d
        finalized = t + rng.expovariate(50.0)
        rec = {"task_id": i // 4, "session_id": f"{rank}-{i}", "rank": rank, "role": "rollout",
               "step": i * 4 // count, "status": rng.choice(("accepted", "accepted", "rejected")), "reason": None,
               "submit_ts": submit, "finalized_ts": finalized, "total_s": finalized - submit,
               **{f"{name}_s": 0.5 for name in phases}, "phase_counts": {k: len(v) for k, v in phases.items()},
               "phases": phases, "counters": {"output_tokens": rng.randint(10, 1000)},
               "trace_id": f"{rng.getrandbits(128):032x}", "span_id": f"{rng.getrandbits(64):016x}"}
        if rng.random() < odd:
            _odd(rec, rng, floats)
        out.append(b"{" if rng.random() < odd / 20 else orjson.dumps(rec))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("columns-run")
    for rank in range(2):
        with open(root / f"sessions-rollout-r{rank}.jsonl", "wb") as f:
            f.writelines(orjson.dumps(r) + b"\n" for r in _records(rank, 3000, rank))
    with open(root / "sessions-rollout-r2.jsonl", "wb") as f:  # as the exporter writes them
        f.writelines(line + b"\n" for line in _exported(2, 3000, 2, odd=0.01, floats=True))
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
    data = _load.load_run(run)
    assert isinstance(data.sessions, _columns.LazySessions)
    columns = _doc(data)
    rows = report.load(run)  # load() keeps every session as a row
    assert type(rows.sessions) is list and all(type(r) is report.SessionRow for r in rows.sessions)
    assert [r.identity() for r in rows.sessions] == [r.identity() for r in data.sessions]
    assert columns == _doc(rows)
    malformed = data.diagnostics.malformed_count + len(data.diagnostics.truncated)
    assert 0 < malformed < 100
    assert columns["summary"]["sessions"] == 9000 - malformed
    assert columns["lifecycle"]["open_sessions"]["count"] > 0


def test_columns_hold_what_the_rows_hold(run):
    data = _load.load_run(run)
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


@pytest.mark.parametrize("load", [_load.load_run, report.load])
def test_forked_and_in_process_reading_give_the_same_report(run, monkeypatch, load):
    forked = _doc(load(run))
    monkeypatch.setattr(session_reader, "PARALLEL_BYTES", 1)  # every file through the workers
    monkeypatch.setattr(_load, "session_pool", lambda total: session_reader.session_pool(1 << 40))
    assert _doc(load(run)) == forked
    monkeypatch.setattr(_load, "session_pool", lambda total: None)
    assert _doc(load(run)) == forked


def test_the_cli_keeps_only_the_sessions_it_shows(run, monkeypatch):
    # Fewer candidates than sessions, pruned: only what the views show is kept.
    monkeypatch.setattr(_columns.SessionTable.__init__, "__defaults__", (_columns.TURN_PHASE, 1000, "all", True))
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


@pytest.mark.parametrize("cold", ["all", "candidates"])
@pytest.mark.parametrize("odd", [0.0, 0.002, 0.05, 0.5])
def test_records_as_the_exporter_writes_them_are_gathered_as_line_by_line(cold, odd):
    # A block of records read at a few operations each (with any other record, and a block
    # holding a line that cannot be used, read line by line) gives what reading every line
    # one by one gives: the same facts, kept lines and diagnostics.
    for seed in range(4):
        data = b"".join(line + b"\n" for line in _exported(seed % 2, 400, seed, odd))
        quick = session_reader.parse_block(data, 0, columns=cold)
        careful = session_reader.parse_block(b"\n" + data, -1, columns=cold)  # a blank line: one by one
        assert quick[-1][0] == careful[-1][0] == session_reader._FACTS
        for facts in (quick[-1][1], careful[-1][1]):
            for column in ("ids", "tasks"):  # equal values, marshalled with or without references
                facts[column] = marshal.loads(facts[column])
        assert quick == careful


def test_a_block_as_the_exporter_writes_it_is_not_read_line_by_line(monkeypatch):
    calls = []
    monkeypatch.setattr(session_reader.FactsBuilder, "add", lambda self, *a, **k: calls.append(a))
    data = b"".join(line + b"\n" for line in _exported(0, 300, 1))
    facts = session_reader.parse_block(data, 0, columns="candidates")[-1][1]
    assert facts["n"] == 300 and not calls


def test_the_cli_reads_every_row_when_the_views_need_them(tmp_path, monkeypatch):
    # A time written as an int: the views read the rows themselves, so the CLI, which keeps
    # only the sessions it shows, reads the run again keeping every row.
    monkeypatch.setattr(_columns.SessionTable.__init__, "__defaults__", (_columns.TURN_PHASE, 100, "all", True))
    lines = _exported(0, 3000, 5)
    rec = orjson.loads(lines[2000])
    rec["submit_ts"] = int(rec["submit_ts"])
    lines[2000] = orjson.dumps(rec)
    (tmp_path / "sessions-rollout-r0.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    data = _load.load_run(str(tmp_path), every_row=False)
    assert not data.sessions.table.exact and len(list(data.sessions)) == 3000
    out = tmp_path / "r.json"
    assert report_cli.main([str(tmp_path), "--format", "json", "--out", str(out), "-q", "--no-progress"]) == 0
    doc = orjson.loads(out.read_bytes())
    full = _doc(_from_rows(report.load(str(tmp_path))))
    for view in VIEWS:
        assert doc[view] == full[view]


@pytest.mark.skipif(session_facts._native is None, reason="otel_rl was built without a C compiler")
@pytest.mark.parametrize("odd", [0.0, 0.002, 0.05, 0.5])
def test_the_compiled_loop_gathers_what_the_python_loop_gathers(odd, monkeypatch):
    # The same answer (taken or spoiled) and, when taken, the same facts to the last digit.
    answers = set()
    for seed in range(6):
        lines = _exported(seed % 2, 300, seed, odd)
        gathered = []
        for native in (session_facts._native, None):
            monkeypatch.setattr(session_facts, "_native", native)
            builder = session_facts.FactsBuilder(cold="candidates")
            ints: dict[int, int] = {}
            taken = builder.add_lines(lines, lambda rec: session_reader._careful(rec, ints),
                                      session_reader.response_length,
                                      counter_names=session_reader.RESPONSE_LENGTH_COUNTERS)
            gathered.append((taken, marshal.loads(marshal.dumps(builder.result())) if taken else None))
        assert gathered[0] == gathered[1]
        answers.add(gathered[0][0])
    # Both kinds of answer were compared: blocks as the exporter writes them are taken, damaged ones spoiled.
    assert answers == {True} if odd == 0.0 else False in answers


# A child is forked only from a single-threaded process, which a pytest process with receivers
# and exporters behind it may not be: the check runs in a fresh interpreter.
_BUILD_FORKED = """
import sys
from otel_rl.report import _build, _load

data = _load.load_run(sys.argv[1], every_row=False)
here = _build.build(data)
getters = []
real = _build._forked
_build._forked = lambda make: getters.append((make, real(make))) or getters[-1][1]
_build.PARALLEL_SESSIONS = 0
beside = _build.build(data)
for doc in (here, beside):
    doc.pop("generated_at")
print(len(getters) == 1 and getters[0][1] is not getters[0][0], beside == here)
# A view that raises before the forked one is taken: the child is ended, not left behind.
import os
_build.training = lambda data: 1 / 0
try:
    _build.build(data)
except ZeroDivisionError:
    pass
try:
    os.waitpid(-1, os.WNOHANG)
    print(False)  # a child left behind
except ChildProcessError:
    print(True)
"""


def test_the_long_tail_view_computed_in_a_forked_process_is_the_one_computed_here(run):
    if not sys.platform.startswith("linux"):
        pytest.skip("the view is computed in a forked process only on Linux")
    done = run_python(_BUILD_FORKED, None, run, timeout=120)
    assert done.returncode == 0, done.stderr
    # A child was forked, its view is the one computed here, and no child outlives a failed build.
    assert done.stdout.split() == ["True", "True", "True"]


@pytest.mark.parametrize("compiled", [True, False])
def test_blocks_parsed_past_the_candidate_floors_give_the_report_of_every_row(run, monkeypatch, compiled):
    # Small blocks: later blocks keep only the sessions that can still make
    # a candidate list; the report is the one over every row.
    from otel_rl._internal.read import lines as line_reader

    if not compiled:
        monkeypatch.setattr(session_facts, "_native", None)
    monkeypatch.setattr(line_reader, "CHUNK", 40_000)
    given = []
    real = _columns.SessionTable.floors
    monkeypatch.setattr(_columns.SessionTable, "floors", lambda self: given.append(real(self)) or given[-1])
    data = _load.load_run(run, every_row=False)
    assert len(given) > 20 and sum(f is not None for f in given) > len(given) // 2
    kept = _doc(data, outliers=10, timeline_limit=20, gantt_limit=50)
    full = _doc(_from_rows(report.load(run)), outliers=10, timeline_limit=20, gantt_limit=50)
    assert kept == full


_LOAD_BY_RANGES = """
import json, sys
from otel_rl._internal.read import ranges, sessions
from otel_rl.report import _build, _load

def doc(data):
    out = _build.build(data)
    out.pop("generated_at")
    return json.loads(json.dumps(out, default=str))

here = _load.load_run(sys.argv[1])
ranges.CHUNK, ranges.WINDOW = 50_000, 20_000  # every file in tens of ranges, a damaged one among them
cut = []
sessions.line_ranges = lambda path: cut.append(ranges.line_ranges(path)) or cut[-1]
_load.session_pool = lambda total: sessions.session_pool(1 << 40)
by_workers = _load.load_run(sys.argv[1])
print(json.dumps({"blocks": [len(blocks) for blocks, _rest in cut], "same": doc(by_workers) == doc(here),
                  "diagnostics": by_workers.diagnostics.to_dict() == here.diagnostics.to_dict(),
                  "malformed": len(here.diagnostics.malformed)}))
"""


def test_files_read_by_workers_in_byte_ranges_give_the_report_and_diagnostics_read_here(run):
    # Worker processes are forked only from a single-threaded process: a fresh interpreter.
    if not sys.platform.startswith("linux"):
        pytest.skip("worker processes are only forked on Linux")
    done = run_python(_LOAD_BY_RANGES, None, run, timeout=120)
    assert done.returncode == 0, done.stderr
    out = orjson.loads(done.stdout)
    assert len(out["blocks"]) == 3 and min(out["blocks"]) > 20
    assert out["same"] and out["diagnostics"] and out["malformed"]  # damaged lines, named by their line


def test_the_scatter_holds_the_slowest_then_an_even_sample_of_the_other_finished_sessions(run):
    from otel_rl.report.lifecycle import lifecycle

    data = _load.load_run(run, every_row=False)
    table = data.sessions.table
    limit = 500
    top = table.largest(limit // 5)
    rest = [i for i in table.done_indices() if i not in set(top)]
    stride = len(rest) / (limit - len(top))
    chosen = top + [rest[int(i * stride)] for i in range(limit - len(top))]
    expected = sorted(map(table.scatter_point, chosen), key=lambda p: p[0])
    scatter = lifecycle(data, scatter_limit=limit)["scatter"]
    assert scatter["shown"] == limit and len(rest) > 10 * limit
    assert list(zip(scatter["worker"], scatter["session_id"])) == [(p[3], p[4]) for p in expected]
