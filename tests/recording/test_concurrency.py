"""Many threads and thousands of concurrent asyncio sessions: nothing lost, no ids crossed."""

from __future__ import annotations

import asyncio
import threading

from support import read_sessions
from waiting import wait_until

import otel_rl

THREADS, SESSIONS_PER_THREAD = 16, 50
ASYNC_TASKS, SESSIONS_PER_TASK = 500, 4


def _all_written(sessions):
    """The pipeline's acknowledgement that every session record and span is written, so
    that the files are read complete however long a loaded machine takes to write them
    (``save(force=True)`` waits only up to its bound)."""
    summary = otel_rl.run_summary()
    spans = summary["spans"]
    return summary["sessions"].get("accepted") == sessions and spans["exported_file"] == spans["recorded"]


def _phase_spans_by_session(spans):
    """Phase spans keyed by the session id they carry; also their session span ids."""
    sessions = {s["span_id"]: s["attributes"]["rl.session.id"] for s in spans if s["name"] == "session"}
    phases = [s for s in spans if s["attributes"].get("rl.span.kind") == "phase"]
    return sessions, phases


def test_sessions_from_many_threads_keep_their_own_ids(traced):
    def worker(index):
        task_id = f"thread-{index}"
        otel_rl.set_task_id(otel_rl.register_task(task_id))
        for turn in range(SESSIONS_PER_THREAD):
            session_id = otel_rl.register_session()
            otel_rl.set_session_id(session_id)
            with otel_rl.trace_session_phase("generate", start_payload={"thread": index, "turn": turn}):
                pass
            otel_rl.trace_session_event("mark_reward_start", session_id=session_id)
            otel_rl.trace_session_event("mark_reward_end", session_id=session_id)
            otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_until(lambda: _all_written(THREADS * SESSIONS_PER_THREAD), timeout=60, what="every record written")
    spans = traced.spans()
    records = read_sessions(traced.run_dir)
    assert len(records) == THREADS * SESSIONS_PER_THREAD
    assert len({r["session_id"] for r in records}) == len(records)
    assert all(r["phase_counts"] == {"generate": 1, "reward": 1, "toolcall": 0} for r in records)
    sessions, phases = _phase_spans_by_session(spans)
    assert len(phases) == 2 * len(records)
    for phase in phases:
        # Every phase hangs under the session whose id it carries.
        assert sessions[phase["parent_span_id"]] == phase["attributes"]["rl.session.id"]
    generate = [p for p in phases if p["name"] == "generate"]
    task_of = {r["session_id"]: r["task_id"] for r in records}
    assert all(task_of[p["attributes"]["rl.session.id"]] == f"thread-{p['attributes']['rl.args.thread']}"
               for p in generate)


def test_thousands_of_concurrent_asyncio_sessions_keep_their_own_ids(traced):
    @otel_rl.session_context()
    async def sample(task_index):
        async with otel_rl.atrace_session_phase("generate", start_payload={"task": task_index}):
            await asyncio.sleep(0)  # every session yields to all the others here
        async with otel_rl.atrace_session_phase("reward", start_payload={"task": task_index}):
            await asyncio.sleep(0)
        otel_rl.trace_session_event("mark_finalized", status="accepted")

    async def task(task_index):
        otel_rl.set_task_id(otel_rl.register_task(f"task-{task_index}"))
        await asyncio.gather(*(sample(task_index) for _ in range(SESSIONS_PER_TASK)))

    async def main():
        await asyncio.gather(*(task(i) for i in range(ASYNC_TASKS)))

    asyncio.run(main())
    wait_until(lambda: _all_written(ASYNC_TASKS * SESSIONS_PER_TASK), timeout=60, what="every record written")
    spans = traced.spans()
    records = read_sessions(traced.run_dir)
    assert len(records) == ASYNC_TASKS * SESSIONS_PER_TASK
    assert all(r["status"] == "accepted" and r["phase_counts"]["generate"] == 1 for r in records)
    sessions, phases = _phase_spans_by_session(spans)
    assert len(phases) == 2 * len(records)
    task_of = {r["session_id"]: r["task_id"] for r in records}
    for phase in phases:
        assert sessions[phase["parent_span_id"]] == phase["attributes"]["rl.session.id"]
        assert task_of[phase["attributes"]["rl.session.id"]] == f"task-{phase['attributes']['rl.args.task']}"
    assert otel_rl.diagnostics() == {}
