"""One self-contained HTML page of a built report: plotly figures, tables, no network.

plotly.js is inlined once in the page's head (``plotly.offline.get_plotlyjs``),
every figure is a ``<div>`` drawn by it, and nothing refers to a URL, so the
file opens offline, from disk or an e-mail attachment.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from ._table import count_nodes, fmt_ms, fmt_num, fmt_pct, fmt_s, fmt_x, tree_rows
from .timeline import describe_event

#: Steps drawn as separate CDF curves (the slowest ones when there are more).
MAX_CDF_STEPS = 12
#: Colours of phases, stable across figures (AReaL's palette for its three, then plotly's).
_PHASE_COLORS = {"generate": "#2563eb", "toolcall": "#f59e0b", "reward": "#10b981",
                 "(unattributed)": "#cbd5e1"}
_PALETTE = ("#8b5cf6", "#ef4444", "#14b8a6", "#ec4899", "#84cc16", "#06b6d4", "#f97316", "#6366f1",
            "#a855f7", "#22c55e")
_STATUS_COLORS = {"accepted": "#16a34a", "rejected": "#f59e0b", "failed": "#dc2626",
                  "dropped": "#6b7280", "pending": "#a855f7"}

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #0f172a;
       background: #f8fafc; }
header { background: #0f172a; color: #f8fafc; padding: 16px 28px; }
header h1 { margin: 0 0 4px 0; font-size: 22px; }
header .sub { color: #94a3b8; font-size: 13px; }
nav { position: sticky; top: 0; background: #e2e8f0; padding: 8px 28px; z-index: 10; font-size: 14px; }
nav a { margin-right: 16px; color: #1e40af; text-decoration: none; }
main { padding: 8px 28px 40px 28px; }
section { background: white; border: 1px solid #e2e8f0; border-radius: 8px; padding: 8px 18px 16px;
          margin: 16px 0; }
h2 { font-size: 18px; margin: 10px 0; }
h3 { font-size: 15px; margin: 14px 0 6px; color: #334155; }
p.note { color: #475569; font-size: 13px; margin: 4px 0 8px; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 10px; }
th, td { border-bottom: 1px solid #e2e8f0; padding: 3px 10px; text-align: right; white-space: nowrap; }
th { background: #f1f5f9; position: sticky; top: 36px; }
td.l, th.l { text-align: left; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 8px 0; }
.card { background: #f1f5f9; border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.card .v { font-size: 20px; font-weight: 600; }
.card .k { font-size: 12px; color: #475569; }
.warn { color: #b45309; }
details { margin: 4px 0; }
summary { cursor: pointer; font-size: 14px; }
.plot { width: 100%; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    """An HTML table; the first ``left`` columns are left-aligned (text)."""
    head = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_e(c)}</td>' for i, c in enumerate(row))
        + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class _Page:
    def __init__(self) -> None:
        import plotly.graph_objects as go

        self.go = go
        self.parts: list[str] = []
        self.nav: list[tuple[str, str]] = []
        self._n = 0
        self._colors: dict[str, str] = dict(_PHASE_COLORS)

    def color(self, phase: str) -> str:
        if phase not in self._colors:
            self._colors[phase] = _PALETTE[(len(self._colors) - len(_PHASE_COLORS)) % len(_PALETTE)]
        return self._colors[phase]

    def section(self, anchor: str, title: str) -> None:
        if self.nav:
            self.parts.append("</section>")
        self.nav.append((anchor, title))
        self.parts.append(f'<section id="{anchor}"><h2>{_e(title)}</h2>')

    def add(self, text: str) -> None:
        self.parts.append(text)

    def note(self, text: str) -> None:
        self.parts.append(f'<p class="note">{_e(text)}</p>')

    def figure(self, fig: Any, height: int = 380) -> None:
        self._n += 1
        fig.update_layout(height=height, margin=dict(l=60, r=20, t=76, b=50), template="plotly_white",
                          title=dict(y=0.99, yanchor="top", yref="container", x=0.01, xanchor="left"),
                          legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="left", x=0))
        self.parts.append('<div class="plot">' + fig.to_html(
            full_html=False, include_plotlyjs=False, div_id=f"fig{self._n}", default_height=f"{height}px",
            config={"displaylogo": False, "responsive": True}) + "</div>")

    def html(self, title: str, subtitle: str) -> str:
        from plotly.offline import get_plotlyjs

        if self.nav:
            self.parts.append("</section>")
        nav = "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in self.nav)
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><link rel=\"icon\" href=\"data:,\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<style>{_CSS}</style>"
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            f"<header><h1>{_e(title)}</h1><div class=\"sub\">{_e(subtitle)}</div></header>"
            f"<nav>{nav}</nav><main>{''.join(self.parts)}</main></body></html>\n")


def _unit(values: Sequence[float | None]) -> tuple[float, str]:
    """Scale and unit label for seconds on a plot axis."""
    vals = [abs(v) for v in values if v is not None]
    peak = max(vals) if vals else 0.0
    return (1e3, "ms") if peak < 1 else (1.0, "s")


def _summary(page: _Page, s: dict[str, Any]) -> None:
    page.section("summary", "Summary")
    cards = [("sessions", f"{s['sessions']:,}"), ("finalized", f"{s['finalized']:,}"),
             ("workers", str(len(s["workers"]))), ("steps", str(len(s["steps"]))),
             ("spans", f"{s['spans']:,}"), ("duration", fmt_s(s["duration_s"]))]
    if s["requests"]:
        cards.append(("requests", f"{s['requests']:,}"))
    cards += [(k, f"{v:,}") for k, v in s["by_status"].items()]
    page.add('<div class="cards">' + "".join(
        f'<div class="card"><div class="v">{_e(v)}</div><div class="k">{_e(k)}</div></div>'
        for k, v in cards) + "</div>")
    page.add(_table(["worker", "rank", "role", "pid", "process"],
                    [[w["worker"], w.get("rank"), w.get("role"), w.get("pid"), w.get("name")]
                     for w in s["workers"]], left=1))


def _training(page: _Page, view: dict[str, Any]) -> None:
    rows = view["rows"]
    if not rows:
        return
    go = page.go
    page.section("training", "Training per step")
    page.note("What otel_rl.stats exported at each step (every tracker, mean over ranks), beside the "
              "timing views of the same steps.")
    steps = [str(r["step"]) for r in rows]
    fig = go.Figure()
    for key in view["headline"]:
        fig.add_scatter(name=key, x=steps, y=[r["values"].get(key) for r in rows], mode="lines+markers")
    fig.update_layout(title="Headline statistics per step", xaxis_title="step")
    page.figure(fig)
    page.add(_table(["step", *view["keys"]],
                    [[r["step"], *(fmt_num(r["values"].get(k)) for k in view["keys"])] for r in rows]))


def _phases(page: _Page, view: dict[str, Any]) -> None:
    group = view["overall"]
    if not group["rows"]:
        return
    go = page.go
    page.section("phases", "Phase breakdown")
    page.note(f"{group['sessions']:,} finalized sessions, {fmt_s(group['session_time_s'])} of session time. "
              "Share = phase time over session time (verl's event share); (unattributed) = session time "
              "in no phase (queueing, waiting).")
    rows = [r for r in group["rows"] if r["count"]]
    scale, unit = _unit([r["p99_s"] for r in rows])
    fig = go.Figure()
    for q in ("p50", "p95", "p99"):
        fig.add_bar(name=q, x=[r["phase"] for r in rows], y=[(r[f"{q}_s"] or 0) * scale for r in rows])
    fig.update_layout(title="Phase duration percentiles", yaxis_title=unit, barmode="group")
    page.figure(fig)
    steps = view["by_step"]
    if len(steps) > 1:
        fig = go.Figure()
        phases = [r["phase"] for r in group["rows"]]
        for phase in phases:
            fig.add_bar(name=phase, x=[str(g["step"]) for g in steps], marker_color=page.color(phase),
                        y=[100 * (next((r["share"] for r in g["rows"] if r["phase"] == phase), 0) or 0)
                           for g in steps])
        fig.update_layout(title="Share of session time per phase, per step", barmode="stack",
                          xaxis_title="step", yaxis_title="% of session time")
        page.figure(fig)
    page.add(_table(["phase", "count", "open", "total", "avg", "p50", "p95", "p99", "max", "share", "avg share"],
                    [[r["phase"], f"{r['count']:,}", r["open"] or "", fmt_s(r["total_s"]), fmt_s(r["avg_s"]),
                      fmt_s(r["p50_s"]), fmt_s(r["p95_s"]), fmt_s(r["p99_s"]), fmt_s(r["max_s"]),
                      fmt_pct(r["share"]), fmt_pct(r["avg_share"])] for r in group["rows"]]))


def _spans(page: _Page, view: dict[str, Any]) -> None:
    rows = view["overall"]
    if not rows:
        return
    go = page.go
    page.section("spans", "Spans by name")
    page.note("Scopes, trace_perf functions, steps and other spans (sessions, tasks and phases are in the "
              "phase breakdown). Self time excludes direct children.")
    top = sorted(rows, key=lambda r: -r["self_s"])[:20][::-1]
    scale, unit = _unit([r["self_s"] for r in top])
    fig = go.Figure(go.Bar(x=[r["self_s"] * scale for r in top], y=[r["name"] for r in top],
                           orientation="h", marker_color="#6366f1"))
    fig.update_layout(title="Self time by span name (top 20)", xaxis_title=unit)
    page.figure(fig, max(300, 24 * len(top) + 100))
    page.add(_table(["name", "category", "count", "total", "avg", "p50", "p95", "p99", "max", "self", "share"],
                    [[r["name"], r["category"] or "", f"{r['count']:,}", fmt_s(r["total_s"]), fmt_s(r["avg_s"]),
                      fmt_s(r["p50_s"]), fmt_s(r["p95_s"]), fmt_s(r["p99_s"]), fmt_s(r["max_s"]),
                      fmt_s(r["self_s"]), fmt_pct(r["share"])] for r in rows], left=2))


def _stages(page: _Page, stages: dict[str, Any] | None, hops: dict[str, Any] | None) -> None:
    srows = (stages or {}).get("rows") or []
    hrows = (hops or {}).get("rows") or []
    if not srows and not hrows:
        return
    go = page.go
    page.section("stages", "Stages and hops")
    if srows:
        page.note(f"{stages['requests']:,} requests; intervals paired with sglang-omni's open/close rules "  # type: ignore[index]
                  "(first in, first out per request, stage and pair); open = never closed.")
        labels = [f"{r['stage']}: {r['interval']}" for r in srows][::-1]
        fig = go.Figure()
        for q in ("p50", "p95"):
            fig.add_bar(name=q, y=labels, x=[r[f"{q}_ms"] or 0 for r in srows][::-1], orientation="h")
        fig.update_layout(title="Stage intervals", xaxis_title="ms", barmode="group")
        page.figure(fig, max(300, 40 * len(srows) + 100))
        page.add(_table(["stage", "interval", "count", "open", "total", "avg", "p50", "p95", "p99", "max", "share"],
                        [[r["stage"], r["interval"], f"{r['count']:,}", r["open"] or "", fmt_ms(r["total_ms"]),
                          fmt_ms(r["avg_ms"]), fmt_ms(r["p50_ms"]), fmt_ms(r["p95_ms"]), fmt_ms(r["p99_ms"]),
                          fmt_ms(r["max_ms"]), fmt_pct(r["share"])] for r in srows], left=2))
    if hrows:
        labels = [f"{r['src']} → {r['dst']} ({r['kind']})" for r in hrows][::-1]
        fig = go.Figure()
        for q in ("p50", "p95"):
            fig.add_bar(name=q, y=labels, x=[r[f"{q}_ms"] or 0 for r in hrows][::-1], orientation="h")
        fig.update_layout(title="Hops", xaxis_title="ms", barmode="group")
        page.figure(fig, max(300, 40 * len(hrows) + 100))
        page.add(_table(["source", "destination", "kind", "count", "unmatched", "total", "avg", "p50", "p95",
                         "p99", "max"],
                        [[r["src"], r["dst"], r["kind"], f"{r['count']:,}", r["unmatched"] or "",
                          fmt_ms(r["total_ms"]), fmt_ms(r["avg_ms"]), fmt_ms(r["p50_ms"]), fmt_ms(r["p95_ms"]),
                          fmt_ms(r["p99_ms"]), fmt_ms(r["max_ms"])] for r in hrows], left=3))


def _tree_table(tree: dict[str, Any]) -> str:
    rows = []
    parents: list[float] = []
    for depth, name, node in tree_rows(tree, 400):
        del parents[depth:]
        parent_total = parents[-1] if parents else None
        parents.append(node["total"])
        rows.append(["\u00a0\u00a0" * depth + name, fmt_s(node["total"]), f"{node['count']:,}", fmt_s(node["self"]),
                     fmt_pct(node["total"] / parent_total) if parent_total else "",
                     "yes" if node.get("is_parallel") else ""])
    return _table(["block", "total", "count", "self", "of parent", "parallel"], rows)


def _timers(page: _Page, view: dict[str, Any]) -> None:
    tree = view["merged"]
    if not tree.get("children"):
        return
    go = page.go
    page.section("timers", "Timer tree")
    page.note("ML-Agents' timer tree from span nesting: total (with children), count, self (without), "
              "is_parallel (instances overlapped, or ran on several workers). Box size = self time, "
              "so a block's box covers its children.")
    ids, labels, parents, values, hover = [], [], [], [], []

    def walk(node: dict[str, Any], name: str, path: str, parent: str) -> None:
        ids.append(path)
        labels.append(name)
        parents.append(parent)
        values.append(max(node["self"], 0.0))
        hover.append(f"{name}<br>total {fmt_s(node['total'])}<br>count {node['count']:,}<br>"
                     f"self {fmt_s(node['self'])}" + ("<br>parallel" if node.get("is_parallel") else ""))
        for child_name, child in (node.get("children") or {}).items():
            walk(child, child_name, f"{path}/{child_name}", path)

    walk(tree, "root", "root", "")
    fig = go.Figure(go.Icicle(ids=ids, labels=labels, parents=parents, values=values,
                              branchvalues="remainder", hovertext=hover, hoverinfo="text",
                              maxdepth=6, root_color="#e2e8f0"))
    fig.update_layout(title="Merged timer tree (click a block to zoom)")
    page.figure(fig, 460)
    page.add(_tree_table(tree))
    if count_nodes(tree) > 400:
        page.note("Largest 400 blocks shown; --format json has the whole tree.")
    for worker, wtree in view["workers"].items():
        if wtree.get("children"):
            page.add(f"<details><summary>Timer tree of {_e(worker)}</summary>{_tree_table(wtree)}</details>")
    gauges = tree.get("gauges") or {}
    if gauges:
        page.add("<h3>Gauges</h3>" + _table(["gauge", "value", "min", "max", "count"],
                                            [[k, f"{g['value']:g}", f"{g['min']:g}", f"{g['max']:g}", g["count"]]
                                             for k, g in gauges.items()]))


def _longtail(page: _Page, view: dict[str, Any]) -> None:
    steps = view["steps"]
    if not steps:
        return
    go = page.go
    page.section("longtail", "Long tail")
    page.note(f"Completion time of each session after its step's first submission. Stragglers: beyond "
              f"{view['threshold']:g}× the median of the other workers (or steps).")
    shown = steps if len(steps) <= MAX_CDF_STEPS else sorted(steps, key=lambda s: -s["span_s"])[:MAX_CDF_STEPS]
    scale, unit = _unit([s["span_s"] for s in shown])
    fig = go.Figure()
    for sv in shown:
        fig.add_scatter(x=[x * scale for x in sv["cdf"]["x"]], y=sv["cdf"]["y"], mode="lines", line_shape="hv",
                        name=f"step {sv['step']}" if sv["step"] is not None else "all")
    fig.update_layout(title="Completion-time CDF per step" + (" (slowest steps)" if len(steps) > len(shown) else ""),
                      xaxis_title=f"{unit} after the step's first submission", yaxis_title="fraction finished")
    page.figure(fig)
    fig = go.Figure()
    for sv in shown:
        span = sv["span_s"] or 1.0
        fig.add_scatter(x=[x / span for x in sv["cdf"]["x"]], y=sv["cdf"]["y"], mode="lines", line_shape="hv",
                        name=f"step {sv['step']}" if sv["step"] is not None else "all")
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dot", color="#94a3b8"), name="uniform")
    fig.update_layout(title="Share of sessions finished by fraction of the step",
                      xaxis_title="fraction of the step", yaxis_title="fraction finished")
    page.figure(fig)
    focus = max(steps, key=lambda s: (s["slowest_worker"]["ratio"] or 0, s["span_s"]))
    if len(focus["worker_cdfs"]) > 1:
        fig = go.Figure()
        sc, un = _unit([focus["span_s"]])
        for worker, curve in sorted(focus["worker_cdfs"].items()):
            fig.add_scatter(x=[x * sc for x in curve["x"]], y=curve["y"], mode="lines", line_shape="hv", name=worker)
        fig.update_layout(title=f"Per-worker CDF in step {focus['step']} (the step with the slowest worker "
                                "against the others)", xaxis_title=f"{un} after the step's first submission",
                          yaxis_title="fraction finished")
        page.figure(fig)
    workers = sorted({w["worker"] for sv in steps for w in sv["workers"]})
    if len(workers) > 1 and len(steps) > 1:
        z = []
        for worker in workers:
            z.append([next((w["ratio"] for w in sv["workers"] if w["worker"] == worker), None) for sv in steps])
        fig = go.Figure(go.Heatmap(z=z, x=[str(sv["step"]) for sv in steps], y=workers, colorscale="RdYlGn_r",
                                   zmid=1.0, colorbar=dict(title="× others")))
        fig.update_layout(title="Last finish per worker and step, against the median of the other workers",
                          xaxis_title="step", xaxis_type="category")
        page.figure(fig, max(260, 30 * len(workers) + 120))
    qs = ("p50", "p80", "p90", "p95", "p99", "p99.9")
    page.add(_table(["step", "sessions", "span", *qs, "p80 at", "done at 50%", "tail share", "slowest worker",
                     "× others", "step straggler"],
                    [[sv["step"], f"{sv['sessions']:,}", fmt_s(sv["span_s"]),
                      *(fmt_s(sv["completion_s"][q]) for q in qs), fmt_pct(sv["completion_fraction"]["p80"]),
                      fmt_pct(next(f["share"] for f in sv["finished_by_fraction"] if f["fraction"] == 0.5)),
                      fmt_pct(sv["tail_share"]), sv["slowest_worker"]["worker"],
                      fmt_x(sv["slowest_worker"]["ratio"]), "yes" if sv.get("straggler") else ""]
                     for sv in steps]))
    if view["stragglers"]:
        page.add("<h3>Stragglers</h3>" + _table(
            ["kind", "step", "worker", "time", "median of others", "ratio"],
            [[s["kind"], s["step"], s["worker"] or "", fmt_s(s["value_s"]), fmt_s(s["median_s"]), fmt_x(s["ratio"])]
             for s in view["stragglers"]], left=3))
    if view["workers"]:
        page.add("<h3>Sessions per worker</h3>" + _table(
            ["worker", "sessions", "avg", "p50", "p95", "p99", "max", "slowest in steps", "straggler steps"],
            [[w["worker"], f"{w['count']:,}", fmt_s(w["avg_s"]), fmt_s(w["p50_s"]), fmt_s(w["p95_s"]),
              fmt_s(w["p99_s"]), fmt_s(w["max_s"]), w["slowest_in_steps"], w["straggler_steps"]]
             for w in view["workers"]]))
    outliers = view["outliers"]
    if outliers:
        labels = [f"{o['worker']} {o['task_id']}:{o['session_id']}" for o in outliers][::-1]
        phases = sorted({p for o in outliers for p in o["phases_s"]})
        sc, un = _unit([o["total_s"] for o in outliers])
        fig = go.Figure()
        for phase in phases + ["(unattributed)"]:
            vals = [(o["phases_s"].get(phase, 0.0) if phase != "(unattributed)" else o["unattributed_s"]) * sc
                    for o in outliers][::-1]
            fig.add_bar(name=phase, y=labels, x=vals, orientation="h", marker_color=page.color(phase))
        fig.update_layout(title="Slowest sessions: time per phase", barmode="stack", xaxis_title=un)
        page.figure(fig, max(300, 26 * len(outliers) + 120))
        page.add(_table(["worker", "step", "task:session", "status", "total", "× median", "phases", "unattributed"],
                        [[o["worker"], o["step"], f"{o['task_id']}:{o['session_id']}", o["status"],
                          fmt_s(o["total_s"]), fmt_x(o["x_median"]),
                          ", ".join(f"{k} {fmt_s(v)}" for k, v in sorted(o["phases_s"].items(), key=lambda kv: -kv[1])),
                          fmt_s(o["unattributed_s"])] for o in outliers], left=4))
    turns = view.get("turns")
    if turns:
        page.add(f"<h3>Turns ({_e(turns['phase'])} instances per session)</h3>")
        by_step = turns["by_step"]
        if len(by_step) > 1:
            fig = go.Figure()
            n_turns = sorted({int(t) for s in by_step for t in s["avg_s_by_turn"]})
            vals = [v for s in by_step for v in s["avg_s_by_turn"].values()]
            sc, un = _unit(vals)
            for t in n_turns:
                fig.add_scatter(x=[str(s["step"]) for s in by_step], mode="lines+markers", name=f"turn {t}",
                                y=[(s["avg_s_by_turn"].get(str(t)) or 0) * sc if str(t) in s["avg_s_by_turn"]
                                   else None for s in by_step])
            fig.update_layout(title=f"Average {turns['phase']} time per turn, per step", xaxis_title="step",
                              yaxis_title=un, xaxis_type="category")
            page.figure(fig)
            fig = go.Figure()
            counts = sorted({int(k) for s in by_step for k in s["share_by_turn_count"]})
            for k in counts:
                fig.add_bar(name=f"{k} turns", x=[str(s["step"]) for s in by_step],
                            y=[100 * s["share_by_turn_count"].get(str(k), 0.0) for s in by_step])
            fig.update_layout(title="Sessions by number of turns, per step", barmode="stack", xaxis_title="step",
                              yaxis_title="% of sessions", xaxis_type="category")
            page.figure(fig)
        btc = turns["by_turn_count"]
        sc, un = _unit([r["avg_s"] for r in btc])
        fig = go.Figure(go.Bar(x=[str(r["turns"]) for r in btc], y=[(r["avg_s"] or 0) * sc for r in btc],
                               text=[f"{r['count']:,} sessions" for r in btc], marker_color="#0ea5e9"))
        fig.update_layout(title="Average session time by number of turns", xaxis_title="turns", yaxis_title=un,
                          xaxis_type="category")
        page.figure(fig, 320)
        page.add(_table(["turn", "count", "avg", "p50", "p95", "max"],
                        [[r["turn"], f"{r['count']:,}", fmt_s(r["avg_s"]), fmt_s(r["p50_s"]), fmt_s(r["p95_s"]),
                          fmt_s(r["max_s"])] for r in turns["by_turn"]]))
    rl = view.get("response_length")
    if rl and rl["histogram"]["counts"]:
        edges = rl["histogram"]["edges"]
        fig = go.Figure(go.Bar(x=[(a + b) / 2 for a, b in zip(edges, edges[1:])], y=rl["histogram"]["counts"],
                               width=[b - a for a, b in zip(edges, edges[1:])], marker_color="#14b8a6"))
        corr = rl["correlation_with_duration"]
        fig.update_layout(title="Response length" + (f" (correlation with session time {corr:.2f})"
                                                     if corr is not None else ""),
                          xaxis_title="tokens", yaxis_title="sessions")
        page.figure(fig, 320)


def _lifecycle(page: _Page, view: dict[str, Any]) -> None:
    if not view["workers"]:
        return
    go = page.go
    page.section("lifecycle", "Session lifecycle")
    gantt = view["gantt"]
    rows = gantt["sessions"]
    if rows:
        if gantt["truncated"]:
            page.note(f"Gantt: the first {gantt['shown']:,} of {gantt['total']:,} sessions by submission "
                      "(--step picks a window; --gantt-limit raises the cap).")
        label = {}
        order = []
        for worker, lanes in gantt["lanes"].items():
            for lane in range(lanes):
                label[(worker, lane)] = f"{worker} · {lane}"
                order.append(label[(worker, lane)])
        sc, un = _unit([r["end_s"] for r in rows])
        fig = go.Figure()
        fig.add_bar(name="session", orientation="h", y=[label[(r["worker"], r["lane"])] for r in rows],
                    base=[r["start_s"] * sc for r in rows], x=[(r["end_s"] - r["start_s"]) * sc for r in rows],
                    marker_color="#e2e8f0", marker_line_color="#94a3b8", marker_line_width=0.5,
                    hovertext=[f"{r['task_id']}:{r['session_id']} {r['status']} step {r['step']}" for r in rows],
                    hoverinfo="text")
        phases = sorted({p[0] for r in rows for p in r["phases"]})
        for phase in phases:
            ys, bases, xs, texts = [], [], [], []
            for r in rows:
                for name, s, e in r["phases"]:
                    if name != phase:
                        continue
                    end = e if e is not None else r["end_s"]
                    ys.append(label[(r["worker"], r["lane"])])
                    bases.append(s * sc)
                    xs.append((end - s) * sc)
                    texts.append(f"{phase} {fmt_s(end - s)}" + (" (open)" if e is None else ""))
            fig.add_bar(name=phase, orientation="h", y=ys, base=bases, x=xs, marker_color=page.color(phase),
                        hovertext=texts, hoverinfo="text", width=0.6)
        fig.update_layout(title="Sessions per worker (lanes) with their phases; gaps are idle time",
                          barmode="overlay", xaxis_title=f"{un} since the first submission",
                          yaxis=dict(categoryorder="array", categoryarray=order[::-1], showticklabels=len(order) <= 80))
        page.figure(fig, min(1400, max(320, 14 * len(order) + 140)))
    workers = view["workers"]
    fig = go.Figure()
    fig.add_bar(name="busy", x=[w["worker"] for w in workers], y=[w["busy_s"] for w in workers], marker_color="#2563eb")
    fig.add_bar(name="idle", x=[w["worker"] for w in workers], y=[w["idle_s"] for w in workers], marker_color="#f87171")
    fig.update_layout(title="Busy and idle time per worker (idle = no session open)", barmode="stack", yaxis_title="s")
    page.figure(fig, 320)
    page.add(_table(["worker", "sessions", "window", "busy", "idle", "idle share", "max concurrent", "avg concurrent"],
                    [[w["worker"], f"{w['sessions']:,}", fmt_s(w["window_s"]), fmt_s(w["busy_s"]), fmt_s(w["idle_s"]),
                      fmt_pct(w["idle_share"]), w["max_concurrency"], f"{w['avg_concurrency']:.1f}"]
                     for w in workers]))
    hist = view["histogram"]
    if hist["counts"]:
        edges = hist["edges"]
        sc, un = _unit(edges)
        centers = [(a + b) / 2 * sc for a, b in zip(edges, edges[1:])]
        width = [(b - a) * sc for a, b in zip(edges, edges[1:])]
        fig = go.Figure()
        for status, counts in hist["by_status"].items():
            fig.add_bar(name=status, x=centers, y=counts, width=width,
                        marker_color=_STATUS_COLORS.get(status))
        clipped = hist.get("clipped_at_s")
        fig.update_layout(title="Session duration histogram by status" + (
            f" (the last bin holds everything from {fmt_s(clipped)})" if clipped else ""),
            barmode="stack", xaxis_title=un, yaxis_title="sessions")
        page.figure(fig, 340)
        by_step = view["histogram_by_step"]
        if len(by_step) > 1:
            fig = go.Figure(go.Heatmap(z=[s["counts"] for s in by_step], x=centers,
                                       y=[str(s["step"]) for s in by_step], colorscale="Blues",
                                       colorbar=dict(title="sessions")))
            fig.update_layout(title="Session duration histogram per step", xaxis_title=un, yaxis_title="step",
                              yaxis_type="category")
            page.figure(fig, min(900, max(300, 14 * len(by_step) + 140)))
    sc_view = view["scatter"]
    if sc_view["x_s"]:
        sy, uy = _unit(sc_view["total_s"])
        sx, ux = _unit(sc_view["x_s"])
        fig = go.Figure()
        for status in sorted(set(sc_view["status"])):
            idx = [i for i, s in enumerate(sc_view["status"]) if s == status]
            fig.add_scatter(x=[sc_view["x_s"][i] * sx for i in idx], y=[sc_view["total_s"][i] * sy for i in idx],
                            mode="markers", name=status, marker=dict(size=5, color=_STATUS_COLORS.get(status)),
                            hovertext=[f"{sc_view['worker'][i]} session {sc_view['session_id'][i]}" for i in idx])
        for q in ("p50", "p95"):
            value = sc_view[f"{q}_s"]
            if value is not None:
                fig.add_hline(y=value * sy, line_dash="dash", line_color="#475569",
                              annotation_text=f"{q} {fmt_s(value)}", annotation_position="top left")
        fig.update_layout(title="Session latency at finalization" + (
            f" ({sc_view['shown']:,} of {sc_view['total']:,}, the slowest included)"
            if sc_view["shown"] < sc_view["total"] else ""),
            xaxis_title=f"{ux} since the first submission", yaxis_title=f"session duration ({uy})")
        page.figure(fig)
    if view["open_sessions"]["count"]:
        page.add(f'<p class="warn">{view["open_sessions"]["count"]:,} sessions were never finalized (open).</p>')


def _timeline(page: _Page, view: dict[str, Any]) -> None:
    sessions = view["sessions"]
    requests = view["requests"]
    if not sessions and not requests:
        return
    go = page.go
    page.section("timeline", "Timelines")
    if sessions:
        page.note(f"{len(sessions)} of {view['sessions_total']:,} sessions "
                  f"({'the slowest' if view['selected'] == 'slowest' else view['selected']}); times relative to "
                  "submission (t_rel_ms).")
        shown = sessions[:40]
        fig = go.Figure()
        labels = [f"{t['worker']} {t['task_id']}:{t['session_id']}" for t in shown]
        fig.add_bar(name="session", orientation="h", y=labels, base=[0] * len(shown),
                    x=[t["total_ms"] or 0 for t in shown], marker_color="#e2e8f0")
        phase_bars: dict[str, tuple[list, list, list]] = {}
        for t, lab in zip(shown, labels):
            for e in t["events"]:
                if e["event"] == "phase" and e.get("duration_ms") is not None:
                    ys, bs, xs = phase_bars.setdefault(e["phase"], ([], [], []))
                    ys.append(lab)
                    bs.append(e["t_rel_ms"])
                    xs.append(e["duration_ms"])
        for phase, (ys, bs, xs) in sorted(phase_bars.items()):
            fig.add_bar(name=phase, orientation="h", y=ys, base=bs, x=xs, marker_color=page.color(phase), width=0.6)
        fig.update_layout(title="Session timelines", barmode="overlay", xaxis_title="ms after submission",
                          yaxis=dict(categoryorder="array", categoryarray=labels[::-1]))
        page.figure(fig, max(300, 22 * len(shown) + 120))
        for t in sessions:
            rows = []
            for e in t["events"]:
                rows.append([f"{e['t_rel_ms']:.3f}", describe_event(e),
                             "" if e.get("duration_ms") is None else f"{e['duration_ms']:.3f}"])
            page.add(f"<details><summary>session {_e(t['task_id'])}:{_e(t['session_id'])} — {_e(t['worker'])}, "
                     f"step {_e(t['step'])}, {_e(t['status'])}, {_e(fmt_ms(t['total_ms']))}</summary>"
                     + _table(["t_rel_ms", "event", "duration_ms"], rows, left=0) + "</details>")
    for t in requests:
        rows = [[f"{e['t_rel_ms']:.3f}", e["stage"], e["event_name"], e["pid"],
                 json.dumps(e["metadata"], default=str) if e["metadata"] else ""] for e in t["events"]]
        page.add(f"<details><summary>request {_e(t['request_id'])} — {_e(fmt_ms(t['total_ms']))}</summary>"
                 + _table(["t_rel_ms", "stage", "event", "pid", "metadata"], rows, left=0) + "</details>")


def _diagnostics(page: _Page, diag: dict[str, Any]) -> None:
    from ._model import Diagnostics

    messages = Diagnostics.from_dict(diag).messages()
    page.section("inputs", "Inputs")
    page.add(_table(["file", "kind", "items"], [[f["path"], f["kind"], f"{f['items']:,}"] for f in diag["files"]],
                    left=2))
    if diag["ignored"]:
        page.add(_table(["ignored file", "why"], [[i["path"], i["why"]] for i in diag["ignored"]], left=2))
    if messages:
        page.add("<h3>Problems</h3><ul>" + "".join(f'<li class="warn">{_e(m)}</li>' for m in messages) + "</ul>")


def render_html(doc: dict[str, Any]) -> str:
    """The page for a built report (see :func:`otel_rl.report.build`)."""
    page = _Page()
    if "summary" in doc:
        _summary(page, doc["summary"])
    if "training" in doc:
        _training(page, doc["training"])
    if "phases" in doc:
        _phases(page, doc["phases"])
    if "spans" in doc:
        _spans(page, doc["spans"])
    if "stages" in doc or "hops" in doc:
        _stages(page, doc.get("stages"), doc.get("hops"))
    if "timers" in doc:
        _timers(page, doc["timers"])
    if "longtail" in doc:
        _longtail(page, doc["longtail"])
    if "lifecycle" in doc:
        _lifecycle(page, doc["lifecycle"])
    if "timeline" in doc:
        _timeline(page, doc["timeline"])
    if "diagnostics" in doc:
        _diagnostics(page, doc["diagnostics"])
    inputs = ", ".join(doc.get("summary", {}).get("inputs", []))
    return page.html("otel_rl report", inputs)
