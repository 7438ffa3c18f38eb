"""The demo's closing report: what the run left on disk, read back from the files.

Deliberately small: statuses and phase percentiles from the session records
of every rank, the trainer's per-step figures, and where to look next.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
from collections import Counter, defaultdict
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from ..report import percentile as _percentile
from .trainer import RunResult

#: Phases shown first, in a session's order; any other phase follows by name.
PHASE_ORDER = ("generate", "toolcall", "reward")
#: ``otel_rl.diagnostics()`` kinds that mean spans may not have reached the collector.
EXPORT_PROBLEMS = {"export_error", "flush_timeout", "shutdown_timeout", "exporter_process_lost"}


def read_sessions(run_dir: str) -> list[dict[str, Any]]:
    """Every session record of every rank under ``run_dir``."""
    records = []
    for name in sorted(os.listdir(run_dir)):
        if name.startswith("sessions-") and name.endswith(".jsonl"):
            with open(os.path.join(run_dir, name), encoding="utf-8") as f:
                records.extend(json.loads(line) for line in f if line.strip())
    return records


def percentile(values: list[float], q: float) -> float:
    """The report's percentile (linear interpolation) of a non-empty list, so the
    summary and ``otel-rl report`` print the same numbers for the same run."""
    return _percentile(sorted(values), q)  # type: ignore[return-value]


def phase_durations(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Seconds of every finished phase instance, by phase name."""
    durations: dict[str, list[float]] = defaultdict(list)
    for record in records:
        for phase, instances in (record.get("phases") or {}).items():
            for instance in instances:
                if instance.get("end_ts") is not None:
                    durations[phase].append(instance["end_ts"] - instance["start_ts"])
    return durations


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _table(title: str, caption: str | None = None) -> Table:
    return Table(title=title, caption=caption, title_justify="left", caption_justify="left",
                 box=box.SIMPLE_HEAD, show_edge=False, title_style="bold", caption_style="dim")


def _files_table(run_dir: str) -> Table:
    table = _table("files")
    table.add_column("file")
    table.add_column("bytes", justify="right")
    for name in sorted(os.listdir(run_dir)):
        path = os.path.join(run_dir, name)
        if os.path.isdir(path):
            table.add_row(name + "/", f"{len(os.listdir(path))} entries")
        else:
            table.add_row(name, f"{os.path.getsize(path):,}")
    return table


def _sessions_table(records: list[dict[str, Any]]) -> Table:
    counts = Counter((r.get("status"), r.get("reason")) for r in records)
    by_rank = Counter((r.get("role"), r.get("rank")) for r in records)
    ranks = ", ".join(f"{role} rank {rank}: {n}" for (role, rank), n in sorted(by_rank.items(), key=str))
    table = _table(f"sessions by status ({len(records)})", caption=ranks)
    table.add_column("status")
    table.add_column("reason")
    table.add_column("sessions", justify="right")
    table.add_column("share", justify="right")
    for (status, reason), n in sorted(counts.items(), key=lambda item: (-item[1], str(item[0]))):
        table.add_row(str(status), reason or "", str(n), f"{n / len(records):.0%}")
    return table


def _phases_table(records: list[dict[str, Any]]) -> Table:
    durations = phase_durations(records)
    table = _table("phase durations (ms)", caption="every turn of every rank;\n"
                   "a whole session: from its start to the verdict")
    for column in ("phase", "instances", "p50", "p95", "max"):
        table.add_column(column, justify="left" if column == "phase" else "right")
    names = [p for p in PHASE_ORDER if p in durations] + sorted(set(durations) - set(PHASE_ORDER))
    for name in names:
        values = durations[name]
        table.add_row(name, str(len(values)), _ms(percentile(values, 50)), _ms(percentile(values, 95)),
                      _ms(max(values)))
    totals = [r["total_s"] for r in records if r.get("total_s") is not None]
    if totals:
        table.add_row("whole session", str(len(totals)), _ms(percentile(totals, 50)),
                      _ms(percentile(totals, 95)), _ms(max(totals)))
    return table


def _steps_table(result: RunResult) -> Table:
    table = _table("training steps", caption="reward: mean over the step's sessions; tool: share that "
                   "called the calculator;\nlag: most policy versions between sampling and training")
    for column in ("step", "sessions", "accepted", "rejected", "reward", "correct", "tool",
                   "loss", "lag"):
        table.add_column(column, justify="right")
    for s in result.steps:
        table.add_row(str(s.step), str(s.sessions), str(s.accepted), str(sum(s.rejected.values())),
                      f"{s.mean_reward:.2f}", f"{s.correct:.0%}", f"{s.tool_use:.0%}",
                      "-" if s.loss is None else f"{s.loss:+.3f}", str(s.max_staleness))
    return table


