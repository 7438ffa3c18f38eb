"""RSS over a long run of the session workload, in a fresh child process.

``python -m bench.memory --kind otel_rl --sessions 1000000 --chunks 10``
runs the session workload (4 sessions per task) in ``chunks`` equal chunks,
flushing at the end of each chunk as a training step would
(``otel_rl.save(force=True)`` / the tracker's flush), and prints one JSON line
with the resident set size after every chunk. Flat numbers after the first
chunks mean memory does not grow with the number of sessions.

``--rate N`` paces the loop at ``N`` sessions a second (a rollout producing
sessions at that rate) instead of running it flat out; with otel_rl the line
also says how many spans were dropped (the exporter process falling behind
drops spans at its backlog bound, counted); with otel_rl each chunk also gives the
exporter process's CPU and resident memory.

The suite runs it with ``--memory-sessions`` (default 100,000); one million
sessions takes a few minutes and is the figure to quote for long runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from typing import Any

from .harness import max_rss_kib, rss_kib, scrub_environment
from .totals import descendants_cpu_s, descendants_rss_kib
from .workloads import SESSIONS_PER_TASK, jsonl_session_loop, otel_session_loop


def _paced(loop: Any, rate: float | None) -> Any:
    """``loop(tasks)`` run in slices of 25 tasks, each started no earlier than ``rate`` allows."""
    if not rate:
        return loop
    state = {"t0": None, "done": 0}

    def run(tasks: int) -> None:
        if state["t0"] is None:
            state["t0"] = time.perf_counter()
        while tasks > 0:
            step = min(25, tasks)
            due = state["t0"] + state["done"] * SESSIONS_PER_TASK / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            loop(step)
            state["done"] += step
            tasks -= step

    return run


def run_series(kind: str, sessions: int, chunks: int, fileroot: str, file_export: bool,
               rate: float | None = None) -> dict:
    tasks_total = max(chunks, sessions // SESSIONS_PER_TASK)
    per_chunk = max(1, tasks_total // chunks)
    if kind == "otel_rl":
        import otel_rl
        from opentelemetry.sdk.trace import TracerProvider

        otel_rl.configure(fileroot=fileroot, tracer_provider=TracerProvider(shutdown_on_exit=False),
                          file_export=file_export, shutdown_timeout_ms=120_000)
        loop = otel_session_loop

        def flush() -> None:
            otel_rl.save(force=True)
    elif kind == "jsonl":
        from .baselines import JsonlSessionTracker

        tracker = JsonlSessionTracker(os.path.join(fileroot, "sessions.jsonl"))

        def loop(tasks: int) -> None:
            jsonl_session_loop(tracker, tasks)

        def flush() -> None:
            tracker.flush()
    else:
        raise SystemExit(f"unknown kind {kind!r}")

    loop(10)
    flush()
    gc.collect()
    loop = _paced(loop, rate)
    exporter_cpu0 = descendants_cpu_s()
    start_rss = rss_kib()
    out_chunks = []
    t0 = time.perf_counter()
    chunk_cpu0 = exporter_cpu0
    for i in range(chunks):
        loop(per_chunk)
        flush()
        chunk = {"sessions": (i + 1) * per_chunk * SESSIONS_PER_TASK, "rss_kib": rss_kib(),
                 "elapsed_s": round(time.perf_counter() - t0, 3)}
        if kind == "otel_rl":
            # The exporter's CPU over this chunk alone: a cost that grows with the run shows here.
            chunk_cpu = descendants_cpu_s()
            chunk["exporter_cpu_us_per_session"] = round(
                (chunk_cpu - chunk_cpu0) / (per_chunk * SESSIONS_PER_TASK) * 1e6, 1)
            chunk["exporter_rss_kib"] = descendants_rss_kib()  # its memory must stay flat too
            chunk_cpu0 = chunk_cpu
        out_chunks.append(chunk)
    result = {
        "kind": kind, "sessions": per_chunk * chunks * SESSIONS_PER_TASK, "chunks": out_chunks,
        "start_rss_kib": start_rss, "max_rss_kib": max_rss_kib(),
    }
    rss = [c["rss_kib"] for c in out_chunks if c["rss_kib"] is not None]
    if rss and start_rss is not None:
        result["total_growth_kib"] = rss[-1] - start_rss
        result["first_chunk_growth_kib"] = rss[0] - start_rss
        result["late_growth_kib"] = rss[-1] - rss[len(rss) // 2 - 1] if len(rss) >= 2 else 0
        late_sessions = out_chunks[-1]["sessions"] - out_chunks[len(rss) // 2 - 1]["sessions"] \
            if len(rss) >= 2 else 0
        result["late_bytes_per_session"] = (result["late_growth_kib"] * 1024 / late_sessions
                                            if late_sessions else None)
    if rate:
        result["rate_sessions_per_s"] = rate
        result["achieved_sessions_per_s"] = round(result["sessions"] / out_chunks[-1]["elapsed_s"], 1)
    if kind == "otel_rl":
        import otel_rl

        result["diagnostics"] = otel_rl.diagnostics()
        result["spans_dropped"] = sum(v for k, v in result["diagnostics"].items() if k.startswith("spans_dropped"))
        result["exporter_cpu_us_per_session"] = round(
            (descendants_cpu_s() - exporter_cpu0) / result["sessions"] * 1e6, 1)
        otel_rl.reset()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=("otel_rl", "jsonl"), default="otel_rl")
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--fileroot", required=True)
    parser.add_argument("--file-export", choices=("0", "1"), default="1")
    parser.add_argument("--rate", type=float, default=None, help="sessions a second (default: flat out)")
    args = parser.parse_args(argv)
    scrub_environment()
    import logging

    logging.getLogger("opentelemetry").setLevel(logging.ERROR)
    logging.getLogger("otel_rl").setLevel(logging.ERROR)
    result = run_series(args.kind, args.sessions, max(2, args.chunks), args.fileroot, args.file_export == "1",
                        args.rate)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
