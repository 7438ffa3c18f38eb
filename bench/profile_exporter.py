"""Where the exporter child's CPU goes: capture a real run's batches, replay them in-process.

``python -m bench.profile_exporter --spans 20000 --workload scope|plain|sessions|marked [--profile]``

``scope``: scopes with 5 args; ``plain``: bare scopes (the total-CPU benchmark's);
``sessions``: phases as spans; ``marked``: the session benchmark's marked phases.

For instruction counts that repeat (timings on a shared host move by a third from run to
run), keep one capture and count the replay of it, and of nothing, under callgrind with a
fixed hash seed (dict layouts, and with them the counts, follow the seed)::

    python -m bench.profile_exporter --workload marked --spans 40000 --save cap.pickle
    PYTHONHASHSEED=0 valgrind --tool=callgrind python -m bench.profile_exporter --load cap.pickle --repeats 1
    PYTHONHASHSEED=0 valgrind --tool=callgrind python -m bench.profile_exporter --load cap.pickle --repeats 1 --empty

The difference is the exporter's work on the batches; ``callgrind_annotate --inclusive=yes``
gives the part spent in ``Py_FinalizeEx`` (freeing what the run left at exit), which the
benchmark's figures do not count.

The training process ships batches of span records to the exporter child
through :meth:`ExporterProcess.send`. This harness records a workload with that
method patched to keep a copy of every batch (the child still gets them), then
replays the copies through the child's own loop (``export_batch``: decode -> ``expand`` ->
``RecordSink.on_records`` -> ``after_batch``; then ``shutdown``) on this thread, in a fresh
output directory, and prints the CPU time per span. ``--profile`` repeats the
replay under cProfile and prints the top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pickle
import pstats
import tempfile
import time
from typing import Any

import otel_rl
from otel_rl._internal.export import wire


def capture(workload: str, spans: int, root: str) -> tuple[Any, dict[str, Any], list[bytes]]:
    """Runs ``workload`` and returns (settings, resource attributes, batches as the pipe carries them)."""
    from otel_rl._internal.export.process import ExporterProcess

    batches: list[bytes] = []
    seen: dict[str, Any] = {}
    original_send = ExporterProcess.send
    original_init = ExporterProcess.__init__

    def init(self: Any, settings: Any, resource_attributes: dict[str, Any], *args: Any, **kw: Any) -> None:
        seen["settings"] = settings
        seen["resource"] = dict(resource_attributes)
        original_init(self, settings, resource_attributes, *args, **kw)

    def send(self: Any, records: list[tuple], thread_names: dict[int, str], n: int) -> bool:
        batches.append(wire.dumps(thread_names, records))
        return original_send(self, records, thread_names, n)

    ExporterProcess.__init__ = init  # type: ignore[method-assign]
    ExporterProcess.send = send  # type: ignore[method-assign]
    try:
        otel_rl.reset()
        otel_rl.configure(fileroot=root, experiment_name="bench", trial_name="t", rank=0)
        if workload == "scope":
            scope = otel_rl.trace_scope
            for i in range(spans):
                with scope("step", args={"step": i, "batch": 32, "lr": 1e-4, "actor": "a0", "ok": True}):
                    pass
        elif workload == "plain":
            scope = otel_rl.trace_scope
            for _ in range(spans):
                with scope("bench.scope"):
                    pass
        elif workload == "marked":
            # The benchmark's session workload: 4 sessions per task, phases marked
            # (bundled into the session's record), about 3.25 spans a session.
            event = otel_rl.trace_session_event
            for _ in range(max(1, spans * 4 // 13 // 4)):
                tid = otel_rl.register_task()
                for _ in range(4):
                    sid = otel_rl.register_session(tid)
                    event("mark_generate_start", session_id=sid)
                    event("mark_generate_end", session_id=sid)
                    event("mark_reward_start", session_id=sid)
                    event("mark_reward_end", session_id=sid)
                event("mark_finalized", task_id=tid, status="accepted")
        else:
            # 4 sessions per task, each a session span with two phases: ~3 spans a session.
            register_task = otel_rl.register_task
            register_session = otel_rl.register_session
            set_session_id = otel_rl.set_session_id
            phase = otel_rl.trace_session_phase
            event = otel_rl.trace_session_event
            for _ in range(max(1, spans // 12)):
                tid = register_task()
                for _ in range(4):
                    set_session_id(register_session(tid))
                    with phase("generate"):
                        pass
                    with phase("reward"):
                        pass
                event("mark_finalized", task_id=tid, status="accepted")
        otel_rl.shutdown()
    finally:
        ExporterProcess.__init__ = original_init  # type: ignore[method-assign]
        ExporterProcess.send = original_send  # type: ignore[method-assign]
        otel_rl.reset()
    return seen["settings"], seen["resource"], batches


def replay(settings: Any, resource_attrs: dict[str, Any], batches: list[bytes], root: str) -> tuple[int, float]:
    """Runs the exporter child's loop over ``batches``; returns (spans, CPU seconds)."""
    import dataclasses

    from opentelemetry.sdk.resources import Resource

    from otel_rl._internal import files
    from otel_rl._internal.encode.readable import ReadableBuilder
    from otel_rl._internal.export.chain import ExportChain
    from otel_rl._internal.export.process import EXPORTER_GC_THRESHOLDS, export_batch
    from otel_rl._internal.export.record_sink import RecordSink
    from otel_rl._internal.recording import privacy

    thresholds = gc.get_threshold()
    settings = dataclasses.replace(settings, fileroot=root)
    files.set_mode(settings.file_mode)
    privacy.configure(settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    resource = Resource(resource_attrs)
    # The child's collector settings (process.main): without them young
    # collections rescan the batch and dominate the figures.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*EXPORTER_GC_THRESHOLDS)
    t0 = time.process_time()
    chain = ExportChain(settings, resource, env)
    builder = ReadableBuilder(resource)
    on_records = RecordSink(chain, builder).on_records
    n = 0
    for payload in batches:
        n += export_batch(on_records, chain, builder.thread_names, payload)
    chain.shutdown(5.0)
    cpu = time.process_time() - t0
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    return n, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20000)
    parser.add_argument("--workload", choices=("scope", "plain", "sessions", "marked"), default="scope")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--save", metavar="PATH", help="keep the capture in PATH and replay nothing")
    parser.add_argument("--load", metavar="PATH", help="replay the capture --save kept instead of capturing")
    parser.add_argument("--empty", action="store_true", help="replay no batch: the replay's fixed cost")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.load:
            with open(args.load, "rb") as fh:
                settings, resource, batches = pickle.load(fh)
        else:
            settings, resource, batches = capture(args.workload, args.spans, os.path.join(tmp, "capture"))
        if args.save:
            with open(args.save, "wb") as fh:
                pickle.dump((settings, resource, batches), fh)
            print(f"workload={args.workload} batches={len(batches)} kept in {args.save}")
            return
        if args.empty:
            batches = []
        best = None
        n = 0
        for k in range(args.repeats):
            n, cpu = replay(settings, resource, batches, os.path.join(tmp, f"replay{k}"))
            best = cpu if best is None else min(best, cpu)
        label = f"capture={args.load}" if args.load else f"workload={args.workload}"
        if args.empty:
            print(f"{label} no batch: the replay's fixed cost {best * 1e3:.1f} ms CPU (best of {args.repeats})")
        else:
            print(f"{label} batches={len(batches)} spans={n} "
                  f"exporter CPU {best * 1e6 / max(1, n):.2f} us/span (best of {args.repeats})")
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            replay(settings, resource, batches, os.path.join(tmp, "profiled"))
            profile.disable()
            buf = io.StringIO()
            pstats.Stats(profile, stream=buf).sort_stats("tottime").print_stats(args.top)
            print(buf.getvalue())


if __name__ == "__main__":
    main()
