#!/usr/bin/env python3
"""Times ``otel-rl convert`` to Perfetto's native format beside the Chrome JSON of the same run.

    python -m bench.perfetto [--sessions 20000] [--ranks 4] [--dir RUN] [--repeats 3] [--native]

Without ``--dir`` it writes a synthetic RL run with otel_rl's own file exporter:
``--ranks`` rollout workers, each running tasks of 8 concurrent sessions
(generate with queue / prefill / decode server timings, a tool call, a reward,
the attributes the demo's sessions carry, span events), under a trainer whose
steps submit the work from another process (remote parents) and sample a gauge.
``--dir`` converts an existing run directory instead (a demo run, say).
``--native`` also writes the run as per-rank native files (what
``OTEL_RL_FILE_FORMAT=perfetto`` leaves), times the file exporter writing
both formats (spans/s), and times merging the native files (concatenation).

Each conversion runs in a child process; printed per format: events read per
second (the converter's own count and clock), the CPU seconds of the
conversion's processes (workers included), the file size, its ratio to the
JSON, and the child's peak resident memory (the parent's, with workers). Without
``--jobs`` the native conversion is also timed with a worker per core
(``perfetto -j N``). Targets: at least 500,000 events/s, a native file at least
3x smaller than the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

_T0_NS = 1_800_000_000_000_000_000

_CONVERT = """
import json, resource, sys
from otel_rl.convert import convert
def cpu():
    return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
