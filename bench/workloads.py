"""The workloads: each measures otel_rl beside the SDK and JSONL baselines.

Every workload function takes a :class:`~bench.harness.Context` and a repeat
count and returns ``{"title", "params", "samples", "rows"}``: ``samples`` maps
each contender to its raw per-repeat sample dicts, ``rows`` are the table rows
(medians, spread, ratios, targets) built from them.

Time on the caller's thread is the wall time of the measured loop divided by
its item count. Total process CPU (``time.process_time()``: every thread,
background export included) is taken around the loop *plus* the final flush
(``otel_rl.save(force=True)``, ``provider.force_flush()``, ``JsonlTracer.save()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable
from typing import Any

import otel_rl
from opentelemetry import trace as trace_api

from .baselines import CountingExporter, CountingProcessor, JsonlSessionTracker, JsonlTracer, SdkTracer
from .harness import (
    FLUSH_TIMEOUT_MS,
    Context,
    Timer,
    count_trace_events,
    exporter_cpu_s,
    drop_counters,
    interleaved,
    ratio,
    read_session_records,
    stats,
)

COLUMNS = ("otel_rl", "sdk", "jsonl")
SCOPE = "bench.scope"
WARM = "bench.warm"
SESSIONS_PER_TASK = 4


# --------------------------------------------------------------------------- rows


def _values(samples: list[dict[str, Any]], fn: Callable[[dict[str, Any]], Any]) -> list[Any]:
    out = []
    for sample in samples:
        try:
            out.append(fn(sample))
        except (KeyError, TypeError, ZeroDivisionError):
            out.append(None)
    return out


def us_per(key: str, per: str = "n") -> Callable[[dict[str, Any]], float]:
    return lambda s: s[key] / s[per] * 1e6


def field(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda s: s[key]


def ratio_target(text: str, otel: dict | None, ref: dict | None, limit: float) -> dict[str, Any]:
    measured = ratio(otel and otel["median"], ref and ref["median"])
    return {"text": text, "kind": "ratio", "limit": limit, "measured": measured,
            "passed": None if measured is None else measured <= limit}


def max_target(text: str, otel: dict | None, limit: float) -> dict[str, Any]:
    """Passes when the worst (max) repeat of otel_rl is within ``limit``."""
    worst = otel and otel["max"]
    return {"text": text, "kind": "max", "limit": limit, "measured": worst,
            "passed": None if worst is None else worst <= limit}


def make_row(label: str, unit: str, samples: dict[str, list[dict]], fn: Callable,
             sources: dict[str, str | None] | None = None, fmt: str = "time",
             targets: Callable[[dict[str, dict | None]], list[dict]] | None = None,
             note: str = "") -> dict[str, Any]:
    """One table row. ``sources`` maps a column to the contender it shows
    (default: the column's own name, when measured)."""
    sources = dict(sources or {})
    cells: dict[str, dict | None] = {}
    for col in COLUMNS:
        name = sources.get(col, col)
        sources[col] = name if name in samples else None
        cells[col] = stats(_values(samples[name], fn)) if sources[col] else None
    otel = cells["otel_rl"]
    row = {
        "label": label, "unit": unit, "fmt": fmt, "sources": sources, "cells": cells,
        "ratio_sdk": ratio(otel and otel["median"], cells["sdk"] and cells["sdk"]["median"]),
        "ratio_jsonl": ratio(otel and otel["median"], cells["jsonl"] and cells["jsonl"]["median"]),
        "targets": targets(cells) if targets else [],
        "note": note,
    }
    verdicts = [t["passed"] for t in row["targets"]]
    row["passed"] = None if not verdicts or None in verdicts else all(verdicts)
    return row


def extra_stats(samples: dict[str, list[dict]], name: str, fn: Callable) -> dict | None:
    return stats(_values(samples[name], fn)) if name in samples else None


# --------------------------------------------------------------------------- 1. disabled


def w_disabled(ctx: Context, repeats: int) -> dict[str, Any]:
    n = ctx.sizes.disabled_n
    otel_rl.reset()
    assert not otel_rl.is_configured()
    noop_tracer = trace_api.NoOpTracerProvider().get_tracer("bench")
    jsonl = JsonlTracer(None, enabled=False)

    def timed(body: Callable[[int], None]) -> dict[str, Any]:
        body(max(1000, n // 10))  # warm-up
        t = Timer().start()
        body(n)
        wall = t.lap_wall()
        return {"n": n, "caller_s": wall, "cpu_s": t.stop_cpu()}

    def otel_scope(k: int) -> None:
        scope = otel_rl.trace_scope
        for _ in range(k):
            with scope("x"):
                pass

    def null_scope(k: int) -> None:
        null = contextlib.nullcontext
        for _ in range(k):
            with null():
                pass

    def sdk_scope(k: int) -> None:
        start = noop_tracer.start_as_current_span
        for _ in range(k):
            with start("x"):
                pass

    def jsonl_scope(k: int) -> None:
        scope = jsonl.trace_scope
        for _ in range(k):
            with scope("x"):
                pass

    @otel_rl.trace_perf("f")
    def otel_fn() -> None:
        return None

    @noop_tracer.start_as_current_span("f")
    def sdk_fn() -> None:
        return None

    @jsonl.trace_perf("f")
    def jsonl_fn() -> None:
        return None

    def plain_fn() -> None:
        return None

    def caller(fn: Callable[[], None]) -> Callable[[int], None]:
        def body(k: int) -> None:
            for _ in range(k):
                fn()
        return body

    samples = interleaved(repeats, {
        "otel_rl": lambda: timed(otel_scope),
        "nullcontext": lambda: timed(null_scope),
        "sdk": lambda: timed(sdk_scope),
        "jsonl": lambda: timed(jsonl_scope),
        "otel_rl_perf": lambda: timed(caller(otel_fn)),
        "plain_call": lambda: timed(caller(plain_fn)),
        "sdk_perf": lambda: timed(caller(sdk_fn)),
        "jsonl_perf": lambda: timed(caller(jsonl_fn)),
    }, ctx.log)
    per = us_per("caller_s")
    null = extra_stats(samples, "nullcontext", per)
    plain = extra_stats(samples, "plain_call", per)
    perf = extra_stats(samples, "otel_rl_perf", per)
    rows = [
        make_row("disabled scope", "µs/scope", samples, per,
                 targets=lambda c: [ratio_target(f"≤1.0× nullcontext {null['median']:.3f} µs",
                                                c["otel_rl"], null, 1.0)],
                 note=f"nullcontext {null['median']:.4f} µs; SDK = NoOpTracer.start_as_current_span; "
                      "JSONL = disabled scope"),
        make_row("disabled @trace_perf call", "µs/call", samples, per,
                 sources={"otel_rl": "otel_rl_perf", "sdk": "sdk_perf", "jsonl": "jsonl_perf"},
                 note="SDK = NoOpTracer.start_as_current_span as a decorator"),
    ]
    rows[1]["ref"] = (f"info: plain call {plain['median']:.3f} µs "
                      f"(otel_rl {ratio(perf['median'], plain['median']):.2f}× plain)")
    return {"title": "1. disabled scope / decorator", "params": {"n": n}, "samples": samples,
            "rows": rows, "references": {"nullcontext_us": null, "plain_call_us": plain}}


# --------------------------------------------------------------------------- 2/4. enabled scopes to a file


def _attrs(i: int) -> dict[str, Any]:
    return {"step": i, "batch": 32, "lr": 1e-4, "actor": "a0", "ok": True}


def _scope_loops(with_attrs: bool) -> tuple[Callable, Callable, Callable]:
    """Caller loops for otel_rl, the SDK and the JSONL tracer (same shape)."""
    if with_attrs:
        def otel_loop(k: int, name: str) -> None:
            scope = otel_rl.trace_scope
            for i in range(k):
                with scope(name, args={"step": i, "batch": 32, "lr": 1e-4, "actor": "a0", "ok": True}):
                    pass

        def sdk_loop(tracer: Any, k: int, name: str) -> None:
            start = tracer.start_as_current_span
            for i in range(k):
                with start(name, attributes={"step": i, "batch": 32, "lr": 1e-4, "actor": "a0", "ok": True}):
                    pass

        def jsonl_loop(tracer: JsonlTracer, k: int, name: str) -> None:
            scope = tracer.trace_scope
            for i in range(k):
                with scope(name, args={"step": i, "batch": 32, "lr": 1e-4, "actor": "a0", "ok": True}):
                    pass
    else:
        def otel_loop(k: int, name: str) -> None:
            scope = otel_rl.trace_scope
            for _ in range(k):
                with scope(name):
                    pass

        def sdk_loop(tracer: Any, k: int, name: str) -> None:
            start = tracer.start_as_current_span
            for _ in range(k):
                with start(name):
                    pass

        def jsonl_loop(tracer: JsonlTracer, k: int, name: str) -> None:
            scope = tracer.trace_scope
            for _ in range(k):
                with scope(name):
                    pass
    return otel_loop, sdk_loop, jsonl_loop


def _run_otel_scopes(ctx: Context, n: int, otel_loop: Callable, otlp: bool = False,
                     **overrides: Any) -> dict[str, Any]:
    receiver = ctx.receiver if otlp else None
    with ctx.otel(otlp_endpoint=receiver.endpoint if receiver else None, **overrides) as run:
        warm = max(200, n // 10)
        otel_loop(warm, WARM)
        otel_rl.save(force=True)
        if receiver:
            # Every warm-up span must have arrived before counting starts:
            # save() does not wait for the network.
            receiver.start_counting(warm)
        exporter_before = exporter_cpu_s()
        t = Timer().start()
        otel_loop(n, SCOPE)
        wall = t.lap_wall()
        otel_rl.save(force=True)
        cpu = t.stop_cpu()
        sample: dict[str, Any] = {"n": n, "caller_s": wall, "cpu_s": cpu, "caller_cpu_s": t.thread_cpu,
                                  "caller_cpu_save_s": t.thread_cpu_total}
        if receiver:
            # save() does not wait for the network: the exporter process's CPU
            # is read once every span has arrived, so its encoding is counted.
            sample["received"] = receiver.wait_for(n, timeout_s=30.0)
            sample["lost"] = n - sample["received"]
        sample["all_cpu_s"] = cpu + exporter_cpu_s() - exporter_before
        sample["drops"] = drop_counters(otel_rl.diagnostics())
        run.close()
        if overrides.get("file_export", ctx.file_export):
            sample["file_events"] = count_trace_events(run.run_dir, {SCOPE})["events"]
            sample["lost_file"] = n - sample["file_events"]
    return sample


def _run_sdk_scopes(n: int, sdk_loop: Callable, exporter: Any = None, **bsp: Any) -> dict[str, Any]:
    counting = exporter is None
    sdk = SdkTracer(exporter if exporter is not None else CountingExporter(), **bsp)
    try:
        sdk_loop(sdk.tracer, max(200, n // 10), WARM)
        sdk.flush(FLUSH_TIMEOUT_MS)
        before = sdk.exporter.exported if counting else 0
        t = Timer().start()
        sdk_loop(sdk.tracer, n, SCOPE)
        wall = t.lap_wall()
        sdk.flush(FLUSH_TIMEOUT_MS)
        cpu = t.stop_cpu()
        sample: dict[str, Any] = {"n": n, "caller_s": wall, "cpu_s": cpu, "caller_cpu_s": t.thread_cpu,
                                  "caller_cpu_save_s": t.thread_cpu_total, "all_cpu_s": cpu}
        if counting:
            sample["exported"] = sdk.exporter.exported - before
            sample["lost"] = n - sample["exported"]
        return sample
    finally:
        sdk.close()


def _run_jsonl_scopes(ctx: Context, n: int, jsonl_loop: Callable) -> dict[str, Any]:
    path = os.path.join(ctx.tmpdir("jsonl-"), "trace.jsonl")
    tracer = JsonlTracer(path)
    jsonl_loop(tracer, max(200, n // 10), WARM)
    tracer.save()
    t = Timer().start()
    jsonl_loop(tracer, n, SCOPE)
    wall = t.lap_wall()
    written = tracer.save()
    cpu = t.stop_cpu()
    os.unlink(path)
    return {"n": n, "caller_s": wall, "cpu_s": cpu, "written": written, "caller_cpu_s": t.thread_cpu,
            "caller_cpu_save_s": t.thread_cpu_total, "all_cpu_s": cpu}


def _scope_rows(label: str, samples: dict[str, list[dict]], caller_targets: bool) -> list[dict]:
    caller = us_per("caller_s")
    cpu = us_per("cpu_s")

    def targets(c: dict[str, dict | None]) -> list[dict]:
        return [ratio_target("≤0.3× SDK", c["otel_rl"], c["sdk"], 0.3),
                ratio_target("≤1.0× JSONL", c["otel_rl"], c["jsonl"], 1.0)]

    return [
        make_row(f"{label}: caller thread CPU incl. save()", "µs CPU/span", samples,
                 us_per("caller_cpu_save_s"), targets=targets if caller_targets else None,
                 note="thread_time of the calling thread over the loop and the save() that "
                      "follows it: what the training thread pays (the JSONL tracer encodes at save)"),
        make_row(f"{label}: caller thread, loop only", "µs/span", samples, caller,
                 note="wall time of the loop alone, GIL waits included; the JSONL tracer's "
                      "encoding is not in it"),
        make_row(f"{label}: caller thread CPU, loop only", "µs CPU/span", samples, us_per("caller_cpu_s"),
                 note="thread_time of the calling thread: its own work, without GIL waits"),
        make_row(f"{label}: process CPU", "µs CPU/span", samples, cpu,
                 note="all threads, loop + final flush"),
        make_row(f"{label}: CPU incl. exporter process", "µs CPU/span", samples, us_per("all_cpu_s"),
                 note="process CPU plus otel_rl's exporter process (another core)"),
    ]


def w_enabled_scope(ctx: Context, repeats: int, with_attrs: bool = False) -> dict[str, Any]:
    n = ctx.sizes.scope_n
    otel_loop, sdk_loop, jsonl_loop = _scope_loops(with_attrs)
    samples = interleaved(repeats, {
        "otel_rl": lambda: _run_otel_scopes(ctx, n, otel_loop),
        "sdk": lambda: _run_sdk_scopes(n, sdk_loop),
        "jsonl": lambda: _run_jsonl_scopes(ctx, n, jsonl_loop),
    }, ctx.log)
    label = "scope + 5 attrs (file)" if with_attrs else "enabled scope (file)"
    rows = _scope_rows(label, samples, caller_targets=True)
    return {
        "title": "4. scope with 5 attributes" if with_attrs else "2. enabled scope, file output",
        "params": {"n": n, "file_export": ctx.file_export, "sdk_exporter": "counting no-op, default BSP"},
        "samples": samples, "rows": rows,
    }


def w_attrs5(ctx: Context, repeats: int) -> dict[str, Any]:
    return w_enabled_scope(ctx, repeats, with_attrs=True)


# --------------------------------------------------------------------------- 3. OTLP


def w_otlp(ctx: Context, repeats: int) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    n = ctx.sizes.otlp_n
    receiver = ctx.receiver
    # The SDK's queue is raised to hold every span so both sides export the
    # same work (the default-queue behaviour is the burst workload's subject).
    sdk_queue = max(2048, n + max(200, n // 10))

    def sdk_otlp(loop: Callable) -> dict[str, Any]:
        exporter = OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True)
        sdk = SdkTracer(exporter, max_queue_size=sdk_queue)
        try:
            warm = max(200, n // 10)
            loop(sdk.tracer, warm, WARM)
            sdk.flush(FLUSH_TIMEOUT_MS)
            receiver.start_counting(warm)
            t = Timer().start()
            loop(sdk.tracer, n, SCOPE)
            wall = t.lap_wall()
            sdk.flush(FLUSH_TIMEOUT_MS)
            cpu = t.stop_cpu()
            received = receiver.wait_for(n, timeout_s=30.0)
            return {"n": n, "caller_s": wall, "cpu_s": cpu, "caller_cpu_s": t.thread_cpu,
                    "all_cpu_s": cpu, "received": received, "lost": n - received}
        finally:
            sdk.close()

    out_samples: dict[str, dict[str, list[dict]]] = {}
    rows: list[dict] = []
    for with_attrs in (False, True):
        otel_loop, sdk_loop, jsonl_loop = _scope_loops(with_attrs)
        contenders = {
            "otel_rl": lambda: _run_otel_scopes(ctx, n, otel_loop, otlp=True),
            "sdk": lambda: sdk_otlp(sdk_loop),
            "jsonl": lambda: _run_jsonl_scopes(ctx, n, jsonl_loop),
        }
        if with_attrs:
            contenders["otel_rl_nofile"] = lambda: _run_otel_scopes(ctx, n, otel_loop, otlp=True,
                                                                    file_export=False)
        ctx.log(f"  variant: {'5 attributes' if with_attrs else 'no attributes'}")
        samples = interleaved(repeats, contenders, ctx.log)
        key = "attrs5" if with_attrs else "plain"
        out_samples[key] = samples
        label = "OTLP scope + 5 attrs" if with_attrs else "OTLP scope"
        cpu = us_per("cpu_s")
        rows.append(make_row(f"{label}: caller thread", "µs/span", samples, us_per("caller_s")))
        rows.append(make_row(f"{label}: process CPU", "µs CPU/span", samples, cpu,
                             note="otel_rl also writes its trace file (default); JSONL column: file only"))
        rows.append(make_row(f"{label}: CPU incl. exporter process", "µs CPU/span", samples,
                             us_per("all_cpu_s"),
                             note="process CPU plus otel_rl's exporter process (another core); "
                                  "otel_rl also writes its Perfetto file, the SDK does not"))
        if with_attrs:
            # The target compares the same work: OTLP export only, every span,
            # all CPU spent on it (training process and exporter process).
            rows.append(make_row(f"{label}: CPU incl. exporter process, OTLP only (file_export=0)",
                                 "µs CPU/span", samples, us_per("all_cpu_s"),
                                 sources={"otel_rl": "otel_rl_nofile", "jsonl": None},
                                 targets=lambda c: [ratio_target("≤0.4× SDK+OTLP", c["otel_rl"],
                                                                 c["sdk"], 0.4)],
                                 note="the same work as the SDK baseline"))
        rows.append(make_row(f"{label}: received", "spans lost", samples, field("lost"),
                             sources={"jsonl": None}, fmt="count",
                             targets=lambda c: [max_target("0 lost", c["otel_rl"], 0)],
                             note=f"of {n} sent per repeat; SDK max_queue_size={sdk_queue}"))
    return {"title": "3. enabled scope, OTLP/gRPC to a receiver (child process)",
            "params": {"n": n, "sdk_max_queue_size": sdk_queue, "file_export": ctx.file_export},
            "samples": out_samples, "rows": rows}


# --------------------------------------------------------------------------- 5. sessions


def otel_session_loop(tasks: int) -> None:
    """Per task: register it, 4 sessions with a generate and a reward phase
    (``mark_<phase>_start/_end`` events), finalize the task."""
    register_task = otel_rl.register_task
    register_session = otel_rl.register_session
    event = otel_rl.trace_session_event
    for _ in range(tasks):
        tid = register_task()
        for _ in range(SESSIONS_PER_TASK):
            sid = register_session(tid)
            event("mark_generate_start", session_id=sid)
            event("mark_generate_end", session_id=sid)
            event("mark_reward_start", session_id=sid)
            event("mark_reward_end", session_id=sid)
        event("mark_finalized", task_id=tid, status="accepted")


def otel_session_loop_ctx(tasks: int) -> None:
    """The same with the session current in context and phases as ``with`` blocks."""
    register_task = otel_rl.register_task
    register_session = otel_rl.register_session
    set_session_id = otel_rl.set_session_id
    phase = otel_rl.trace_session_phase
    event = otel_rl.trace_session_event
    for _ in range(tasks):
        tid = register_task()
        for _ in range(SESSIONS_PER_TASK):
            set_session_id(register_session(tid))
            with phase("generate"):
                pass
            with phase("reward"):
                pass
        event("mark_finalized", task_id=tid, status="accepted")


def jsonl_session_loop(tracker: JsonlSessionTracker, tasks: int) -> None:
    register_task = tracker.register_task
    register_session = tracker.register_session
    event = tracker.record_event
    for _ in range(tasks):
        tid = register_task()
        for _ in range(SESSIONS_PER_TASK):
            sid = register_session(tid)
            event(sid, "mark_generate_start")
            event(sid, "mark_generate_end")
            event(sid, "mark_reward_start")
            event(sid, "mark_reward_end")
        tracker.finalize_task(tid, "accepted")


def sdk_session_loop(tracer: Any, tasks: int) -> None:
    """The SDK equivalent: task > session > (generate, reward) nested spans."""
    start = tracer.start_as_current_span
    for t in range(tasks):
        with start("task", attributes={"rl.task.id": t}):
            for s in range(SESSIONS_PER_TASK):
                with start("session", attributes={"rl.session.id": s}) as session:
                    with start("generate"):
                        pass
                    with start("reward"):
                        pass
                    session.set_attribute("rl.session.status", "accepted")


def _otel_sessions(ctx: Context, tasks: int, loop: Callable[[int], None]) -> dict[str, Any]:
    warm = max(10, tasks // 10)
    with ctx.otel() as run:
        run_ctx = contextvars.copy_context()  # set_session_id must not leak into later workloads
        run_ctx.run(loop, warm)
        otel_rl.save(force=True)
        exporter_before = exporter_cpu_s()
        t = Timer().start()
        run_ctx.run(loop, tasks)
        wall = t.lap_wall()
        otel_rl.save(force=True)
        cpu = t.stop_cpu()
        all_cpu = cpu + exporter_cpu_s() - exporter_before
        drops = drop_counters(otel_rl.diagnostics())
        run.close()
        records = read_session_records(run.run_dir)
    n = tasks * SESSIONS_PER_TASK
    return {"n": n, "caller_s": wall, "cpu_s": cpu, "all_cpu_s": all_cpu, "caller_cpu_s": t.thread_cpu,
            "caller_cpu_save_s": t.thread_cpu_total, "drops": drops,
            "records": len(records) - warm * SESSIONS_PER_TASK}


def _jsonl_sessions(ctx: Context, tasks: int) -> dict[str, Any]:
    path = os.path.join(ctx.tmpdir("jsonl-"), "sessions.jsonl")
    tracker = JsonlSessionTracker(path)
    warm = max(10, tasks // 10)
    jsonl_session_loop(tracker, warm)
    tracker.flush()
    before = tracker.written
    t = Timer().start()
    jsonl_session_loop(tracker, tasks)
    wall = t.lap_wall()
    tracker.flush()
    cpu = t.stop_cpu()
    os.unlink(path)
    return {"n": tasks * SESSIONS_PER_TASK, "caller_s": wall, "cpu_s": cpu, "all_cpu_s": cpu,
            "caller_cpu_s": t.thread_cpu, "caller_cpu_save_s": t.thread_cpu_total,
            "records": tracker.written - before}


def _sdk_sessions(tasks: int) -> dict[str, Any]:
    sdk = SdkTracer(CountingExporter())
    try:
        sdk_session_loop(sdk.tracer, max(10, tasks // 10))
        sdk.flush(FLUSH_TIMEOUT_MS)
        before = sdk.exporter.exported
        t = Timer().start()
        sdk_session_loop(sdk.tracer, tasks)
        wall = t.lap_wall()
        sdk.flush(FLUSH_TIMEOUT_MS)
        cpu = t.stop_cpu()
        spans = tasks * (1 + SESSIONS_PER_TASK * 3)
        exported = sdk.exporter.exported - before
        return {"n": tasks * SESSIONS_PER_TASK, "caller_s": wall, "cpu_s": cpu, "all_cpu_s": cpu,
                "caller_cpu_s": t.thread_cpu, "caller_cpu_save_s": t.thread_cpu_total,
                "spans": spans, "exported": exported,
                "lost": spans - exported}
    finally:
        sdk.close()


def w_sessions(ctx: Context, repeats: int) -> dict[str, Any]:
    tasks = ctx.sizes.session_tasks
    samples = interleaved(repeats, {
        "otel_rl": lambda: _otel_sessions(ctx, tasks, otel_session_loop),
        "sdk": lambda: _sdk_sessions(tasks),
        "jsonl": lambda: _jsonl_sessions(ctx, tasks),
        "otel_rl_ctx": lambda: _otel_sessions(ctx, tasks, otel_session_loop_ctx),
    }, ctx.log)
    n = tasks * SESSIONS_PER_TASK
    # The target uses the caller-thread cost the scope target uses: the calling
    # thread's own CPU over the loop and the save() after it.
    rows = [
        make_row("session workload: caller thread CPU incl. save()", "µs CPU/session", samples,
                 us_per("caller_cpu_save_s"),
                 targets=lambda c: [ratio_target("≤0.5× JSONL", c["otel_rl"], c["jsonl"], 0.5)],
                 note="trace_session_event(mark_<phase>_start/_end, session_id=...)"),
        make_row("  same, phases as `with trace_session_phase`", "µs CPU/session", samples,
                 us_per("caller_cpu_save_s"), sources={"otel_rl": "otel_rl_ctx"},
                 targets=lambda c: [ratio_target("info (≤0.5× JSONL)", c["otel_rl"], c["jsonl"], 0.5)],
                 note="set_session_id + context-manager phases"),
        make_row("session workload: caller thread wall", "µs/session", samples, us_per("caller_s"),
                 note="includes waiting for the GIL while otel_rl's export thread ships records"),
        make_row("session workload: process CPU", "µs CPU/session", samples, us_per("cpu_s"),
                 note="all threads, loop + final flush (records, spans, metrics)"),
        make_row("session workload: CPU incl. exporter process", "µs CPU/session", samples, us_per("all_cpu_s"),
                 note="process CPU plus otel_rl's exporter process (/proc, another core); every "
                      "process with its own target: the total_cpu workload"),
        make_row("session records written", "records missing", samples, lambda s: s["n"] - s["records"],
                 sources={"sdk": None}, fmt="count",
                 targets=lambda c: [max_target("0 missing", c["otel_rl"], 0)],
                 note=f"of {n} sessions per repeat"),
    ]
    rows[1]["info_only"] = True
    rows[1]["passed"] = None
    return {"title": "5. session workload", "params": {"tasks": tasks, "sessions": n,
                                                       "sessions_per_task": SESSIONS_PER_TASK},
            "samples": samples, "rows": rows}


# --------------------------------------------------------------------------- 6. burst


def w_burst(ctx: Context, repeats: int) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    n = ctx.sizes.burst_n
    receiver = ctx.receiver
    name = "bench.burst"
    otel_loop, sdk_loop, jsonl_loop = _scope_loops(False)

    def otel() -> dict[str, Any]:
        counter = CountingProcessor()
        with ctx.otel(otlp_endpoint=receiver.endpoint, processors=(counter,)) as run:
            otel_loop(200, WARM)
            otel_rl.save(force=True)
            receiver.start_counting(200)
            before = counter.by_name[name]
            t = Timer().start()
            otel_loop(n, name)
            wall = t.lap_wall()
            otel_rl.save(force=True)
            cpu = t.stop_cpu()
            received = receiver.wait_for(n, timeout_s=60.0)
            processed = counter.by_name[name] - before
            drops = drop_counters(otel_rl.diagnostics())
            run.close()
            sample = {"n": n, "caller_s": wall, "cpu_s": cpu, "received": received,
                      "lost_otlp": n - received, "processed": processed, "lost_processor": n - processed,
                      "drops": drops, "drop_counter_total": sum(drops.values())}
            if ctx.file_export:
                sample["file_events"] = count_trace_events(run.run_dir, {name})["events"]
                sample["lost_file"] = n - sample["file_events"]
        sample["lost"] = max(sample["lost_processor"], sample.get("lost_file", 0))
        return sample

    def sdk_counting() -> dict[str, Any]:
        return _run_sdk_scopes(n, lambda tr, k, nm: sdk_loop(tr, k, name if nm == SCOPE else nm))

    def sdk_otlp() -> dict[str, Any]:
        sdk = SdkTracer(OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True))
        try:
            sdk_loop(sdk.tracer, 200, WARM)
            sdk.flush(FLUSH_TIMEOUT_MS)
            receiver.start_counting(200)
            t = Timer().start()
            sdk_loop(sdk.tracer, n, name)
            wall = t.lap_wall()
            sdk.flush(FLUSH_TIMEOUT_MS)
            cpu = t.stop_cpu()
            received = receiver.wait_for(n, timeout_s=60.0)
            return {"n": n, "caller_s": wall, "cpu_s": cpu, "received": received,
                    "lost_otlp": n - received}
        finally:
            sdk.close()

    def jsonl() -> dict[str, Any]:
        sample = _run_jsonl_scopes(ctx, n, jsonl_loop)
        sample["lost"] = n - sample["written"]
        sample["lost_otlp"] = None
        return sample

    samples = interleaved(repeats, {"otel_rl": otel, "sdk": sdk_counting, "sdk_otlp": sdk_otlp,
                                    "jsonl": jsonl}, ctx.log)
    rows = [
        make_row(f"burst {n:,}: lost (file / no-op exporter)", "spans lost", samples, field("lost"),
                 fmt="count", targets=lambda c: [max_target("0 lost", c["otel_rl"], 0)],
                 note="otel_rl: trace-file lines and provider processors; SDK: default queue 2048"),
        make_row(f"burst {n:,}: lost (OTLP/gRPC)", "spans lost", samples, field("lost_otlp"),
                 sources={"sdk": "sdk_otlp", "jsonl": None}, fmt="count",
                 targets=lambda c: [max_target("0 lost", c["otel_rl"], 0)],
                 note="receiver count; SDK: default BatchSpanProcessor"),
        make_row(f"burst {n:,}: otel_rl drop counters", "count", samples,
                 field("drop_counter_total"), sources={"sdk": None, "jsonl": None}, fmt="count",
                 targets=lambda c: [max_target("0", c["otel_rl"], 0)],
                 note="otel_rl.diagnostics() drop/lost/error kinds"),
    ]
    return {"title": "6. burst at default settings", "params": {"n": n}, "samples": samples, "rows": rows}


# --------------------------------------------------------------------------- 7. concurrency


def _threaded(threads: int, body: Callable[[], None]) -> float:
    barrier = threading.Barrier(threads + 1)

    def run() -> None:
        barrier.wait()
        body()

    workers = [threading.Thread(target=run, name=f"bench-{i}") for i in range(threads)]
    for w in workers:
        w.start()
    t = Timer().start()
    barrier.wait()
    for w in workers:
        w.join()
    return t.lap_wall()


async def _otel_async_session(task_id: Any) -> None:
    sid = otel_rl.register_session(task_id)
    otel_rl.set_session_id(sid)
    async with otel_rl.atrace_session_phase("generate"):
        await asyncio.sleep(0)
    async with otel_rl.atrace_session_phase("reward"):
        await asyncio.sleep(0)
    otel_rl.trace_session_event("mark_finalized", session_id=sid, status="accepted")


async def _jsonl_async_session(tracker: JsonlSessionTracker, task_id: Any) -> None:
    sid = tracker.register_session(task_id)
    tracker.record_event(sid, "mark_generate_start")
    await asyncio.sleep(0)
    tracker.record_event(sid, "mark_generate_end")
    tracker.record_event(sid, "mark_reward_start")
    await asyncio.sleep(0)
    tracker.record_event(sid, "mark_reward_end")
    tracker.record_event(sid, "mark_finalized", status="accepted")


async def _sdk_async_session(tracer: Any, task_span: Any) -> None:
    parent = trace_api.set_span_in_context(task_span)
    with tracer.start_as_current_span("session", context=parent) as session:
        with tracer.start_as_current_span("generate"):
            await asyncio.sleep(0)
        with tracer.start_as_current_span("reward"):
            await asyncio.sleep(0)
        session.set_attribute("rl.session.status", "accepted")


def w_concurrency(ctx: Context, repeats: int) -> dict[str, Any]:
    threads, per_thread = ctx.sizes.threads, ctx.sizes.thread_n
    total = threads * per_thread
    name = "bench.thread"
    n_async = ctx.sizes.async_sessions
    n_tasks = max(1, n_async // SESSIONS_PER_TASK)
    n_async = n_tasks * SESSIONS_PER_TASK
    async_spans = n_tasks + 3 * n_async

    # -- 16 threads
    def otel_threads() -> dict[str, Any]:
        counter = CountingProcessor()
        with ctx.otel(processors=(counter,)) as run:
            def body() -> None:
                scope = otel_rl.trace_scope
                for _ in range(per_thread):
                    with scope(name):
                        pass
            cpu0 = Timer().start()
            wall = _threaded(threads, body)
            otel_rl.save(force=True)
            cpu = cpu0.stop_cpu()
            present = counter.by_name[name]
            tids = len(counter.threads)
            run.close()
            sample = {"n": total, "caller_s": wall, "cpu_s": cpu, "present": present, "threads_seen": tids}
            if ctx.file_export:
                counted = count_trace_events(run.run_dir, {name})
                sample["file_events"] = counted["events"]
                sample["file_tids"] = counted["tids"]
                sample["present"] = min(present, counted["events"])
        sample["missing"] = total - sample["present"]
        return sample

    def sdk_threads() -> dict[str, Any]:
        sdk = SdkTracer(CountingExporter())
        try:
            def body() -> None:
                start = sdk.tracer.start_as_current_span
                for _ in range(per_thread):
                    with start(name):
                        pass
            cpu0 = Timer().start()
            wall = _threaded(threads, body)
            sdk.flush(FLUSH_TIMEOUT_MS)
            cpu = cpu0.stop_cpu()
            present = sdk.exporter.exported
            return {"n": total, "caller_s": wall, "cpu_s": cpu, "present": present,
                    "missing": total - present}
        finally:
            sdk.close()

    def jsonl_threads() -> dict[str, Any]:
        path = os.path.join(ctx.tmpdir("jsonl-"), "trace.jsonl")
        tracer = JsonlTracer(path)

        def body() -> None:
            scope = tracer.trace_scope
            for _ in range(per_thread):
                with scope(name):
                    pass
        cpu0 = Timer().start()
        wall = _threaded(threads, body)
        present = tracer.save()
        cpu = cpu0.stop_cpu()
        os.unlink(path)
        return {"n": total, "caller_s": wall, "cpu_s": cpu, "present": present, "missing": total - present}

    # -- 1,000 concurrent asyncio sessions
    def otel_async() -> dict[str, Any]:
        counter = CountingProcessor()
        with ctx.otel(processors=(counter,)) as run:
            async def main() -> None:
                task_ids = [otel_rl.register_task() for _ in range(n_tasks)]
                await asyncio.gather(*(_otel_async_session(task_ids[i % n_tasks]) for i in range(n_async)))

            t = Timer().start()
            contextvars.copy_context().run(asyncio.run, main())
            wall = t.lap_wall()
            otel_rl.save(force=True)
            cpu = t.stop_cpu()
            spans = counter.total
            run.close()
            records = read_session_records(run.run_dir)
        complete = sum(1 for r in records if r.get("status") == "accepted"
                       and r.get("phase_counts", {}).get("generate") == 1
                       and r.get("phase_counts", {}).get("reward") == 1)
        return {"n": n_async, "caller_s": wall, "cpu_s": cpu, "records": len(records),
                "complete": complete, "missing": n_async - complete,
                "spans": spans, "spans_missing": async_spans - spans,
                "by_name": dict(counter.by_name)}

    def sdk_async() -> dict[str, Any]:
        sdk = SdkTracer(CountingExporter())
        try:
            async def main() -> None:
                task_spans = [sdk.tracer.start_span("task") for _ in range(n_tasks)]
                await asyncio.gather(*(_sdk_async_session(sdk.tracer, task_spans[i % n_tasks])
                                       for i in range(n_async)))
                for span in task_spans:
                    span.end()

            t = Timer().start()
            contextvars.copy_context().run(asyncio.run, main())
            wall = t.lap_wall()
            sdk.flush(FLUSH_TIMEOUT_MS)
            cpu = t.stop_cpu()
            spans = sdk.exporter.exported
            return {"n": n_async, "caller_s": wall, "cpu_s": cpu, "spans": spans,
                    "spans_missing": async_spans - spans,
                    "missing": n_async - min(n_async, (spans - n_tasks) // 3)}
        finally:
            sdk.close()

    def jsonl_async() -> dict[str, Any]:
        path = os.path.join(ctx.tmpdir("jsonl-"), "sessions.jsonl")
        tracker = JsonlSessionTracker(path)

        async def main() -> None:
            task_ids = [tracker.register_task() for _ in range(n_tasks)]
            await asyncio.gather(*(_jsonl_async_session(tracker, task_ids[i % n_tasks])
                                   for i in range(n_async)))

        t = Timer().start()
        asyncio.run(main())
        wall = t.lap_wall()
        tracker.flush()
        cpu = t.stop_cpu()
        with open(path, encoding="utf-8") as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        os.unlink(path)
        complete = sum(1 for r in records if r["status"] == "accepted"
                       and r["phase_counts"]["generate"] == 1 and r["phase_counts"]["reward"] == 1)
        return {"n": n_async, "caller_s": wall, "cpu_s": cpu, "records": len(records),
                "complete": complete, "missing": n_async - complete}

    ctx.log("  variant: threads")
    thread_samples = interleaved(repeats, {"otel_rl": otel_threads, "sdk": sdk_threads,
                                           "jsonl": jsonl_threads}, ctx.log)
    ctx.log("  variant: asyncio sessions")
    async_samples = interleaved(repeats, {"otel_rl": otel_async, "sdk": sdk_async,
                                          "jsonl": jsonl_async}, ctx.log)
    ms = lambda s: s["caller_s"] * 1e3  # noqa: E731
    rows = [
        make_row(f"{threads} threads × {per_thread:,} scopes: wall", "ms total", samples=thread_samples,
                 fn=ms, note=f"{total:,} spans; wall from barrier release to join"),
        make_row(f"{threads} threads: spans missing", "spans missing", thread_samples, field("missing"),
                 fmt="count", targets=lambda c: [max_target("all present", c["otel_rl"], 0)],
                 note="otel_rl: provider processor and trace file; SDK: default queue 2048"),
        make_row(f"{n_async:,} asyncio sessions (gather): wall", "ms total", async_samples, ms,
                 note=f"{n_tasks} tasks × {SESSIONS_PER_TASK} sessions, generate + reward with await"),
        make_row(f"{n_async:,} asyncio sessions: incomplete", "sessions", async_samples, field("missing"),
                 fmt="count", targets=lambda c: [max_target("all complete", c["otel_rl"], 0)],
                 note="otel_rl/JSONL: accepted records with 1 generate + 1 reward; SDK: spans/3"),
    ]
    return {"title": "7. concurrency", "params": {"threads": threads, "per_thread": per_thread,
                                                  "async_sessions": n_async, "async_tasks": n_tasks},
            "samples": {"threads": thread_samples, "asyncio": async_samples}, "rows": rows}


# --------------------------------------------------------------------------- 8. memory


def _traced_peak(run: Callable[[], None]) -> tuple[int, int]:
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        run()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base, current - base


def w_memory(ctx: Context, repeats: int, memory_sessions: int | None = None) -> dict[str, Any]:
    tasks = max(1, ctx.sizes.tracemalloc_sessions // SESSIONS_PER_TASK)
    n = tasks * SESSIONS_PER_TASK

    def otel() -> dict[str, Any]:
        with ctx.otel():
            otel_session_loop(10)
            otel_rl.save(force=True)

            def body() -> None:
                otel_session_loop(tasks)
                otel_rl.save(force=True)
            peak, retained = _traced_peak(body)
        return {"n": n, "peak_bytes": peak, "retained_bytes": retained}

    def jsonl() -> dict[str, Any]:
        path = os.path.join(ctx.tmpdir("jsonl-"), "sessions.jsonl")
        tracker = JsonlSessionTracker(path)
        jsonl_session_loop(tracker, 10)
        tracker.flush()

        def body() -> None:
            jsonl_session_loop(tracker, tasks)
            tracker.flush()
        peak, retained = _traced_peak(body)
        os.unlink(path)
        return {"n": n, "peak_bytes": peak, "retained_bytes": retained}

    def sdk() -> dict[str, Any]:
        tracer = SdkTracer(CountingExporter())
        try:
            sdk_session_loop(tracer.tracer, 10)
            tracer.flush()

            def body() -> None:
                sdk_session_loop(tracer.tracer, tasks)
                tracer.flush(FLUSH_TIMEOUT_MS)
            peak, retained = _traced_peak(body)
        finally:
            tracer.close()
        return {"n": n, "peak_bytes": peak, "retained_bytes": retained}

    samples = interleaved(repeats, {"otel_rl": otel, "sdk": sdk, "jsonl": jsonl}, ctx.log)

    total = memory_sessions if memory_sessions is not None else ctx.sizes.memory_sessions
    chunks = ctx.sizes.memory_chunks
    series = {}
    for kind in ("otel_rl", "jsonl"):
        ctx.log(f"  RSS series: {kind}, {total:,} sessions in {chunks} chunks (child process)")
        series[kind] = rss_series_subprocess(kind, total, chunks, ctx)
        ctx.log("    " + json.dumps({k: v for k, v in series[kind].items() if k != "chunks"}))
    kib = lambda s: s["peak_bytes"] / 1024  # noqa: E731
    rows = [
        make_row(f"session workload peak memory ({n:,} sessions)", "KiB tracemalloc peak", samples, kib,
                 fmt="kib", note="loop + flush, all threads; JSONL keeps records until flush_threshold"),
        _rss_row(series, total, chunks),
    ]
    return {"title": "8. memory", "params": {"tracemalloc_sessions": n, "memory_sessions": total,
                                             "chunks": chunks},
            "samples": samples, "rss_series": series, "rows": rows}


def _rss_row(series: dict[str, dict], total: int, chunks: int) -> dict[str, Any]:
    cells: dict[str, dict | None] = {"otel_rl": None, "sdk": None, "jsonl": None}
    for kind, result in series.items():
        growth = result.get("late_growth_kib")
        if growth is not None:
            cells[kind] = {"median": growth, "min": growth, "max": growth, "q1": growth, "q3": growth, "n": 1}
    otel = series.get("otel_rl", {})
    note = ("RSS KiB after each chunk: " + ", ".join(str(c["rss_kib"]) for c in otel.get("chunks", []))
            if otel.get("chunks") else otel.get("error", "no data"))
    per_session = otel.get("late_bytes_per_session")
    ref = ("info: otel_rl " + (f"{per_session:,.0f} B/session" if per_session is not None else "—")
           + " in the 2nd half; flat ≈ 0")
    return {
        "ref": ref,
        "label": f"RSS growth, 2nd half of {total:,} sessions", "unit": "KiB", "fmt": "kib",
        "sources": {"otel_rl": "otel_rl", "sdk": None, "jsonl": "jsonl"}, "cells": cells,
        "ratio_sdk": None, "ratio_jsonl": None, "targets": [], "passed": None,
        "note": note + f" (--memory-sessions; {chunks} chunks, save at each)",
    }


def rss_series_subprocess(kind: str, sessions: int, chunks: int, ctx: Context) -> dict[str, Any]:
    root = ctx.tmpdir("rss-")
    cmd = [sys.executable, "-m", "bench.memory", "--kind", kind, "--sessions", str(sessions),
           "--chunks", str(chunks), "--fileroot", root,
           "--file-export", "1" if ctx.file_export else "0"]
    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        proc = subprocess.run(cmd, cwd=project, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {proc.stderr[-2000:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


WORKLOADS: dict[str, Callable[..., dict[str, Any]]] = {
    "disabled": w_disabled,
    "enabled_scope": w_enabled_scope,
    "otlp": w_otlp,
    "attrs5": w_attrs5,
    "sessions": w_sessions,
    "burst": w_burst,
    "concurrency": w_concurrency,
    "memory": w_memory,
}
