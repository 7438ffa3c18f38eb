"""One self-contained HTML page of a built report: plotly figures, tables, no network.

The page's frame (layout, styles, tables, figure embedding) is in
:mod:`._html_page`, the session-level sections in :mod:`._html_sessions`;
the run-level sections and the order of them all are here.
"""

from __future__ import annotations

from typing import Any

from ._html_page import Page, esc, html_table, seconds_unit
from ._html_pipeline import pipeline_section
from ._html_sessions import lifecycle_section, longtail_section, timeline_section
from ._table import count_nodes, fmt_ms, fmt_num, fmt_pct, fmt_s, tree_rows


def _summary(page: Page, s: dict[str, Any]) -> None:
    page.section("summary", "Summary")
    cards = [("sessions", f"{s['sessions']:,}"), ("finalized", f"{s['finalized']:,}"),
             ("workers", str(len(s["workers"]))), ("steps", str(len(s["steps"]))),
             ("spans", f"{s['spans']:,}"), ("duration", fmt_s(s["duration_s"]))]
    if s["requests"]:
        cards.append(("requests", f"{s['requests']:,}"))
    cards += [(k, f"{v:,}") for k, v in s["by_status"].items()]
    page.add('<div class="cards">' + "".join(
        f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
        for k, v in cards) + "</div>")
    page.add(html_table(["worker", "rank", "role", "pid", "process"],
                        [[w["worker"], w.get("rank"), w.get("role"), w.get("pid"), w.get("name")]
                         for w in s["workers"]], left=1))


def _training(page: Page, view: dict[str, Any]) -> None:
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
    page.add(html_table(["step", *view["keys"]],
                        [[r["step"], *(fmt_num(r["values"].get(k)) for k in view["keys"])] for r in rows]))


def _phases(page: Page, view: dict[str, Any]) -> None:
    group = view["overall"]
    if not group["rows"]:
        return
    go = page.go
    page.section("phases", "Phase breakdown")
    page.note(f"{group['sessions']:,} finalized sessions, {fmt_s(group['session_time_s'])} of session time. "
              "Share = phase time over session time (verl's event share); (unattributed) = session time "
              "in no phase (queueing, waiting).")
    rows = [r for r in group["rows"] if r["count"]]
    scale, unit = seconds_unit([r["p99_s"] for r in rows])
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
    page.add(html_table(["phase", "count", "open", "total", "avg", "p50", "p95", "p99", "max", "share", "avg share"],
                        [[r["phase"], f"{r['count']:,}", r["open"] or "", fmt_s(r["total_s"]), fmt_s(r["avg_s"]),
                          fmt_s(r["p50_s"]), fmt_s(r["p95_s"]), fmt_s(r["p99_s"]), fmt_s(r["max_s"]),
                          fmt_pct(r["share"]), fmt_pct(r["avg_share"])] for r in group["rows"]]))


def _spans(page: Page, view: dict[str, Any]) -> None:
    rows = view["overall"]
    if not rows:
        return
    go = page.go
    page.section("spans", "Spans by name")
    page.note("Scopes, trace_perf functions, steps and other spans (sessions, tasks and phases are in the "
              "phase breakdown). Self time excludes direct children.")
    top = sorted(rows, key=lambda r: -r["self_s"])[:20][::-1]
    scale, unit = seconds_unit([r["self_s"] for r in top])
    fig = go.Figure(go.Bar(x=[r["self_s"] * scale for r in top], y=[r["name"] for r in top],
                           orientation="h", marker_color="#6366f1"))
    fig.update_layout(title="Self time by span name (top 20)", xaxis_title=unit)
    page.figure(fig, max(300, 24 * len(top) + 100))
    page.add(html_table(["name", "category", "count", "total", "avg", "p50", "p95", "p99", "max", "self", "share"],
                        [[r["name"], r["category"] or "", f"{r['count']:,}", fmt_s(r["total_s"]), fmt_s(r["avg_s"]),
                          fmt_s(r["p50_s"]), fmt_s(r["p95_s"]), fmt_s(r["p99_s"]), fmt_s(r["max_s"]),
                          fmt_s(r["self_s"]), fmt_pct(r["share"])] for r in rows], left=2))


def _stages(page: Page, stages: dict[str, Any] | None, hops: dict[str, Any] | None) -> None:
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
        page.add(html_table(["stage", "interval", "count", "open", "total", "avg", "p50", "p95", "p99", "max", "share"],
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
        page.add(html_table(["source", "destination", "kind", "count", "unmatched", "total", "avg", "p50", "p95",
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
    return html_table(["block", "total", "count", "self", "of parent", "parallel"], rows)


def _timers(page: Page, view: dict[str, Any]) -> None:
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
            page.add(f"<details><summary>Timer tree of {esc(worker)}</summary>{_tree_table(wtree)}</details>")
    gauges = tree.get("gauges") or {}
    if gauges:
        page.add("<h3>Gauges</h3>" + html_table(["gauge", "value", "min", "max", "count"],
                                                [[k, f"{g['value']:g}", f"{g['min']:g}", f"{g['max']:g}", g["count"]]
                                                 for k, g in gauges.items()]))


def _diagnostics(page: Page, diag: dict[str, Any]) -> None:
    from ._model import Diagnostics

    messages = Diagnostics.from_dict(diag).messages()
    page.section("inputs", "Inputs")
    page.add(html_table(["file", "kind", "items"], [[f["path"], f["kind"], f"{f['items']:,}"] for f in diag["files"]],
                        left=2))
    if diag["ignored"]:
        page.add(html_table(["ignored file", "why"], [[i["path"], i["why"]] for i in diag["ignored"]], left=2))
    if messages:
        page.add("<h3>Problems</h3><ul>" + "".join(f'<li class="warn">{esc(m)}</li>' for m in messages) + "</ul>")


def render_html(doc: dict[str, Any]) -> str:
    """The page for a built report (see :func:`otel_rl.report.build`)."""
    page = Page()
    if "summary" in doc:
        _summary(page, doc["summary"])
    if "training" in doc:
        _training(page, doc["training"])
    if "pipeline" in doc:
        pipeline_section(page, doc["pipeline"])
    if "phases" in doc:
        _phases(page, doc["phases"])
    if "spans" in doc:
        _spans(page, doc["spans"])
    if "stages" in doc or "hops" in doc:
        _stages(page, doc.get("stages"), doc.get("hops"))
    if "timers" in doc:
        _timers(page, doc["timers"])
    if "longtail" in doc:
        longtail_section(page, doc["longtail"])
    if "lifecycle" in doc:
        lifecycle_section(page, doc["lifecycle"])
    if "timeline" in doc:
        timeline_section(page, doc["timeline"])
    if "diagnostics" in doc:
        _diagnostics(page, doc["diagnostics"])
    inputs = ", ".join(doc.get("summary", {}).get("inputs", []))
    return page.html("otel_rl report", inputs)
