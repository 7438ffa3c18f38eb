"""``otel-rl convert`` (also ``python -m otel_rl.convert``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .._internal.read.discovery import discover_inputs
from .._internal.read.limits import add_limit_options, limits_from_args
from .merge import FORMATS, convert, output_format
from .native_inputs import find_native
from .stats import MAX_REPORTED, ConvertStats

__all__ = ["main", "summary"]


def summary(stats: ConvertStats) -> str:
    """The one line ``otel-rl convert`` ends with: what was written, how fast, what was skipped."""
    rate = stats.events / stats.seconds if stats.seconds > 0 else 0.0
    text = (f"otel_rl.convert: {stats.files} files, {stats.events:,} events -> {stats.output} "
            f"in {stats.seconds:.2f} s ({rate:,.0f} events/s)")
    extras = []
    if stats.spans:
        extras.append(f"{stats.spans:,} OTLP spans")
    if stats.remapped_pids:
        extras.append(f"{stats.remapped_pids} pids remapped")
    if stats.annotated:
        extras.append(f"{stats.annotated:,} session spans annotated")
    if stats.skipped_truncated:
        extras.append(f"{stats.skipped_truncated} incomplete last lines skipped")
    if stats.malformed_count:
        extras.append(f"{stats.malformed_count} malformed lines skipped")
    if stats.skipped_files:
        extras.append(f"{len(stats.skipped_files)} inputs skipped")
    if stats.cut_short:
        extras.append(f"{len(stats.cut_short)} inputs read only in part")
    return text + ("; " + ", ".join(extras) if extras else "")


def _jobs(text: str) -> int:
    """``-j``: a count of worker processes, 0 or more."""
    try:
        jobs = int(text)
    except ValueError:
        jobs = -1
    if jobs < 0:
        raise argparse.ArgumentTypeError(f"expected a number of worker processes (0 or more), got {text!r}")
    return jobs


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m otel_rl.convert INPUT... -o OUTPUT [--strict]``.

    Args:
        argv: Arguments (``sys.argv[1:]`` when ``None``).

    Returns:
        0 on success; 1 when nothing could be converted, or, with ``--strict``,
        when any line or input was skipped or read only in part.
    """
    parser = argparse.ArgumentParser(
        prog="otel-rl convert",
        description="Merge otel_rl trace files (per-rank Chrome JSONL, OTLP/JSON from a "
                    "Collector, Chrome JSON such as torch profiler traces) into one trace for "
                    "Perfetto (ui.perfetto.dev): Chrome JSON (.json, also for chrome://tracing) "
                    "or Perfetto's native format (.pftrace).")
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="files, directories (searched recursively) or glob patterns")
    parser.add_argument("-o", "--output", required=True,
                        help="the file to write: .json / .json.gz (Chrome JSON) or .pftrace / "
                             ".pftrace.gz (Perfetto's native format); '-' for standard output")
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="chrome (JSON) or perfetto (native TracePacket protobuf: a track per "
                             "session, counter tracks, flows, interned strings, several times "
                             "smaller); default: perfetto for a .pftrace output, else chrome")
    parser.add_argument("--strict", action="store_true",
                        help="exit non-zero if any line or input had to be skipped")
    parser.add_argument("-j", "--jobs", type=_jobs, default=None,
                        help="worker processes: for JSON output they parse lines that carry no "
                             "otel_rl batch checksum (large foreign JSONL inputs); for a native "
                             ".pftrace output each encodes whole input files, one per rank "
                             "(default: for a .pftrace output of several files holding 32 MiB or "
                             "more, one per core; else 0, all in this process)")
    add_limit_options(parser)
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args(argv)
    err = sys.stderr
    found, missing = discover_inputs(args.inputs, exclude=[] if args.output == "-" else [args.output])
    if not found and not find_native(args.inputs, exclude=[] if args.output == "-" else [args.output]):
        # A mistyped run directory must not replace a good trace with an empty one.
        named = ", ".join(missing or args.inputs)
        err.write(f"otel_rl.convert: {named}: no such file, or no trace file in it; {args.output} "
                  "not written\n")
        return 1
    try:
        stats = convert(args.inputs, args.output, workers=args.jobs, limits=limits_from_args(args),
                        fmt=output_format(args.output, args.format))
    except OSError as exc:
        err.write(f"otel_rl.convert: cannot write {args.output}: {exc}\n")
        return 1
    if not args.quiet:
        for message in stats.warnings[:MAX_REPORTED]:
            err.write(f"warning: {message}\n")
        for path, lineno, message in stats.malformed:
            err.write(f"warning: {path}:{lineno}: malformed line skipped: {message}\n")
        if stats.malformed_count > len(stats.malformed):
            err.write(f"warning: ... and {stats.malformed_count - len(stats.malformed)} "
                      "more malformed lines\n")
        for path, reason in stats.skipped_files:
            err.write(f"warning: {path}: skipped ({reason})\n")
        for path, reason in stats.cut_short:
            err.write(f"warning: {path}: read only in part: {reason}\n")
    err.write(summary(stats) + "\n")
    if stats.files == 0 or stats.events == 0:
        return 1
    if args.strict and (stats.malformed_count or stats.skipped_truncated or stats.skipped_files
                        or stats.cut_short):
        return 1
    return 0
