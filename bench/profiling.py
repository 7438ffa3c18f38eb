"""``--profile``: where otel_rl's time goes, on the caller's thread and on the export thread.

cProfile sees only the thread it runs on, so the export work is profiled by
draining otel_rl's span queue on the main thread: spans are recorded with a
long export interval and fewer than the queue's wake-up size, then the drain
runs under the profiler.
"""

from __future__ import annotations

import cProfile
import io
import pstats
from collections.abc import Callable

import otel_rl

from .harness import Context
from .workloads import otel_session_loop


def _stats_text(profile: cProfile.Profile, title: str, limit: int = 25) -> str:
    buf = io.StringIO()
    buf.write(f"==== {title}\n")
    stats = pstats.Stats(profile, stream=buf)
    stats.sort_stats("tottime").print_stats(limit)
    return buf.getvalue()


def _profile(fn: Callable[[], None]) -> cProfile.Profile:
    profile = cProfile.Profile()
    profile.enable()
    fn()
    profile.disable()
    return profile


def _drain_now() -> None:
    from otel_rl._internal.state import STATE  # internal: profiling only

    pipeline = STATE.pipeline
    if pipeline is not None:
        pipeline._drain()  # noqa: SLF001


def profile_report(ctx: Context) -> str:
    parts = []
    n = 6000  # stays below the queue's wake-up size (8192), so the export thread sleeps

    def scopes(k: int, args: bool) -> None:
        scope = otel_rl.trace_scope
        if args:
            for i in range(k):
                with scope("bench.scope", args={"step": i, "batch": 32, "lr": 1e-4, "actor": "a0", "ok": True}):
                    pass
        else:
            for _ in range(k):
                with scope("bench.scope"):
                    pass

    for label, args in (("enabled scope", False), ("scope + 5 attrs", True)):
        with ctx.otel(export_interval_ms=3_600_000):
            scopes(200, args)
            otel_rl.save(force=True)
            parts.append(_stats_text(_profile(lambda: scopes(n, args)), f"{label}: caller thread, {n} spans"))
            parts.append(_stats_text(_profile(_drain_now), f"{label}: export-thread work (drain), {n} spans"))

    tasks = 400  # 1,600 sessions, 5,200 spans
    with ctx.otel(export_interval_ms=3_600_000):
        otel_session_loop(10)
        otel_rl.save(force=True)
        parts.append(_stats_text(_profile(lambda: otel_session_loop(tasks)),
                                 f"session workload: caller thread, {tasks * 4} sessions"))
        parts.append(_stats_text(_profile(_drain_now),
                                 f"session workload: export-thread work (drain), {tasks * 4} sessions"))
    return "\n".join(parts)
