"""Whole-machine workloads: CPU of every process, wall while export runs,
exporter throughput, bytes written.

The older workloads take ``time.process_time()`` of the benchmark process;
otel_rl also starts an exporter process, whose CPU is another core's. Here
every figure named "all processes" is :func:`machine_cpu_s` taken before and
after: this process (every thread), every live descendant process found in
``/proc`` (the exporter child and anything it starts) read from its CPU-time clock
(``clock_getcpuclockid``: user + system, to the nanosecond; ``/proc/<pid>/stat``'s
10 ms ticks where there is none), and ``RUSAGE_CHILDREN`` for descendants that
exited and were reaped in between. The counting OTLP receiver (a stand-in for a collector on another
machine) is left out.
"""

from __future__ import annotations

import contextvars
import ctypes
import gc
import glob
import importlib.util
import os
import resource
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import otel_rl

from .baselines import CountingExporter, JsonlSessionTracker, JsonlTracer, SdkTracer
from .harness import FLUSH_TIMEOUT_MS, Context, count_trace_events, drop_counters, interleaved
from .workloads import (
    SCOPE,
    SESSIONS_PER_TASK,
    WARM,
    _scope_loops,
    extra_stats,
    jsonl_session_loop,
    make_row,
    otel_session_loop,
    ratio_target,
    sdk_session_loop,
    us_per,
)

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_KIB = (os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096) // 1024
#: The steady-state session row warms the exporter with this many times the measured tasks:
#: at the full size 240,000 sessions, enough for the benchmark's four lanes to pass the
#: encoder's 50,000-interval cap and prune as a long run's do.
STEADY_WARM_FACTOR = 12


# --------------------------------------------------------------------------- CPU of every process


def _proc_table() -> dict[int, tuple[int, float, int]]:
    """``pid -> (ppid, cpu seconds, resident KiB)`` for every process /proc shows (Linux)."""
    table = {}
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(path, "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            table[int(path.split("/")[2])] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK,
                                              int(fields[21]) * _PAGE_KIB)
        except (OSError, ValueError, IndexError):
            continue
    return table


def _descendants(table: dict[int, tuple[int, float, int]], exclude: set[int]) -> list[int]:
    """Every live descendant of this process in ``table``, except ``exclude`` and their own."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(os.getpid(), ()))
    while todo:
        pid = todo.pop()
        if pid in exclude:
            continue
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.clock_getcpuclockid  # noqa: B018 - present, or this host reads ticks
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def _cpu_clock_s(pid: int) -> float | None:
    """The CPU seconds of process ``pid`` (every thread, user and system) to the nanosecond
    (its POSIX CPU-time clock), or ``None`` where the clock cannot be read."""
    if _LIBC is None:
        return None
    clock = ctypes.c_int()
    if _LIBC.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
        return None
    try:
        return time.clock_gettime(clock.value)
    except OSError:  # it exited meanwhile
        return None


def descendants_cpu_s(exclude: set[int] = frozenset()) -> float:
    """CPU seconds of every live descendant of this process, except ``exclude``
    and their own descendants. Each is read from its CPU-time clock where the host has one:
    ``/proc``'s ticks (10 ms) put about ±0.5 µs on a session's exporter share at the
    benchmark's size, more than the differences it measures."""
    table = _proc_table()
    total = 0.0
    for pid in _descendants(table, exclude):
        precise = _cpu_clock_s(pid)
        total += table[pid][1] if precise is None else precise
    return total


def descendants_rss_kib() -> int:
    """Resident KiB of every live descendant of this process (otel_rl's exporter process)."""
    table = _proc_table()
    return sum(table[pid][2] for pid in _descendants(table, set()))


def _reaped_children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_cpu_s(ctx: Context) -> float:
    """This process + live descendants (their CPU clocks) + reaped descendants (rusage).

    Differences of two readings count every process otel_rl started between
    them, whether it is still running or has exited and been reaped. The
    receiver child is excluded.
    """
    receiver = getattr(ctx, "_receiver", None)
    exclude = {receiver.pid} if receiver is not None else set()
    return time.process_time() + descendants_cpu_s(exclude) + _reaped_children_cpu_s()


def exporter_only_cpu_s(ctx: Context) -> float:
    """Live descendants only (otel_rl's exporter process), receiver excluded."""
    receiver = getattr(ctx, "_receiver", None)
    return descendants_cpu_s({receiver.pid} if receiver is not None else set())


