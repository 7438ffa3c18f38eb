"""``python -m bench``: run the workloads, print one table, write JSON."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from importlib import metadata
from typing import Any

from . import WORKLOAD_NAMES


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="otel_rl beside the stock OpenTelemetry SDK and a plain JSONL tracer.",
        epilog="Workloads: " + ", ".join(WORKLOAD_NAMES) + ". For the long-run memory figure use "
               "--only memory --memory-sessions 1000000.",
    )
    parser.add_argument("--repeats", type=int, default=5, help="repeats per contender (default 5)")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--out", default=os.path.join("bench", "results", "latest.json"),
                        help="JSON results path (default bench/results/latest.json)")
    parser.add_argument("--memory-sessions", type=int, default=None,
                        help="sessions for the RSS series (default 100000; quick 2000; 1000000 for long runs)")
    parser.add_argument("--profile", action="store_true",
                        help="also write cProfile output for otel_rl next to the JSON (profile.txt)")
    parser.add_argument("--areal", default=None, metavar="PATH",
                        help="AReaL's perf_tracer.py module file, measured beside otel_rl in the total_cpu "
                             "and bytes workloads (optional)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(WORKLOAD_NAMES)
    unknown = [n for n in names if n not in WORKLOAD_NAMES]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOAD_NAMES)}")
    args.names = [n for n in WORKLOAD_NAMES if n in names]
    return args


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("otel_rl", "opentelemetry-sdk", "opentelemetry-api", "opentelemetry-exporter-otlp-proto-grpc",
                 "grpcio", "protobuf", "orjson", "rich"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    from .harness import Context, Sizes, file_exporter_available, scrub_environment

    scrubbed = scrub_environment()
    # The SDK logs a warning for every span dropped from a full queue; otel_rl
    # counts its problems in diagnostics(), which the JSON keeps.
    logging.getLogger("opentelemetry").setLevel(logging.ERROR)
    logging.getLogger("otel_rl").setLevel(logging.ERROR)

    from .receiver import ReceiverProcess
    from .report import print_table
    from .totals import WORKLOADS as TOTAL_WORKLOADS
    from .workloads import WORKLOADS

    workloads = {**WORKLOADS, **TOTAL_WORKLOADS}

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    sizes = Sizes.quick() if args.quick else Sizes.full()
    file_export = file_exporter_available()
    if not file_export:
        log("note: otel_rl/_internal/file_exporter.py is missing; otel_rl runs with file_export=False")
    scratch = tempfile.mkdtemp(prefix="otel_rl-bench-")
    ctx = Context(sizes, scratch, file_export, log, ReceiverProcess)
    ctx.areal_path = args.areal
    results: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        for name in args.names:
            log(f"== {name}")
            t0 = time.perf_counter()
            kwargs = {"memory_sessions": args.memory_sessions} if name == "memory" else {}
            try:
                result = workloads[name](ctx, args.repeats, **kwargs)
            except Exception as exc:  # noqa: BLE001 - report it and go on with the rest
                import traceback

                log(traceback.format_exc())
                result = {"title": name, "error": repr(exc), "samples": {}, "rows": []}
            result["seconds"] = round(time.perf_counter() - t0, 3)
            results[name] = result
        profile_path = None
        if args.profile:
            from .profiling import profile_report

            profile_path = os.path.join(os.path.dirname(os.path.abspath(args.out)), "profile.txt")
            os.makedirs(os.path.dirname(profile_path), exist_ok=True)
            with open(profile_path, "w", encoding="utf-8") as fh:
                fh.write(profile_report(ctx))
    finally:
        ctx.close()
        import otel_rl

        otel_rl.reset()
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.perf_counter() - started

    failed = [row["label"] for r in results.values() for row in r.get("rows", []) if row.get("passed") is False]
    errors = {name: r["error"] for name, r in results.items() if "error" in r}
    meta = {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), "-m", "bench", *(argv or sys.argv[1:])]),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "versions": _versions(),
        "quick": args.quick,
        "repeats": args.repeats,
        "sizes": sizes.__dict__ | ({"memory_sessions": args.memory_sessions} if args.memory_sessions else {}),
        "otel_rl_file_export": file_export,
        "scrubbed_environment": sorted(scrubbed),
        "elapsed_s": round(elapsed, 3),
        "units": {
            "caller_s": "wall seconds of the measured loop on the calling thread",
            "caller_cpu_s": "time.thread_time() of the calling thread over the loop (no GIL waits)",
            "cpu_s": "time.process_time() delta (all threads) around the loop plus the final flush",
            "all_cpu_s": "CPU of every process: this one, otel_rl's exporter process (/proc while it runs, "
                         "RUSAGE_CHILDREN once reaped); the OTLP receiver excluded",
        },
    }
    payload = {"meta": meta, "workloads": results, "failed_targets": failed, "errors": errors}
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=1, default=_json_default)
        fh.write("\n")

    title = (f"otel_rl vs OpenTelemetry SDK vs JSONL tracer — median [min–max] of {args.repeats} "
             f"repeat(s){' (quick)' if args.quick else ''}")
    caption = (f"ratios = otel_rl median / baseline median; file export "
               f"{'on' if file_export else 'OFF (exporter module missing)'}; "
               f"{os.cpu_count()} CPUs, Python {platform.python_version()}; {elapsed:.0f}s; JSON: {args.out}")
    print_table(results, title, caption)
    if errors:
        log(f"workloads with errors: {', '.join(errors)}")
    if profile_path:
        log(f"profile: {profile_path}")
    if errors:
        return 2
    return 1 if (args.strict and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
