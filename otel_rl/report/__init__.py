"""Analysis reports over a run's files: ``otel-rl report`` and its Python API.

::

    from otel_rl import report

    data = report.load("otel_rl_runs/exp/trial0", steps="2-5")
    report.phase_breakdown(data)["overall"]["rows"]     # count, total, p50/p95/p99, share
    report.long_tail(data)["stragglers"]                 # slow workers and steps
    report.timer_tree(data)                              # ML-Agents timers.json, merged ranks
    doc = report.build(data)                             # every view, JSON-ready
    open("report.html", "w").write(report.render_html(doc))

Every view is a function of :class:`RunData` returning plain data (dicts,
lists, numbers, strings): :func:`timeline`, :func:`phase_breakdown`,
:func:`span_breakdown`, :func:`stage_breakdown`, :func:`hop_breakdown`,
:func:`timer_trees` / :func:`timer_tree`, :func:`long_tail`,
:func:`lifecycle`, :func:`pipeline` (consumed sessions, staleness, bubbles); :func:`build` runs them all. :func:`render_table` prints a
built report as terminal tables, :func:`render_html` makes one self-contained
HTML page with interactive plots (needs ``plotly``: ``pip install
'otel_rl[report]'``).
"""

from __future__ import annotations

from ._build import VIEWS, build, summary
from ._load import load
from ._model import Diagnostics, RunData, SessionRow, SpanRow
from ._stats import percentile
from .breakdown import STAGE_INTERVALS, phase_breakdown, span_breakdown, stage_breakdown
from .hops import hop_breakdown
from .lifecycle import lifecycle
from .longtail import long_tail
from .pipeline import pipeline
from .timeline import timeline
from .timer_tree import timer_tree, timer_trees


def render_table(doc: dict, console=None) -> None:  # noqa: ANN001 - rich is imported lazily
    """Prints a built report (:func:`build`) as rich tables.

    Args:
        doc: The report.
        console: A ``rich.console.Console`` (standard output by default).
    """
    from ._table import render_table as _render

    _render(doc, console)


def render_html(doc: dict) -> str:
    """One self-contained HTML page of a built report, plots included (opens offline).

    Args:
        doc: The report (:func:`build`).

    Returns:
        The HTML text (plotly.js is inlined: a few MB).

    Raises:
        ImportError: plotly is not installed (``pip install 'otel_rl[report]'``).
    """
    from ._html import render_html as _render

    return _render(doc)


def main(argv: list[str] | None = None) -> int:
    """``otel-rl report`` / ``python -m otel_rl.report``; see :mod:`otel_rl.report.cli`."""
    from .cli import main as _main

    return _main(argv)


__all__ = [
    "Diagnostics", "RunData", "STAGE_INTERVALS", "SessionRow", "SpanRow", "VIEWS", "build",
    "hop_breakdown", "lifecycle", "load", "long_tail", "main", "percentile", "phase_breakdown", "pipeline",
    "render_html",
    "render_table", "span_breakdown", "stage_breakdown", "summary", "timeline", "timer_tree",
    "timer_trees",
]