def quiesce() -> None:
    """Before a measured window: the page cache's dirty pages written out and this process's
    garbage collected, as :meth:`.harness.Timer.start` collects. The steady-state row's
    warm-up writes about 450 MB of trace lines, and earlier workloads their own: the kernel
    writes them back in its own threads, on the same cores, whenever it gets to them, which
    would otherwise fall into whichever window came next."""
    if hasattr(os, "sync"):
        os.sync()
    gc.collect()


# --------------------------------------------------------------------------- 9. total CPU, every process


def _otel_total(ctx: Context, n_items: int, warm: Callable[[], None], body: Callable[[], None]) -> dict:
    life0 = machine_cpu_s(ctx)
    with ctx.otel() as run:
        run_ctx = contextvars.copy_context()
        run_ctx.run(warm)
        otel_rl.save(force=True)
        quiesce()
        c0, x0, w0 = machine_cpu_s(ctx), exporter_only_cpu_s(ctx), time.perf_counter()
        run_ctx.run(body)
        otel_rl.save(force=True)
        wall = time.perf_counter() - w0
        c1, x1 = machine_cpu_s(ctx), exporter_only_cpu_s(ctx)
        drops = drop_counters(otel_rl.diagnostics())
        run.close()
    life1 = machine_cpu_s(ctx)
    return {"n": n_items, "all_cpu_s": c1 - c0, "exporter_cpu_s": x1 - x0, "wall_s": wall,
            "lifetime_cpu_s": life1 - life0, "drops": drops}


def _plain_total(ctx: Context, n_items: int, warm: Callable[[], None], body: Callable[[], None],
                 finish: Callable[[], None]) -> dict:
    warm()
    finish()
    quiesce()
    c0, w0 = machine_cpu_s(ctx), time.perf_counter()
    body()
    finish()
    return {"n": n_items, "all_cpu_s": machine_cpu_s(ctx) - c0, "wall_s": time.perf_counter() - w0}