def peak_mb():
    # VmHWM is this program's own peak; ru_maxrss also keeps the forking parent's from before exec.
    try:
        with open("/proc/self/status") as status:
            return next(int(l.split()[1]) for l in status if l.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
before = cpu()
stats = convert([sys.argv[1]], sys.argv[2], fmt=sys.argv[3], workers=int(sys.argv[4]))
print(json.dumps({"events": stats.events, "seconds": stats.seconds, "cpu_s": cpu() - before,
                  "rss_mb": peak_mb()}))
"""


class _Spans:
    """Finished SDK spans with chosen times and ids (as a span processor receives them)."""

    def __init__(self, resource_attrs: dict, first_id: int, seed: int) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.resource = Resource(resource_attrs)
        self.scope = InstrumentationScope("otel_rl")
        self.next_id = first_id
        self.rng = random.Random(seed)

    def span(self, name: str, start_us: float, end_us: float, parent=None, attrs=None, kind=None,
             remote_parent=None, events=()):
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

        self.next_id += 1
        parent_ctx = remote_parent if remote_parent is not None else (parent.context if parent else None)
        trace_id = parent_ctx.trace_id if parent_ctx else self.rng.getrandbits(128) or 1
        context = SpanContext(trace_id, self.next_id, False, TraceFlags(TraceFlags.SAMPLED))
        return ReadableSpan(name=name, context=context, parent=parent_ctx, resource=self.resource,
                            attributes={"thread.id": 1, "thread.name": "MainThread", **(attrs or {})},
                            events=events, kind=kind or SpanKind.INTERNAL, instrumentation_scope=self.scope,
                            start_time=_T0_NS + round(start_us * 1000), end_time=_T0_NS + round(end_us * 1000))


#: seconds and spans each file exporter took to write the run: {"jsonl": [s, n], "perfetto": [s, n]}
WRITE_TIMES: dict[str, list[float]] = {"jsonl": [0.0, 0], "perfetto": [0.0, 0]}


def _write(path: str, spans: list, native_dir: str | None = None) -> None:
    from otel_rl._internal.export.file_exporter import ChromeTraceFileExporter
    from otel_rl._internal.export.perfetto_file import PerfettoTraceFileExporter

    spans.sort(key=lambda s: s.end_time)
    targets = [("jsonl", ChromeTraceFileExporter, path)]
    if native_dir is not None:
        native = os.path.join(native_dir, os.path.basename(path)[:-len(".jsonl")] + ".pftrace")
        targets.append(("perfetto", PerfettoTraceFileExporter, native))
    for fmt, kind, target in targets:
        started = time.process_time()
        exporter = kind(target)
        for i in range(0, len(spans), 4096):
            exporter.export(spans[i:i + 4096])
        exporter.shutdown()
        WRITE_TIMES[fmt][0] += time.process_time() - started
        WRITE_TIMES[fmt][1] += len(spans)


def _rollout(rank: int, sessions: int, submits: list) -> list:
    from opentelemetry.sdk.trace import Event

    from otel_rl._internal import keys

    f = _Spans({"process.pid": 1000 + rank, keys.RANK: rank, keys.ROLE: "rollout",
                keys.SERVICE_NAME: "rollout"}, (rank + 2) << 40, rank)
    rng = f.rng
    spans: list = []
    per_task = 8
    for task_id in range(sessions // per_task):
        step = task_id * per_task * len(submits) // max(1, sessions)
        base = task_id * 40_000.0
        task = f.span("task", base, base + 30_000, attrs={keys.SPAN_KIND: keys.KIND_TASK, keys.TASK_ID: task_id,
                                                           keys.STEP: step, "rl.task.sessions": per_task},
                      remote_parent=submits[min(step, len(submits) - 1)])
        spans.append(task)
        for s in range(per_task):
            sid = task_id * per_task + s
            ids = {keys.TASK_ID: task_id, keys.SESSION_ID: sid, keys.STEP: step}
            t = base + 100 + s * 50 + rng.random() * 10
            gen_end = t + rng.uniform(2_000, 15_000)
            tool_end = gen_end + rng.uniform(100, 5_000)
            end = tool_end + 20
            session = f.span("session", t, end + 5, task, {
                **ids, keys.SPAN_KIND: keys.KIND_SESSION, "rl.policy.version": step,
                "rl.session.status": rng.choice(("accepted", "rejected")), "rl.session.reward": rng.random(),
                "rl.session.total_s": (end - t) / 1e6, "rl.session.generate_s": (gen_end - t) / 1e6,
                "rl.session.generate_count": 1, "rl.session.counter.output_tokens": rng.randint(10, 900)})
            generate = f.span("generate", t + 1, gen_end, session, {
                **ids, keys.SPAN_KIND: keys.KIND_PHASE, "rl.phase": "generate", "gen_ai.request.model": "policy",
                "gen_ai.usage.input_tokens": rng.randint(10, 500), "gen_ai.usage.output_tokens": rng.randint(10, 900),
                "turn": 0}, events=(Event("stage_input_received", {"prompt_tokens": 7}, _T0_NS + round(t * 1000) + 5000),))
            queue_end = t + 1 + (gen_end - t) * 0.3
            prefill_end = queue_end + (gen_end - queue_end) * 0.1
            timing = {**ids, keys.SPAN_KIND: "server_timing", "rl.server.engine": "sglang"}
            spans += [session, generate,
                      f.span("queue", t + 1, queue_end, generate, timing),
                      f.span("prefill", queue_end, prefill_end, generate, timing),
                      f.span("decode", prefill_end, gen_end, generate, timing),
                      f.span("toolcall", gen_end, tool_end, session,
                             {**ids, keys.SPAN_KIND: keys.KIND_PHASE, "rl.phase": "toolcall"}),
                      f.span("reward", tool_end, end, session,
                             {**ids, keys.SPAN_KIND: keys.KIND_PHASE, "rl.phase": "reward"})]
    return spans


def generate(directory: str, sessions: int, ranks: int, native_dir: str | None = None) -> None:
    """A synthetic run: a trainer and ``ranks`` rollout workers, about ten events per session
    (also as native per-rank files in ``native_dir``)."""
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    from otel_rl._internal import keys

    trainer = _Spans({"process.pid": 999, keys.RANK: 0, keys.ROLE: "trainer", keys.SERVICE_NAME: "trainer"}, 1 << 40, 99)
    steps = max(1, sessions // 2000)
    duration = sessions // 8 * 40_000.0
    spans, submits = [], []
    for step in range(steps):
        start = step * duration / steps
        span = trainer.span("step", start, start + duration / steps - 10,
                            attrs={keys.SPAN_KIND: keys.KIND_STEP, keys.STEP: step})
        submit = trainer.span("rollout.submit", start + 1, start + 100, span, kind=SpanKind.CLIENT)
        ctx = submit.context
        submits.append(SpanContext(ctx.trace_id, ctx.span_id, True, TraceFlags(TraceFlags.SAMPLED)))
        spans += [span, submit, trainer.span("train_step", start + 200, start + duration / steps - 20, span,
                                             {keys.STEP: step}),
                  trainer.span("buffered_groups", start + 150, start + 150,
                               attrs={keys.SPAN_KIND: keys.KIND_COUNTER, keys.GAUGE_VALUE: step % 7})]
    _write(os.path.join(directory, "traces-trainer-r0.jsonl"), spans, native_dir)
    for rank in range(ranks):
        _write(os.path.join(directory, f"traces-rollout-r{rank}.jsonl"), _rollout(rank, sessions // ranks, submits),
               native_dir)


def _convert(directory: str, output: str, fmt: str, jobs: int) -> dict:
    result = subprocess.run([sys.executable, "-c", _CONVERT, directory, output, fmt, str(jobs)],
                            capture_output=True, text=True, check=True)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    figures["bytes"] = os.path.getsize(output)
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=20_000, help="sessions of the synthetic run (default 20000)")
    p.add_argument("--ranks", type=int, default=4, help="rollout workers of the synthetic run (default 4)")
    p.add_argument("--dir", help="an existing run directory to convert instead")
    p.add_argument("--jobs", type=int, default=0, help="converter worker processes (-j)")
    p.add_argument("--repeats", type=int, default=3, help="conversions per format; the fastest counts")
    p.add_argument("--native", action="store_true",
                   help="also write native per-rank files and time the exporter and their merge")
    p.add_argument("--out", help="also write the figures as JSON here")
    args = p.parse_args(argv)
    directory = args.dir
    scratch = tempfile.mkdtemp(prefix="otel-rl-bench-perfetto-")
    native_dir = os.path.join(scratch, "native") if args.native else None
    if directory is None:
        directory = os.path.join(scratch, "run")
        os.makedirs(directory)
        if native_dir:
            os.makedirs(native_dir)
        started = time.perf_counter()
        generate(directory, args.sessions, args.ranks, native_dir)
        size = sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))
        print(f"generated {args.sessions:,} sessions on {args.ranks} rollout ranks in {directory} "
              f"({size / 1e6:,.1f} MB of JSON lines, {time.perf_counter() - started:.1f} s)")
    figures = {}
    cores = os.cpu_count() or 1
    conversions = [("chrome", directory, "trace.json", args.jobs), ("perfetto", directory, "trace.pftrace", args.jobs)]
    if args.jobs == 0 and cores > 1:
        # The same conversion with a worker per core: each encodes whole rank files.
        conversions.append((f"perfetto -j {cores}", directory, "trace.pftrace", cores))
    if native_dir:
        conversions.append(("native files", native_dir, "merged.pftrace", args.jobs))
    for fmt, source, name, jobs in conversions:
        target = "chrome" if fmt == "chrome" else "perfetto"
        runs = [_convert(source, os.path.join(scratch, name), target, jobs) for _ in range(max(1, args.repeats))]
        figures[fmt] = min(runs, key=lambda r: r["seconds"])
    json_bytes = figures["chrome"]["bytes"]
    print(f"{'convert to':<14} {'events':>10} {'seconds':>8} {'CPU s':>6} {'events/s':>10} {'MB':>8} "
          f"{'JSON/this':>9} {'peak MB':>8}")
    for fmt, r in figures.items():
        rate = r["events"] / r["seconds"] if r["seconds"] else 0.0
        r["events_per_s"] = rate
        r["ratio"] = json_bytes / r["bytes"]
        print(f"{fmt:<14} {r['events']:>10,} {r['seconds']:>8.2f} {r['cpu_s']:>6.2f} {rate:>10,.0f} "
              f"{r['bytes'] / 1e6:>8.2f} {r['ratio']:>9.2f} {r['rss_mb']:>8.0f}")
    if native_dir:
        print("(native files: events are packets, two per slice)")
        for fmt, (seconds, spans) in WRITE_TIMES.items():
            print(f"file exporter, {fmt}: {spans / seconds:,.0f} spans/s of CPU ({seconds / spans * 1e6:.1f} us/span)")
    native = figures["perfetto"]
    best = max((r for fmt, r in figures.items() if fmt.startswith("perfetto")), key=lambda r: r["events_per_s"])
    print(f"targets: >= 500,000 events/s: one process {'met' if native['events_per_s'] >= 500_000 else 'NOT met'}, "
          f"this machine {'met' if best['events_per_s'] >= 500_000 else 'NOT met'}; "
          f"native >= 3x smaller: {'met' if native['ratio'] >= 3 else 'NOT met'}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"input": "--dir" if args.dir else f"synthetic, {args.sessions} sessions, {args.ranks} ranks",
                       "jobs": args.jobs, "figures": figures,
                       "cpu": os.cpu_count(), "ru_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime},
                      fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
