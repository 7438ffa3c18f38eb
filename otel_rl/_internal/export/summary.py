"""The run summary: what one process recorded, wrote, sent and lost.

Built from numbers kept off the training loop's path: the export thread's span
count, ``guard``'s problem counters, the export chain's counts (in this process,
or reported by the exporter process with each flush acknowledgement) and the
bytes appended per file. At shutdown it is logged in one line (INFO, WARNING when
anything was lost) and written to ``summary-r{rank}.json`` in the run directory.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from typing import Any

from .. import diagnostics, files, guard, keys
from .jsonl import bytes_written

logger = logging.getLogger("otel_rl")

#: Drop reasons of the summary and the ``guard`` counters (or chain numbers) behind them.
DROP_REASONS = {
    "queue_full": "spans_dropped_queue_full",
    "exporter_backlog": "spans_dropped_exporter_backlog",
    "file_buffer_full": "spans_dropped_file_buffer",
    "after_shutdown": "spans_dropped_after_end",
    "unprocessed_at_exit": "spans_dropped_unprocessed_at_exit",
    "otlp_queue_full": diagnostics.SPANS_DROPPED_OTLP_QUEUE,
}
#: ``guard`` kinds that are failed writes or exports (the summary's ``export_errors``).
EXPORT_ERROR_KINDS = ("export_error", "trace_file_error", "session_records_write_error",
                      "metrics_write_error", "metrics_error", "otlp_flush_timeout", "flush_timeout",
                      "shutdown_timeout")

_CHAIN_NUMBERS = ("file_spans", "file_spans_failed", "otlp_spans_queued", "otlp_spans_exported",
                  "otlp_spans_failed", "otlp_failed_calls")


class Baseline:
    """Bytes written and problems counted by this process when a configuration
    started: a process configured twice, or forked, reports its own configuration's."""

    files: dict[str, int] = {}
    problems: dict[str, int] = {}
    started = time.time()
    #: Set in a process forked from a configured one: it writes a summary of its own.
    forked = False

    @classmethod
    def mark(cls) -> None:
        cls.files = bytes_written()
        cls.problems = guard.diagnostics()
        cls.started = time.time()


def after_fork_in_child() -> None:
    """A forked child's summary counts from the fork (guard's and jsonl's locks renewed first)."""
    Baseline.mark()
    Baseline.forked = True


def _add(total: dict[str, Any], part: dict[str, Any]) -> None:
    for key in _CHAIN_NUMBERS:
        total[key] = total.get(key, 0) + int(part.get(key, 0) or 0)
    total["otlp"] = total.get("otlp", False) or bool(part.get("otlp"))
    sessions = total.setdefault("sessions", Counter())
    sessions.update({str(k): int(v) for k, v in (part.get("sessions") or {}).items()})


