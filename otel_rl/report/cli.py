"""``otel-rl report`` (also ``python -m otel_rl.report``)."""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson

from .._internal.read.limits import add_limit_options, limits_from_args
from ._build import VIEWS, build
from .._internal.read.session_facts import CANDIDATES
from ._load import load_run, parse_ranks, parse_steps
from .lifecycle import DEFAULT_GANTT_LIMIT
from .longtail import DEFAULT_OUTLIERS, DEFAULT_THRESHOLD, DEFAULT_TURN_PHASE
from .timeline import DEFAULT_LIMIT

#: Problems printed before "... and N more" (all are in the JSON's diagnostics).
MAX_MESSAGES = 30
#: ``--format html`` writes here unless ``--out`` says otherwise.
DEFAULT_HTML = "report.html"


def _steps(text: str) -> frozenset:
    try:
        return parse_steps(text)  # type: ignore[return-value]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _views(text: str) -> list[str]:
    views = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in views if v not in VIEWS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown view {', '.join(unknown)} (choose from {', '.join(VIEWS)})")
    return views


def parser() -> argparse.ArgumentParser:
    """The command line of ``otel-rl report``."""
    p = argparse.ArgumentParser(
        prog="otel-rl report",
        description="Analysis report of an otel_rl run (or AReaL session records, sglang-omni request "
                    "events, OTLP/JSON from a collector): timelines, phase / span / stage breakdowns, hops, "
                    "ML-Agents timer trees, long-tail and straggler analysis, session lifecycle.")
    p.add_argument("inputs", nargs="+", metavar="RUN_DIR_OR_FILES",
                   help="run directories (searched recursively), files or glob patterns")
    p.add_argument("-f", "--format", choices=("table", "json", "html"), default="table",
                   help="terminal tables (default), JSON, or one self-contained HTML page with plots")
    p.add_argument("-o", "--out", metavar="PATH",
                   help=f"write here (default: standard output; {DEFAULT_HTML} for html)")
    p.add_argument("--step", type=_steps, metavar="STEPS", help="only these steps: 3, 1,4 or 2-5")
    p.add_argument("--rank", metavar="RANKS",
                   help="only these ranks (0,1) or workers (rollout-r1), comma-separated")
    p.add_argument("--view", type=_views, metavar="VIEWS",
                   help=f"only these views, comma-separated: {', '.join(VIEWS)}")
    p.add_argument("--session", action="append", metavar="ID",
                   help="show the timeline of this session (session_id or task_id:session_id); repeatable")
    p.add_argument("--request", action="append", metavar="ID",
                   help="show the timeline of this request; repeatable")
    p.add_argument("--timeline-limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                   help=f"timelines shown without --session / --request: all up to N, else the N slowest "
                        f"(default {DEFAULT_LIMIT})")
    p.add_argument("--outliers", type=int, default=DEFAULT_OUTLIERS, metavar="N",
                   help=f"slowest sessions listed with their phase breakdown (default {DEFAULT_OUTLIERS})")
    p.add_argument("--straggler-threshold", type=float, default=DEFAULT_THRESHOLD, metavar="X",
                   help="a worker or step is a straggler beyond X times the median of the others "
                        f"(default {DEFAULT_THRESHOLD})")
    p.add_argument("--turn-phase", default=DEFAULT_TURN_PHASE, metavar="PHASE",
                   help=f"the phase whose instances are turns (default {DEFAULT_TURN_PHASE})")
    p.add_argument("--gantt-limit", type=int, default=DEFAULT_GANTT_LIMIT, metavar="N",
                   help=f"sessions drawn in the HTML Gantt chart (default {DEFAULT_GANTT_LIMIT})")
    p.add_argument("--bins", type=int, default=40, metavar="N", help="histogram bins (default 40)")
    p.add_argument("--no-align-clocks", action="store_true",
                   help="never shift a worker whose spans start before their cross-process parents")
    progress = p.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="always show a progress bar while reading")
    progress.add_argument("--no-progress", dest="progress", action="store_false",
                          help="never show one (default: on large inputs in a terminal)")
    add_limit_options(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no warnings about skipped input")
    return p


def _dump_json(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
                        | orjson.OPT_APPEND_NEWLINE)


def _write(path: str, data: bytes) -> None:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``otel-rl report``.

    Args:
        argv: Arguments (``sys.argv[1:]`` when ``None``).

    Returns:
        0 when a report was written; 1 when nothing could be read (or the output
        could not be written); 2 for a bad command line.
    """
    args = parser().parse_args(argv)
    # A short-lived batch job over millions of acyclic objects: cyclic GC only costs time.
    gc.disable()
    err = sys.stderr
    started = time.perf_counter()
    if args.rank is not None:
        try:
            ranks = parse_ranks(args.rank)
        except ValueError as exc:
            err.write(f"otel-rl report: --rank: {exc}\n")
            return 2
    else:
        ranks = None
    if args.format == "html":
        try:
            import plotly  # noqa: F401
        except ImportError:
            err.write("otel-rl report: --format html needs plotly: pip install 'otel_rl[report]'\n")
            return 1
    # The views show only a few sessions one by one (the slowest, the first by submission, the
    # open ones): what the others were shown with need not be kept, unless asked for by id.
    every_row = bool(args.session) or max(args.timeline_limit, args.gantt_limit, args.outliers) > CANDIDATES
    data = load_run(args.inputs, steps=args.step, ranks=ranks, align_clocks=not args.no_align_clocks,
                    progress=args.progress, limits=limits_from_args(args), every_row=every_row)
    messages = data.diagnostics.messages()
    if not args.quiet:
        for message in messages[:MAX_MESSAGES]:
            err.write(f"warning: {message}\n")
        if len(messages) > MAX_MESSAGES:
            err.write(f"warning: ... and {len(messages) - MAX_MESSAGES} more (see 'diagnostics' in --format json)\n")
    if data.is_empty():
        d = data.diagnostics
        found = len(d.files) + len(d.ignored) + len(d.unreadable)
        what = (f"{found} file(s) found, none holding sessions, spans or request events"
                if found else "no input files found")
        if data.steps is not None or data.ranks is not None:
            what += " (after --step / --rank)"
        err.write(f"otel-rl report: nothing to report from {' '.join(args.inputs)}: {what}\n")
        return 1
    if data.steps is not None and not data.sessions and not data.spans:
        err.write(f"otel-rl report: --step {','.join(map(str, sorted(data.steps)))}: no session or span of those steps in "
                  f"{' '.join(args.inputs)}\n")
        return 1
    doc = build(data, args.view, threshold=args.straggler_threshold, outliers=args.outliers,
                turn_phase=args.turn_phase, sessions=args.session, requests=args.request,
                timeline_limit=args.timeline_limit, gantt_limit=args.gantt_limit, bins=args.bins)
    timelines = doc.get("timeline")
    if timelines is not None:
        # Ids that match nothing are said, not silently shown as an empty timeline.
        for flag, ids, key in (("--session", args.session, "sessions"), ("--request", args.request, "requests")):
            if ids and not timelines.get(key):
                err.write(f"otel-rl report: {flag} {', '.join(map(str, ids))}: no such {key[:-1]} "
                          f"(of {timelines.get(key + '_total', 0):,}); its timeline is empty\n")
    try:
        if args.format == "json":
            payload = _dump_json(doc)
            if args.out and args.out != "-":
                _write(args.out, payload)
            else:
                sys.stdout.buffer.write(payload)
                sys.stdout.flush()
        elif args.format == "html":
            from ._html import render_html

            out = args.out or DEFAULT_HTML
            _write(out, render_html(doc).encode("utf-8"))
            if not args.quiet:
                err.write(f"otel-rl report: wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB; opens offline)\n")
        else:
            from rich.console import Console

            from ._table import render_table

            if args.out and args.out != "-":
                with open(args.out, "w", encoding="utf-8") as f:
                    render_table(doc, Console(file=f, width=160, no_color=True, highlight=False))
            else:
                tty = sys.stdout.isatty()
                render_table(doc, Console(highlight=False, width=None if tty else 160))
    except OSError as exc:
        err.write(f"otel-rl report: cannot write {args.out or '-'}: {exc}\n")
        return 1
    if not args.quiet and args.format != "table":
        s = doc.get("summary") or {}
        err.write(f"otel-rl report: {s.get('sessions', len(data.sessions)):,} sessions, "
                  f"{s.get('spans', len(data.spans)):,} spans, {s.get('requests', len(data.requests)):,} requests "
                  f"in {time.perf_counter() - started:.2f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
