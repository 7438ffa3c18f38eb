#!/usr/bin/env python3
"""Times ``otel-rl report`` over many session records and reports its peak memory.

    python -m bench.report_speed --sessions 1000000 [--ranks 8] [--steps 100]
        [--format json|table|html] [--load-only] [--dir DIR]

Writes synthetic session records in otel_rl's format (``sessions-rollout-r{rank}.jsonl``:
1-3 generate turns with tool calls between them, a reward, statuses, output token
counters and a ``step`` field, as AReaL-style records may carry) unless ``--dir``
already holds them, then runs the report in a child process and prints its wall time,
the CPU time of it and its worker processes, and its peak resident memory
(``ru_maxrss``). ``--load-only`` times ``otel_rl.report.load`` alone (reading, no views);
``--parse-only`` times, in this process, what one parsing worker does for the report
(``parse_block`` over blocks of the first file, as the CLI has them gathered as columns)
and prints its CPU time per record.
Targets: 1,000,000 records in 10 s and under 500 MB (both printed with the figures).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

import orjson


def generate(directory: str, sessions: int, ranks: int, steps: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    per_rank = sessions // ranks
    t0 = 1.8e9
    for rank in range(ranks):
        path = os.path.join(directory, f"sessions-rollout-r{rank}.jsonl")
        with open(path, "wb") as f:
            lines = []
            for i in range(per_rank):
                step = i * steps // per_rank
                submit = t0 + step * 60.0 + rng.random() * 20.0
                t = submit
                phases: dict[str, list[dict[str, float]]] = {"generate": [], "toolcall": [], "reward": []}
                turns = rng.choice((1, 1, 2, 3))
                for turn in range(turns):
                    d = rng.lognormvariate(-1.0, 0.8) * (8 if rng.random() < 0.01 else 1)
                    phases["generate"].append({"start_ts": t, "end_ts": t + d})
                    t += d
                    if turn < turns - 1:
                        d = rng.expovariate(20.0)
                        phases["toolcall"].append({"start_ts": t, "end_ts": t + d})
                        t += d
                d = rng.expovariate(200.0)
                phases["reward"].append({"start_ts": t, "end_ts": t + d})
                t += d
                finalized = t + rng.expovariate(50.0)
                total = finalized - submit
                record = {
                    "task_id": i // 4 + rank * per_rank, "session_id": i + rank * per_rank, "rank": rank,
                    "role": "rollout", "status": "accepted" if rng.random() < 0.7 else "rejected",
                    "reason": None, "submit_ts": submit, "finalized_ts": finalized, "total_s": total,
                    "generate_s": sum(p["end_ts"] - p["start_ts"] for p in phases["generate"]),
                    "reward_s": sum(p["end_ts"] - p["start_ts"] for p in phases["reward"]),
                    "toolcall_s": sum(p["end_ts"] - p["start_ts"] for p in phases["toolcall"]),
                    "phase_counts": {k: len(v) for k, v in phases.items()},
                    "phases": {k: v for k, v in phases.items() if v},
                    "counters": {"output_tokens": rng.randint(10, 1000)},
                    "step": step, "trace_id": f"{rng.getrandbits(128):032x}", "span_id": f"{rng.getrandbits(64):016x}",
                }
                lines.append(orjson.dumps(record))
                if len(lines) >= 10000:
                    f.write(b"\n".join(lines) + b"\n")
                    lines = []
            if lines:
                f.write(b"\n".join(lines) + b"\n")


def parse_only(directory: str, blocks: int = 12, rounds: int = 3) -> int:
    """CPU time per record of ``parse_block`` gathering columns (the best of ``rounds`` per block)."""
    import gc

    from otel_rl._internal.read.sessions import parse_block
    from otel_rl._internal.read.source import CHUNK

    gc.disable()  # as in the workers
    path = os.path.join(directory, sorted(n for n in os.listdir(directory) if n.startswith("sessions-"))[0])
    data = []
    with open(path, "rb") as f:
        rest = b""
        for _ in range(blocks):
            chunk = rest + f.read(CHUNK)
            cut = chunk.rfind(b"\n") + 1
            if not cut:
                break
            data.append(chunk[:cut])
            rest = chunk[cut:]
    records = sum(block.count(b"\n") for block in data)
    for cold in ("candidates", "all"):
        cpu = 0.0
        for block in data:
            best = float("inf")
            for _ in range(rounds):
                started = time.process_time()
                parse_block(block, 0, True, False, cold)
                best = min(best, time.process_time() - started)
            cpu += best
        print(f"parse_block (columns, cold={cold}): {records:,} records, {cpu / records * 1e6:.1f} us CPU per record")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=1_000_000)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--format", choices=("json", "table", "html"), default="json")
    p.add_argument("--load-only", action="store_true", help="time reading the records alone, no views")
    p.add_argument("--parse-only", action="store_true", help="CPU per record of a parsing worker, in this process")
    p.add_argument("--dir", help="where the records are (generated when it has none)")
    args = p.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="otel-rl-bench-report-")
    os.makedirs(directory, exist_ok=True)
    if not any(n.startswith("sessions-") for n in os.listdir(directory)):
        started = time.perf_counter()
        generate(directory, args.sessions, args.ranks, args.steps)
        print(f"generated {args.sessions:,} session records in {directory} "
              f"({sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory)) / 1e6:,.0f} MB, "
              f"{time.perf_counter() - started:.1f} s)")
    if args.parse_only:
        return parse_only(directory)
    if args.load_only:
        what = "otel_rl.report.load"
        out = "-"
        command = [sys.executable, "-c", "import sys, otel_rl.report as r; "
                   "print(f'{len(r.load(sys.argv[1], progress=False).sessions):,} sessions loaded')", directory]
    else:
        what = f"otel-rl report --format {args.format}"
        out = os.path.join(directory, f"report.{'txt' if args.format == 'table' else args.format}")
        command = [sys.executable, "-m", "otel_rl.report", directory, "--format", args.format, "--out", out,
                   "--quiet", "--no-progress"]
    started = time.perf_counter()
    code = subprocess.call(command)
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_mb = usage.ru_maxrss / 1024
    print(f"{what}: exit {code}, {wall:.1f} s wall, {usage.ru_utime + usage.ru_stime:.1f} s CPU, "
          f"peak RSS {peak_mb:,.0f} MB -> {out}")
    scale = 1_000_000 / max(1, args.sessions)
    print(f"targets for 1,000,000 sessions: 10 s wall ({'met' if wall * scale <= 10 else 'not met'}"
          f"{'' if args.sessions == 1_000_000 else ', scaled'}), under 500 MB peak RSS "
          f"({'met' if peak_mb < 500 else 'not met'})")
    return code


if __name__ == "__main__":
    sys.exit(main())