def build(settings: Any, pipeline: Any, chain: Any, *, final: bool) -> dict[str, Any]:
    """The summary of the current (or just shut down) configuration as plain data."""
    shipper = getattr(pipeline, "shipper", None) if pipeline is not None else None
    problems: Counter[str] = Counter({k: n - Baseline.problems.get(k, 0)
                                      for k, n in guard.diagnostics().items()
                                      if n > Baseline.problems.get(k, 0)})
    numbers: dict[str, Any] = {}
    files = Counter({path: n - Baseline.files.get(path, 0) for path, n in bytes_written().items()})
    remote_final = True
    if shipper is not None:
        remote = shipper.remote_stats or {}
        _add(numbers, remote)
        problems.update({str(k): int(v) for k, v in (remote.get("problems") or {}).items()})
        files.update({str(k): int(v) for k, v in (remote.get("file_bytes") or {}).items()})
        remote_final = shipper.final_stats or shipper.failed
        if shipper.lost_at_exit:
            problems[DROP_REASONS["unprocessed_at_exit"]] += shipper.lost_at_exit
    if chain is not None:
        _add(numbers, chain.stats())
    run_dir = os.path.abspath(settings.run_dir)
    files = {os.path.relpath(os.path.abspath(p), run_dir) if os.path.abspath(p).startswith(run_dir + os.sep)
             else p: n for p, n in sorted(files.items()) if n > 0}

    dropped = {reason: problems[kind] for reason, kind in DROP_REASONS.items() if problems.get(kind)}
    if numbers.get("file_spans_failed"):  # a full or read-only disk
        dropped["file_write_error"] = numbers["file_spans_failed"]
    if numbers.get("otlp_spans_failed"):
        dropped["otlp_export_failed"] = numbers["otlp_spans_failed"]
    unsent = (numbers.get("otlp_spans_queued", 0) - numbers.get("otlp_spans_exported", 0)
              - numbers.get("otlp_spans_failed", 0) - problems.get(DROP_REASONS["otlp_queue_full"], 0))
    if final and numbers.get("otlp") and unsent > 0:
        dropped["otlp_unsent_at_exit"] = unsent
    queue_full = problems.get(DROP_REASONS["queue_full"], 0)
    lost_exporter = bool(problems.get("exporter_process_lost"))
    if shipper is not None and shipper.failed:
        # Shipped, but not in the child's last report: lost with it (at most;
        # it may have written some after reporting).
        unconfirmed = shipper.shipped - int((shipper.remote_stats or {}).get("spans_in", 0))
        if unconfirmed > 0:
            dropped["exporter_process_lost"] = unconfirmed
    export_errors = sum(problems.get(kind, 0) for kind in EXPORT_ERROR_KINDS) + numbers.get(
        "otlp_failed_calls", 0)
    records_lost = sum(v for k, v in problems.items() if k.endswith("_lines_lost"))
    summary: dict[str, Any] = {
        "rank": settings.rank,
        "role": settings.role,
        "pid": os.getpid(),
        "run_dir": run_dir,
        "final": final,
        "started": Baseline.started,
        "time": time.time(),
        "spans": {
            "recorded": (pipeline.spans_seen + pipeline.spans_left if pipeline is not None else 0)
            + queue_full,
            "exported_file": numbers.get("file_spans", 0),
            "exported_otlp": numbers.get("otlp_spans_exported", 0),
            "otlp_enabled": bool(numbers.get("otlp")),
            "dropped": dropped,
            "dropped_total": sum(dropped.values()),
        },
        "sessions": dict(sorted(numbers.get("sessions", Counter()).items())),
        "records_lost": records_lost,
        "file_bytes": files,
        "file_bytes_total": sum(files.values()),
        "export_errors": export_errors,
        "exporter_process": {
            "used": shipper is not None,
            "lost": lost_exporter,
            # False when the child's last numbers predate its shutdown (it did not
            # answer in time): later exports are then missing from these counts.
            "final_numbers": remote_final if shipper is not None else None,
        },
        "problems": dict(sorted(problems.items())),
    }
    summary["complete"] = not (dropped or records_lost or lost_exporter or export_errors
                               or (final and shipper is not None and not remote_final))
    return summary


def line(summary: dict[str, Any], path: str | None) -> str:
    """The one log line of a summary."""
    spans = summary["spans"]
    parts = [f"{spans['recorded']} spans recorded", f"{spans['exported_file']} written to file"]
    if spans["otlp_enabled"]:
        parts.append(f"{spans['exported_otlp']} exported over OTLP")
    dropped = ", ".join(f"{k}={v}" for k, v in spans["dropped"].items())
    parts.append(f"{spans['dropped_total']} dropped" + (f" ({dropped})" if dropped else ""))
    sessions = " ".join(f"{k}={v}" for k, v in summary["sessions"].items()) or "none"
    parts.append(f"sessions {sessions}")
    parts.append(f"{summary['file_bytes_total']} bytes written")
    parts.append(f"{summary['export_errors']} export errors")
    if summary["records_lost"]:
        parts.append(f"{summary['records_lost']} records lost")
    if summary["exporter_process"]["lost"]:
        parts.append("exporter process lost")
    who = f"{summary['role']}-r{summary['rank']}" if summary["role"] else f"r{summary['rank']}"
    text = f"otel_rl run summary {who}: " + ", ".join(parts)
    return text + (f"; {path}" if path else "")


def write(settings: Any, summary: dict[str, Any]) -> str | None:
    """Writes ``summary-r{rank}.json`` (replaced whole); its path, or ``None`` (counted)."""
    if Baseline.forked:  # the parent writes summary-r{rank}.json of the same rank
        path = settings.file_path(keys.FORKED_SUMMARY_FILE).replace("{pid}", str(os.getpid()))
    else:
        path = settings.file_path(keys.SUMMARY_FILE)
    try:
        tmp = f"{path}.{os.getpid()}.tmp"
        with files.open_private(tmp, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
        return path
    except OSError as exc:
        guard.report(diagnostics.SUMMARY_WRITE_ERROR, "cannot write the run summary %s: %s", path, exc)
        return None


def log(summary: dict[str, Any], path: str | None) -> None:
    level = logging.INFO if summary["complete"] else logging.WARNING
    logger.log(level, "%s", line(summary, path))