def otlp_endpoint(environ: Any = os.environ) -> str | None:
    """The OTLP traces endpoint the run exported to, if one is configured."""
    return environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None


def print_summary(console: Console, run_dir: str, result: RunResult, elapsed_s: float,
                  trainer_diagnostics: dict[str, int], views: dict[str, Any] | None = None) -> None:
    """Prints the closing report on ``console`` (``views``: what :func:`write_views` left)."""
    views = views or {}
    def say(text: str) -> None:
        # Plain lines, never wrapped or cut: paths and commands must stay copyable.
        console.print(text, soft_wrap=True, markup=False, highlight=False)

    say(f"run directory: {run_dir}")
    console.print(_files_table(run_dir))
    records = read_sessions(run_dir)
    if records:
        console.print(_sessions_table(records))
        console.print(_phases_table(records))
    else:
        say("no session records (is tracing disabled? OTEL_RL_ENABLED / OTEL_SDK_DISABLED)")
    console.print(_steps_table(result))
    say(f"conversations of the first step (after a supervised warm-up to loss {result.warmup_loss:.2f}):")
    for text in result.examples:
        say(f"  {text}")
    problems: Counter = Counter(trainer_diagnostics)
    for counts in result.diagnostics.values():
        problems.update(counts)
    if problems:
        say("otel_rl problems counted: " + ", ".join(f"{k} {v}" for k, v in sorted(problems.items())))
    endpoint = otlp_endpoint()
    if endpoint:
        service = os.environ.get("OTEL_SERVICE_NAME") or "otel-rl"
        if problems.keys() & EXPORT_PROBLEMS:
            say(f"OTLP export to {endpoint}: not everything got through (see the warnings above); "
                "the files do not depend on it")
        else:
            say(f"also exported over OTLP to {endpoint} from every process (service.name {service})")
    say(f"finished in {elapsed_s:.1f} s")
    here = command_prefix()
    if views.get("trace"):
        say(f"open in Perfetto: {views['trace']}")
        say("  load it at https://ui.perfetto.dev (Open trace file)")
    if views.get("report"):
        say(f"report (phases, engine stages, long tail, timer trees): {views['report']}")
    for problem in views.get("problems", ()):
        say(f"  ({problem})")
    say("make them again, or for other runs:")
    say(f"  {here} convert {shlex.quote(run_dir)} -o trace.json")
    if importlib.util.find_spec("plotly") is not None:
        say(f"  {here} report {shlex.quote(run_dir)} --format html --out report.html")
    else:
        say(f"  {here} report {shlex.quote(run_dir)}")
        say("  (pip install 'otel_rl[report]' for the interactive HTML page: --format html)")


def command_prefix() -> str:
    """How to run otel_rl's CLI with the interpreter running now: works as printed,
    with or without the virtual environment activated."""
    exe = sys.executable or "python3"
    try:
        rel = os.path.relpath(exe)
    except ValueError:  # another drive
        rel = exe
    return f"{shlex.quote(exe if rel.startswith('..') else rel)} -m otel_rl"


def write_views(run_dir: str) -> dict[str, Any]:
    """Leaves what a newcomer opens next in the run directory: the merged
    Perfetto trace (:data:`~otel_rl._internal.keys.MERGED_TRACE_FILE`) and the
    report (HTML with plotly installed, else the table report as text).

    Returns:
        ``{"trace": path or None, "report": path or None, "problems": [...]}``.
    """
    from .. import report
    from .._internal import keys
    from ..convert import convert

    views: dict[str, Any] = {"trace": None, "report": None, "problems": []}
    trace = os.path.join(run_dir, keys.MERGED_TRACE_FILE)
    try:
        convert([run_dir], trace)
        views["trace"] = trace
    except Exception as exc:  # noqa: BLE001 - the run's own files are there regardless
        views["problems"].append(f"the merged trace was not written: {exc}")
    try:
        doc = report.build(report.load([run_dir]))
        if importlib.util.find_spec("plotly") is not None:
            path = os.path.join(run_dir, keys.REPORT_HTML_FILE)
            with open(path, "w", encoding="utf-8") as f:
                f.write(report.render_html(doc))
        else:
            path = os.path.join(run_dir, keys.REPORT_TEXT_FILE)
            with open(path, "w", encoding="utf-8") as f:
                report.render_table(doc, Console(file=f, width=160, color_system=None))
        views["report"] = path
    except Exception as exc:  # noqa: BLE001
        views["problems"].append(f"the report was not written: {exc}")
    return views
