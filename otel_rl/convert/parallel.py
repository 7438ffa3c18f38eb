"""Converting to the native format on several cores: one input file per worker process.

Each rank's file is one process of the trace with tracks of its own, and a
native trace is a concatenation of packet sequences: so each worker encodes
whole files into a part of its own (its own packet sequence and track uuids),
and the parts are joined in input order. Pids are claimed once, up front, in
file order (as the single-process merge claims them); arrows between processes
are bound by span ids, which every file carries, so they join across parts.
OTLP/JSON inputs and JSON documents (torch traces) go to one part together:
the OTLP spans of one process may be spread over several files.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from .._internal.encode.perfetto.native import Unsupported
from .._internal.read.limits import InputLimits
from .._internal.read.pool import process_pool
from .perfetto_output import PerfettoOutput
from .stats import MAX_REPORTED, ConvertStats

__all__ = ["AUTO_PARALLEL_BYTES", "auto_workers", "convert_in_parallel"]

#: JSON lines a native conversion must read before ``workers=None`` (the CLI's default) starts
#: workers: below it a worker's start and the joining of parts cost more than they save.
AUTO_PARALLEL_BYTES = 32 << 20

#: Track uuids of part ``n`` start at ``(n + 1) << _SALT_SHIFT``: apart from every other part's.
_SALT_SHIFT = 40
#: Pids a part may remap to, beyond those claimed up front.
_PIDS_PER_PART = 1 << 12


def auto_workers(files: Sequence[str], min_bytes: int = AUTO_PARALLEL_BYTES) -> int:
    """Workers for a native conversion of ``files`` when none were asked for: one per core, at
    most one per file, where there are several files holding at least ``min_bytes`` together
    and this process can fork (on Linux, with no other thread); else 0."""
    if len(files) < 2 or not sys.platform.startswith("linux") or threading.active_count() != 1:
        return 0
    size = 0
    for path in files:
        with contextlib.suppress(OSError):
            size += os.path.getsize(path)
    if size < min_bytes:
        return 0
    return min(len(files), len(os.sched_getaffinity(0)))


def _convert_part(index: int, entries: list[tuple[str, str, dict]], claims: dict[str, Any], part: str,
                  limits: InputLimits) -> tuple[ConvertStats, int]:
    """Converts ``entries`` (a slice of the plan) into the native trace ``part``; runs in a worker."""
    with open(part, "wb", buffering=1 << 20) as raw:
        out = PerfettoOutput(raw, part, sequence_id=index + 2, uuid_salt=(index + 1) << _SALT_SHIFT, compiled=True)
        try:
            stats = _encode_part(index, entries, claims, part, limits, out)
        except Unsupported:
            # Input the compiled encoder does not mirror exactly: the part again, in Python.
            out = out.restart()
            stats = _encode_part(index, entries, claims, part, limits, out)
        out.close({})
    return stats, out.encoder.skipped


def _encode_part(index: int, entries: list[tuple[str, str, dict]], claims: dict[str, Any], part: str,
                 limits: InputLimits, out: PerfettoOutput) -> ConvertStats:
    from .merge import REMAP_PID_BASE, Merger

    stats = ConvertStats(output=part)
    merger = Merger(out, stats, 0, limits=limits)
    merger.adopt(claims, REMAP_PID_BASE + (index + 1) * _PIDS_PER_PART)
    for path in claims["annotation_files"]:
        merger.notes.read(path, limits, ConvertStats())  # their problems were reported once, up front
    for path, kind, mapping in entries:
        merger.convert_file(path, kind, mapping)
    merger.finish()
    stats.annotated = merger.notes.joined
    stats.events = out.events
    return stats


def _merge_stats(into: ConvertStats, part: ConvertStats) -> None:
    for name in ("files", "events", "spans", "skipped_truncated", "malformed_count", "remapped_pids",
                 "annotated"):
        setattr(into, name, getattr(into, name) + getattr(part, name))
    into.malformed.extend(part.malformed[:max(0, MAX_REPORTED - len(into.malformed))])
    into.skipped_files.extend(part.skipped_files)
    into.cut_short.extend(part.cut_short)
    into.ignored.extend(part.ignored)
    into.warnings.extend(part.warnings)


def convert_in_parallel(planner: Any, files: Sequence[str], out: PerfettoOutput, stats: ConvertStats,
                        workers: int, limits: InputLimits, scratch: str) -> int:
    """Converts ``files`` to the native trace ``out`` with ``workers`` processes.

    Args:
        planner: A :class:`~.merge.Merger` without output: it claims the pids.
        files: The inputs, in order.
        out: Where the parts are joined.
        stats: Filled with what every part read, wrote and skipped.
        workers: Worker processes.
        limits: Bounds on what one input may cost.
        scratch: Where the parts are written (beside the output), then removed.

    Returns:
        Events the native encoders left out.
    """
    plan = planner.plan(files)
    claims = planner.claims()
    parts: list[list[tuple[str, str, dict]]] = []
    rest: list[tuple[str, str, dict]] = []
    for entry in plan:
        (parts.append([entry]) if entry[1] == "chrome-jsonl" else rest.append(entry))
    if rest:
        parts.append(rest)
    names = [f"{scratch}.part{i}-{os.getpid()}" for i in range(len(parts))]
    skipped = 0
    pool = process_pool(max(1, min(workers, len(parts))))
    try:
        jobs = [pool.submit(_convert_part, i, entries, claims, names[i], limits) for i, entries in enumerate(parts)]
        for name, job in zip(names, jobs):
            part_stats, part_skipped = job.result()
            _merge_stats(stats, part_stats)
            skipped += part_skipped
            out.append_part(name)
    finally:
        pool.shutdown(cancel_futures=True)
        for name in names:
            with contextlib.suppress(OSError):
                os.unlink(name)
    return skipped