def w_total_cpu(ctx: Context, repeats: int) -> dict[str, Any]:
    n = ctx.sizes.scope_n
    tasks = ctx.sizes.session_tasks
    sessions = tasks * SESSIONS_PER_TASK
    otel_loop, sdk_loop, jsonl_loop = _scope_loops(False)
    warm_n, warm_tasks = max(200, n // 10), max(10, tasks // 10)

    def jsonl_scopes() -> dict:
        tracer = JsonlTracer(os.path.join(ctx.tmpdir("jsonl-"), "trace.jsonl"))
        return _plain_total(ctx, n, lambda: jsonl_loop(tracer, warm_n, WARM),
                            lambda: jsonl_loop(tracer, n, SCOPE), tracer.save)

    def sdk_scopes() -> dict:
        sdk = SdkTracer(CountingExporter())
        try:
            return _plain_total(ctx, n, lambda: sdk_loop(sdk.tracer, warm_n, WARM),
                                lambda: sdk_loop(sdk.tracer, n, SCOPE), lambda: sdk.flush(FLUSH_TIMEOUT_MS))
        finally:
            sdk.close()

    def jsonl_sessions() -> dict:
        tracker = JsonlSessionTracker(os.path.join(ctx.tmpdir("jsonl-"), "sessions.jsonl"))
        return _plain_total(ctx, sessions, lambda: jsonl_session_loop(tracker, warm_tasks),
                            lambda: jsonl_session_loop(tracker, tasks), tracker.flush)

    def sdk_sessions() -> dict:
        sdk = SdkTracer(CountingExporter())
        try:
            return _plain_total(ctx, sessions, lambda: sdk_session_loop(sdk.tracer, warm_tasks),
                                lambda: sdk_session_loop(sdk.tracer, tasks), lambda: sdk.flush(FLUSH_TIMEOUT_MS))
        finally:
            sdk.close()

    def areal_scopes(module: types.ModuleType) -> dict:
        tracer = _areal_tracer(module, ctx.tmpdir("areal-"), requests=False)
        return _plain_total(ctx, n, lambda: _areal_scope_loop(tracer, warm_n, WARM),
                            lambda: _areal_scope_loop(tracer, n, SCOPE), lambda: tracer.save(force=True))

    def areal_sessions(module: types.ModuleType) -> dict:
        tracer = _areal_tracer(module, ctx.tmpdir("areal-"), requests=True)
        return _plain_total(ctx, sessions, lambda: _areal_session_loop(module, tracer, warm_tasks),
                            lambda: _areal_session_loop(module, tracer, tasks), lambda: tracer.save(force=True))

    scope_contenders = {
        "otel_rl": lambda: _otel_total(ctx, n, lambda: otel_loop(warm_n, WARM), lambda: otel_loop(n, SCOPE)),
        "sdk": sdk_scopes, "jsonl": jsonl_scopes}
    steady_tasks = tasks * STEADY_WARM_FACTOR

    def steady_warm() -> None:
        # Saved every `tasks` tasks, as a paced run keeps the exporter caught up: an unpaced
        # warm-up would drop spans at the backlog bound and never fill the lanes.
        for _ in range(STEADY_WARM_FACTOR):
            otel_session_loop(tasks)
            otel_rl.save(force=True)

    session_contenders = {
        "otel_rl": lambda: _otel_total(ctx, sessions, lambda: otel_session_loop(warm_tasks),
                                       lambda: otel_session_loop(tasks)),
        "otel_rl_steady": lambda: _otel_total(ctx, sessions, steady_warm, lambda: otel_session_loop(tasks)),
        "sdk": sdk_sessions, "jsonl": jsonl_sessions}
    areal_scope, areal_session = _areal_contenders(ctx, areal_scopes, areal_sessions)
    if areal_scope is not None:
        scope_contenders["areal"] = areal_scope
        session_contenders["areal"] = areal_session
    ctx.log("  variant: enabled scope (file)")
    scope = interleaved(repeats, scope_contenders, ctx.log)
    ctx.log("  variant: sessions")
    sess = interleaved(repeats, session_contenders, ctx.log)
    jsonl_target = lambda c: [ratio_target("≤1.0× JSONL", c["otel_rl"], c["jsonl"], 1.0)]  # noqa: E731
    counts = ("all processes: this one (all threads) + otel_rl's exporter process (its CPU clock while it "
              "runs, rusage once reaped); loop + save(force=True)")
    rows = [
        make_row("total CPU, all processes: enabled scope (file)", "µs CPU/span", scope, us_per("all_cpu_s"),
                 targets=jsonl_target, note=counts + "; SDK = counting no-op exporter"),
        make_row("  of which otel_rl's exporter process", "µs CPU/span", scope, us_per("exporter_cpu_s"),
                 note="CPU clock (user + system) of the live exporter child over the same window"),
        make_row("total CPU, all processes: session (4 × generate+reward, finalize)", "µs CPU/session",
                 sess, us_per("all_cpu_s"), targets=jsonl_target,
                 note=counts + "; otel_rl writes session records, spans and metrics"),
        make_row("  of which otel_rl's exporter process", "µs CPU/session", sess, us_per("exporter_cpu_s"),
                 note="CPU clock (user + system) of the live exporter child over the same window"),
        make_row(f"  same, exporter in its steady state (after {steady_tasks * SESSIONS_PER_TASK:,} sessions)",
                 "µs CPU/session", sess, us_per("all_cpu_s"), sources={"otel_rl": "otel_rl_steady", "sdk": None},
                 note="the same loop once the exporter's lanes hold their capped placement history, "
                      "as in a long run (the row above starts each repeat with a fresh exporter)"),
        make_row("    of which otel_rl's exporter process", "µs CPU/session", sess, us_per("exporter_cpu_s"),
                 sources={"otel_rl": "otel_rl_steady", "sdk": None, "jsonl": None},
                 note="CPU clock (user + system) of the live exporter child over the same window"),
    ]
    if areal_scope is not None:
        areal_note = ("otel_rl column shows AReaL's perf_tracer (loaded with --areal; its request tracer "
                      "for sessions, one request per session), against the same JSONL baseline")
        rows.insert(2, make_row("  AReaL perf_tracer: total CPU per scope", "µs CPU/span", scope,
                                us_per("all_cpu_s"), sources={"otel_rl": "areal", "jsonl": "jsonl"},
                                note=areal_note))
        rows.append(make_row("  AReaL perf_tracer: total CPU per session", "µs CPU/session", sess,
                             us_per("all_cpu_s"), sources={"otel_rl": "areal", "jsonl": "jsonl"},
                             note=areal_note))
    rows += [
        make_row("session: whole run incl. exporter start/stop", "ms CPU total", sess,
                 lambda s: s["lifetime_cpu_s"] * 1e3, sources={"sdk": None, "jsonl": None},
                 note="configure → reset: every process, including starting and stopping the exporter "
                      "child (a fixed cost per run, not per session)"),
    ]
    return {"title": "9. total CPU of every process", "params": {"n": n, "sessions": sessions},
            "samples": {"scope": scope, "sessions": sess}, "rows": rows}


# --------------------------------------------------------------------------- 10. OTLP + file vs SDK OTLP


def w_otlp_total(ctx: Context, repeats: int) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    n = ctx.sizes.otlp_n
    receiver = ctx.receiver
    otel_loop, sdk_loop, _ = _scope_loops(False)
    warm = max(200, n // 10)
    sdk_queue = max(2048, n + warm)
    endpoints = {"grpc": receiver.endpoint, "http/protobuf": receiver.http_endpoint}

    def otel(protocol: str) -> dict:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoints[protocol]
        os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = protocol
        try:
            cm = ctx.otel()  # reads the environment at configure; ctx.otel removes both keys
            run = cm.__enter__()
        finally:
            os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
            os.environ.pop("OTEL_EXPORTER_OTLP_PROTOCOL", None)
        try:
            otel_loop(warm, WARM)
            otel_rl.save(force=True)
            receiver.start_counting(warm)
            quiesce()
            c0 = machine_cpu_s(ctx)
            otel_loop(n, SCOPE)
            otel_rl.save(force=True)
            received = receiver.wait_for(n, timeout_s=60.0)
            cpu = machine_cpu_s(ctx) - c0
            run.close()
            file_events = count_trace_events(run.run_dir, {SCOPE})["events"] if ctx.file_export else None
        finally:
            cm.__exit__(None, None, None)
        return {"n": n, "all_cpu_s": cpu, "received": received, "lost": n - received, "file_events": file_events}

    def sdk(protocol: str) -> dict:
        exporter = (GrpcExporter(endpoint=endpoints["grpc"], insecure=True) if protocol == "grpc"
                    else HttpExporter(endpoint=endpoints["http/protobuf"] + "/v1/traces"))
        tracer = SdkTracer(exporter, max_queue_size=sdk_queue)
        try:
            sdk_loop(tracer.tracer, warm, WARM)
            tracer.flush(FLUSH_TIMEOUT_MS)
            receiver.start_counting(warm)
            quiesce()
            c0 = machine_cpu_s(ctx)
            sdk_loop(tracer.tracer, n, SCOPE)
            tracer.flush(FLUSH_TIMEOUT_MS)
            received = receiver.wait_for(n, timeout_s=60.0)
            cpu = machine_cpu_s(ctx) - c0
        finally:
            tracer.close()
        return {"n": n, "all_cpu_s": cpu, "received": received, "lost": n - received}

    rows, out = [], {}
    for protocol in ("grpc", "http/protobuf"):
        ctx.log(f"  variant: OTLP {protocol}")
        samples = interleaved(repeats, {"otel_rl": lambda: otel(protocol), "sdk": lambda: sdk(protocol)},
                              ctx.log)
        out[protocol] = samples
        rows.append(make_row(f"OTLP/{protocol} + file vs SDK OTLP: total CPU, all processes", "µs CPU/span",
                             samples, us_per("all_cpu_s"),
                             targets=lambda c: [ratio_target("≤0.25× SDK+OTLP", c["otel_rl"], c["sdk"], 0.25)],
                             note="otel_rl: this process + exporter process, OTLP and its trace file; SDK: "
                                  "BatchSpanProcessor + OTLP exporter, no file; until the receiver has every span"))
        rows.append(make_row(f"OTLP/{protocol}: received", "spans lost", samples, lambda s: s["lost"], fmt="count",
                             note=f"of {n} per repeat; SDK max_queue_size={sdk_queue}"))
    return {"title": "10. OTLP + file vs the SDK's OTLP exporter, all processes",
            "params": {"n": n, "sdk_max_queue_size": sdk_queue}, "samples": out, "rows": rows}


# --------------------------------------------------------------------------- 11. wall while export runs


def w_wall_interleaved(ctx: Context, repeats: int) -> dict[str, Any]:
    """otel_rl and the JSONL tracer in one process, chunk by chunk, order
    alternating: otel_rl's export runs in the background the whole time."""
    n = ctx.sizes.scope_n
    tasks = ctx.sizes.session_tasks
    rounds = 10
    otel_loop, _, jsonl_loop = _scope_loops(False)

    def one_repeat(kind: str) -> dict[str, dict]:
        tmp = ctx.tmpdir("jsonl-")
        if kind == "scope":
            chunk = max(1, n // rounds)
            tracer = JsonlTracer(os.path.join(tmp, "trace.jsonl"))
            otel_body, jsonl_body, jsonl_save = (lambda: otel_loop(chunk, SCOPE),
                                                 lambda: jsonl_loop(tracer, chunk, SCOPE), tracer.save)
            per = chunk
        else:
            chunk = max(1, tasks // rounds)
            tracker = JsonlSessionTracker(os.path.join(tmp, "sessions.jsonl"))
            otel_body, jsonl_body, jsonl_save = (lambda: otel_session_loop(chunk),
                                                 lambda: jsonl_session_loop(tracker, chunk), tracker.flush)
            per = chunk * SESSIONS_PER_TASK
        totals = {"otel": 0.0, "jsonl": 0.0, "jsonl_loop": 0.0}
        with ctx.otel() as run:
            run_ctx = contextvars.copy_context()
            run_ctx.run(otel_body)
            jsonl_body()
            jsonl_save()
            otel_rl.save(force=True)

            def time_otel() -> None:
                t0 = time.perf_counter()
                run_ctx.run(otel_body)
                totals["otel"] += time.perf_counter() - t0

            def time_jsonl() -> None:
                t0 = time.perf_counter()
                jsonl_body()
                t1 = time.perf_counter()
                jsonl_save()
                totals["jsonl_loop"] += t1 - t0
                totals["jsonl"] += time.perf_counter() - t0

            for r in range(rounds):
                for step in ((time_otel, time_jsonl) if r % 2 == 0 else (time_jsonl, time_otel)):
                    step()
            t0 = time.perf_counter()
            otel_rl.save(force=True)
            final_save = time.perf_counter() - t0
            drops = drop_counters(otel_rl.diagnostics())
            run.close()
        items = per * rounds
        return {"otel_rl": {"n": items, "wall_s": totals["otel"], "final_save_s": final_save, "drops": drops},
                "jsonl": {"n": items, "wall_s": totals["jsonl"], "loop_s": totals["jsonl_loop"]}}

    out, rows = {}, []
    for kind, unit in (("scope", "µs/span"), ("session", "µs/session")):
        ctx.log(f"  variant: {kind}")
        samples: dict[str, list[dict]] = {"otel_rl": [], "jsonl": []}
        for rep in range(repeats):
            got = one_repeat(kind)
            for name, sample in got.items():
                sample["repeat"] = rep
                samples[name].append(sample)
            ctx.log(f"    #{rep + 1}: otel_rl {got['otel_rl']['wall_s']:.4g}s, "
                    f"JSONL {got['jsonl']['wall_s']:.4g}s")
        out[kind] = samples
        rows.append(make_row(f"wall while export runs, one process: {kind}", unit, samples, us_per("wall_s"),
                             targets=lambda c: [ratio_target("≤1.0× JSONL", c["otel_rl"], c["jsonl"], 1.0)],
                             note=f"{rounds} chunks each, alternating order; otel_rl: loop wall, export "
                                  "running meanwhile; JSONL: loop + its save() (where it encodes)"))
        rows.append(make_row(f"  {kind}: JSONL loop only / otel_rl final save", unit, samples,
                             lambda s: (s["loop_s"] if "loop_s" in s else s["final_save_s"]) / s["n"] * 1e6,
                             note="info: JSONL without its save; otel_rl's save(force=True) after the last chunk"))
    return {"title": "11. wall time while export runs, interleaved in one process",
            "params": {"n": n, "tasks": tasks, "rounds": rounds}, "samples": out, "rows": rows}


# --------------------------------------------------------------------------- 12. exporter throughput


def _min_target(text: str, cell: dict | None, limit: float) -> dict[str, Any]:
    measured = cell and cell["median"]
    return {"text": text, "kind": "min", "limit": limit, "measured": measured,
            "passed": None if measured is None else measured >= limit}


def w_exporter_throughput(ctx: Context, repeats: int) -> dict[str, Any]:
    n = ctx.sizes.burst_n * 2
    otel_loop, _, _ = _scope_loops(False)

    def push(variant: str) -> dict:
        overrides: dict[str, Any] = {}
        if variant != "file":
            overrides["otlp_endpoint"] = ctx.receiver.endpoint
        if variant == "otlp":
            overrides["file_export"] = False
        with ctx.otel(**overrides) as run:
            otel_loop(1000, WARM)
            otel_rl.save(force=True)
            if variant != "file":
                ctx.receiver.start_counting(1000)
            x0, t0 = exporter_only_cpu_s(ctx), time.perf_counter()
            otel_loop(n, SCOPE)
            produced = time.perf_counter() - t0
            otel_rl.save(force=True)
            received = ctx.receiver.wait_for(n, timeout_s=120.0, settle_s=2.0) if variant != "file" else None
            elapsed = time.perf_counter() - t0
            exporter_cpu = exporter_only_cpu_s(ctx) - x0
            drops = drop_counters(otel_rl.diagnostics())
            run.close()
            written = count_trace_events(run.run_dir, {SCOPE})["events"] if overrides.get(
                "file_export", ctx.file_export) else None
        delivered = min(v for v in (received, written) if v is not None)
        return {"n": n, "elapsed_s": elapsed, "produce_s": produced, "exporter_cpu_s": exporter_cpu,
                "delivered": delivered, "lost": n - delivered, "drops": drops,
                "spans_per_s": delivered / elapsed,
                "per_exporter_cpu_s": n / exporter_cpu if exporter_cpu > 0 else None}

    variants = {"file": "file", "otlp": "OTLP/gRPC (file off)", "file+otlp": "file + OTLP/gRPC"}
    samples = interleaved(repeats, {v: (lambda v=v: push(v)) for v in variants}, ctx.log)
    rows = []
    for v, text in variants.items():
        view = {"otel_rl": samples[v]}
        rows.append(make_row(f"exporter throughput, {text}", "spans/s", view, lambda s: s["spans_per_s"],
                             fmt="count", targets=lambda c: [_min_target("≥60,000/s", c["otel_rl"], 60_000)],
                             note=f"{n:,} spans pushed as fast as one thread can, timed until save(force=True) "
                                  "returns (file) and the receiver has them (OTLP); delivered spans only"))
        rows.append(make_row(f"  {text}: spans per exporter-CPU second", "spans/s CPU", view,
                             lambda s: s["per_exporter_cpu_s"], fmt="count",
                             note="capacity: spans ÷ CPU seconds of the exporter process (/proc)"))
        rows.append(make_row(f"  {text}: lost", "spans lost", view, lambda s: s["lost"], fmt="count",
                             note="not in the file / not at the receiver; drop counters in the JSON"))
    return {"title": "12. exporter throughput (one exporter process)", "params": {"n": n},
            "samples": samples, "rows": rows}


# --------------------------------------------------------------------------- 13. bytes


_AREAL_MODULE = "bench_areal_perf_tracer"


def load_areal(path: str | None, log: Callable[[str], None]) -> types.ModuleType | None:
    """AReaL's ``perf_tracer.py`` loaded from ``path`` (``--areal``), or None with a message.

    The file imports ``areal.api.cli_args`` and ``areal.utils.logging``; when
    ``path`` sits at ``<root>/areal/utils/perf_tracer.py``, ``<root>`` is put on
    ``sys.path`` while it loads so that a checkout works without installing it.
    """
    if not path:
        return None
    if not os.path.isfile(path):
        log(f"  AReaL: {path} is not a file; AReaL figures skipped")
        return None
    parts = os.path.abspath(path).split(os.sep)
    root = os.sep.join(parts[:-3]) if parts[-3:-1] == ["areal", "utils"] else None
    if root:
        sys.path.insert(0, root)
    try:
        spec = importlib.util.spec_from_file_location(_AREAL_MODULE, path)
        module = importlib.util.module_from_spec(spec)
        # Registered before it runs: its dataclasses look their module up in sys.modules.
        sys.modules[_AREAL_MODULE] = module
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - its own imports (areal.*) may be missing
        sys.modules.pop(_AREAL_MODULE, None)
        log(f"  AReaL: cannot load {path} ({exc!r}); AReaL figures skipped")
        return None
    finally:
        if root:
            sys.path.remove(root)
    return module


def _areal_tracer(module: types.ModuleType, root: str, requests: bool) -> Any:
    """A ``PerfTracer`` of the call form read from AReaL (config object with
    ``enabled, fileroot, experiment_name, trial_name, save_interval, request_tracer``)."""
    request_cfg = types.SimpleNamespace(enabled=True, flush_threshold=100) if requests else None
    config = types.SimpleNamespace(enabled=True, fileroot=root, experiment_name="bench", trial_name="t",
                                   save_interval=1, request_tracer=request_cfg)
    return module.PerfTracer(config, rank=0)


def _dir_bytes(root: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(root, "**", "*"), recursive=True)
               if os.path.isfile(p))


def _areal_scope_loop(tracer: Any, k: int, name: str) -> None:
    scope = tracer.trace_scope
    for _ in range(k):
        with scope(name):
            pass


def _areal_session_loop(module: types.ModuleType, tracer: Any, tasks: int) -> None:
    """AReaL's request tracer: one request per session (it has no task level);
    generate and reward phases, execution end with a status, consumed."""
    requests = tracer.request_tracer
    ev = module.RequestTraceEvent
    for _ in range(tasks * SESSIONS_PER_TASK):
        rid = requests.register_submission()
        requests.record_event(rid, ev.ENQUEUED)
        requests.record_event(rid, ev.EXECUTION_START)
        requests.record_event(rid, ev.GENERATE_START)
        requests.record_event(rid, ev.GENERATE_END)
        requests.record_event(rid, ev.REWARD_START)
        requests.record_event(rid, ev.REWARD_END)
        requests.record_event(rid, ev.EXECUTION_END, status="accepted")
        requests.record_event(rid, ev.CONSUMED)


def _areal_scope_bytes(module: types.ModuleType, ctx: Context, n: int) -> dict:
    root = ctx.tmpdir("areal-")
    tracer = _areal_tracer(module, root, requests=False)
    _areal_scope_loop(tracer, n, SCOPE)
    tracer.save(force=True)
    size = _dir_bytes(root)
    return {"n": n, "bytes": size, "trace_bytes": size}


def _areal_session_bytes(module: types.ModuleType, ctx: Context, tasks: int) -> dict:
    root = ctx.tmpdir("areal-")
    tracer = _areal_tracer(module, root, requests=True)
    _areal_session_loop(module, tracer, tasks)
    tracer.save(force=True)
    return {"n": tasks * SESSIONS_PER_TASK, "bytes": _dir_bytes(root)}


def _areal_contenders(ctx: Context, scope: Callable[[Any], dict], sessions: Callable[[Any], dict]
                      ) -> tuple[Callable[[], dict] | None, Callable[[], dict] | None]:
    """``scope(module)`` and ``sessions(module)`` as contenders where ``--areal`` loads
    AReaL's module and a dry run of its known call forms works; (None, None) otherwise."""
    areal = load_areal(getattr(ctx, "areal_path", None), ctx.log)
    if areal is None:
        return None, None
    try:  # a dry run: an AReaL version with other call forms is skipped, not an error
        _areal_scope_bytes(areal, ctx, 10)
        _areal_session_bytes(areal, ctx, 2)
    except Exception as exc:  # noqa: BLE001
        ctx.log(f"  AReaL: its tracer did not run with the known call forms ({exc!r}); AReaL figures skipped")
        return None, None
    return (lambda: scope(areal)), (lambda: sessions(areal))


def _otel_bytes(ctx: Context, n_items: int, body: Callable[[], None]) -> dict:
    with ctx.otel() as run:
        contextvars.copy_context().run(body)
        otel_rl.save(force=True)
        run.close()
        by_kind: dict[str, int] = {}
        slices = 0
        for path in glob.glob(os.path.join(run.run_dir, "**", "*"), recursive=True):
            if os.path.isfile(path):
                kind = os.path.basename(path).split("-")[0].split(".")[0]
                by_kind[kind] = by_kind.get(kind, 0) + os.path.getsize(path)
                if kind == "traces":
                    with open(path, "rb") as f:
                        slices += sum(line.startswith(b'{"ph":"X"') for line in f)
    # Per slice written: spans dropped at the backlog bound would make the file look smaller.
    return {"n": n_items, "bytes": sum(by_kind.values()), "trace_bytes": by_kind.get("traces", 0),
            "slices": slices, "by_kind": by_kind}


def w_bytes(ctx: Context, repeats: int) -> dict[str, Any]:
    n = ctx.sizes.scope_n
    tasks = ctx.sizes.session_tasks
    sessions = tasks * SESSIONS_PER_TASK
    otel_loop, _, jsonl_loop = _scope_loops(False)

    def jsonl_scope() -> dict:
        path = os.path.join(ctx.tmpdir("jsonl-"), "trace.jsonl")
        tracer = JsonlTracer(path)
        jsonl_loop(tracer, n, SCOPE)
        tracer.save()
        return {"n": n, "bytes": os.path.getsize(path), "trace_bytes": os.path.getsize(path)}

    def jsonl_sessions() -> dict:
        path = os.path.join(ctx.tmpdir("jsonl-"), "sessions.jsonl")
        tracker = JsonlSessionTracker(path)
        jsonl_session_loop(tracker, tasks)
        tracker.flush()
        return {"n": sessions, "bytes": os.path.getsize(path)}

    scope_contenders = {"otel_rl": lambda: _otel_bytes(ctx, n, lambda: otel_loop(n, SCOPE)), "jsonl": jsonl_scope}
    session_contenders = {"otel_rl": lambda: _otel_bytes(ctx, sessions, lambda: otel_session_loop(tasks)),
                          "jsonl": jsonl_sessions}
    areal_scope, areal_sessions = _areal_contenders(ctx, lambda m: _areal_scope_bytes(m, ctx, n),
                                                    lambda m: _areal_session_bytes(m, ctx, tasks))
    areal = areal_scope is not None
    if areal:
        scope_contenders["areal"] = areal_scope
        session_contenders["areal"] = areal_sessions
    # Bytes do not vary between repeats; two show that they do not.
    scope = interleaved(max(1, min(repeats, 2)), scope_contenders, ctx.log)
    sess = interleaved(max(1, min(repeats, 2)), session_contenders, ctx.log)
    per = lambda s: s["bytes"] / s["n"]  # noqa: E731
    per_scope = lambda s: s["trace_bytes"] / (s.get("slices") or s["n"])  # noqa: E731
    per_record = lambda s: s["by_kind"].get("sessions", 0) / s["n"]  # noqa: E731

    def areal_target(fn: Callable[[dict], float], samples: dict) -> Callable[[dict], list[dict]]:
        """Target 6: otel_rl's bytes at most AReaL's, where AReaL's module is loaded."""
        if not areal:
            return lambda c: []
        ref = extra_stats(samples, "areal", per)
        return lambda c: [ratio_target("≤1.0× AReaL", extra_stats(samples, "otel_rl", fn), ref, 1.0)]

    rows = [
        make_row("trace-file bytes per scope", "bytes/span", scope, per_scope, fmt="kib",
                 targets=areal_target(per_scope, scope),
                 note="otel_rl: traces-*.jsonl (Chrome trace) per slice written; JSONL: its trace file"
                      + ("; AReaL in the next row" if areal else "; AReaL: not loaded (--areal PATH)")),
        make_row("bytes written per session", "bytes/session", sess, per, fmt="kib",
                 note="otel_rl: every file of the run (session records + trace + metrics + run files); "
                      "JSONL: its session records"),
        make_row("  of which session records", "bytes/session", sess, per_record, fmt="kib",
                 sources={"jsonl": None}, targets=areal_target(per_record, sess),
                 note="otel_rl: sessions-*.jsonl, against AReaL's request record of the same session"),
    ]
    if areal:
        rows.insert(1, make_row("  AReaL perf_tracer: trace-file bytes per scope", "bytes/span", scope, per,
                                sources={"otel_rl": "areal", "jsonl": "jsonl"}, fmt="kib",
                                note="otel_rl column shows AReaL: perf_tracer/traces-r0.jsonl"))
        rows.append(make_row("  AReaL request tracer: bytes per session", "bytes/session", sess, per,
                             sources={"otel_rl": "areal", "jsonl": "jsonl"}, fmt="kib",
                             note="otel_rl column shows AReaL: request_tracer/requests-r0.jsonl, one "
                                  "request per session (AReaL writes no spans for it)"))
    by_kind = {k: v / sessions for k, v in sess["otel_rl"][0]["by_kind"].items()}
    rows[2 if areal else 1]["ref"] = "info: otel_rl by file " + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(by_kind.items()))
    return {"title": "13. bytes written", "params": {"n": n, "sessions": sessions, "areal": areal},
            "samples": {"scope": scope, "sessions": sess}, "rows": rows}


WORKLOADS: dict[str, Callable[..., dict[str, Any]]] = {
    "total_cpu": w_total_cpu,
    "otlp_total": w_otlp_total,
    "wall_interleaved": w_wall_interleaved,
    "exporter_throughput": w_exporter_throughput,
    "bytes": w_bytes,
}
