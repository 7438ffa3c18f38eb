"""Session-level sections of the HTML report: long tail, lifecycle and timelines."""

from __future__ import annotations

import json
from typing import Any

from ._html_page import STATUS_COLORS, Page, esc, html_table, seconds_unit
from ._table import fmt_ms, fmt_pct, fmt_s, fmt_x
from .timeline import describe_event

#: Steps drawn as separate CDF curves (the slowest ones when there are more).
MAX_CDF_STEPS = 12


def longtail_section(page: Page, view: dict[str, Any]) -> None:
    """The long-tail section: completion-time CDFs, stragglers, slowest sessions, turns."""
    steps = view["steps"]
    if not steps:
        return
    go = page.go
    page.section("longtail", "Long tail")
    page.note(f"Completion time of each session after its step's first submission. Stragglers: beyond "
              f"{view['threshold']:g}× the median of the other workers (or steps).")
    shown = steps if len(steps) <= MAX_CDF_STEPS else sorted(steps, key=lambda s: -s["span_s"])[:MAX_CDF_STEPS]
    scale, unit = seconds_unit([s["span_s"] for s in shown])
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
        sc, un = seconds_unit([focus["span_s"]])
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
    page.add(html_table(["step", "sessions", "span", *qs, "p80 at", "done at 50%", "tail share", "slowest worker",
                         "× others", "step straggler"],
                        [[sv["step"], f"{sv['sessions']:,}", fmt_s(sv["span_s"]),
                          *(fmt_s(sv["completion_s"][q]) for q in qs), fmt_pct(sv["completion_fraction"]["p80"]),
                          fmt_pct(next(f["share"] for f in sv["finished_by_fraction"] if f["fraction"] == 0.5)),
                          fmt_pct(sv["tail_share"]), sv["slowest_worker"]["worker"],
                          fmt_x(sv["slowest_worker"]["ratio"]), "yes" if sv.get("straggler") else ""]
                         for sv in steps]))
    if view["stragglers"]:
        page.add("<h3>Stragglers</h3>" + html_table(
            ["kind", "step", "worker", "time", "median of others", "ratio"],
            [[s["kind"], s["step"], s["worker"] or "", fmt_s(s["value_s"]), fmt_s(s["median_s"]), fmt_x(s["ratio"])]
             for s in view["stragglers"]], left=3))
    if view["workers"]:
        page.add("<h3>Sessions per worker</h3>" + html_table(
            ["worker", "sessions", "avg", "p50", "p95", "p99", "max", "slowest in steps", "straggler steps"],
            [[w["worker"], f"{w['count']:,}", fmt_s(w["avg_s"]), fmt_s(w["p50_s"]), fmt_s(w["p95_s"]),
              fmt_s(w["p99_s"]), fmt_s(w["max_s"]), w["slowest_in_steps"], w["straggler_steps"]]
             for w in view["workers"]]))
    outliers = view["outliers"]
    if outliers:
        labels = [f"{o['worker']} {o['task_id']}:{o['session_id']}" for o in outliers][::-1]
        phases = sorted({p for o in outliers for p in o["phases_s"]})
        sc, un = seconds_unit([o["total_s"] for o in outliers])
        fig = go.Figure()
        for phase in phases + ["(unattributed)"]:
            vals = [(o["phases_s"].get(phase, 0.0) if phase != "(unattributed)" else o["unattributed_s"]) * sc
                    for o in outliers][::-1]
            fig.add_bar(name=phase, y=labels, x=vals, orientation="h", marker_color=page.color(phase))
        fig.update_layout(title="Slowest sessions: time per phase", barmode="stack", xaxis_title=un)
        page.figure(fig, max(300, 26 * len(outliers) + 120))
        page.add(html_table(["worker", "step", "task:session", "status", "total", "× median", "phases", "unattributed"],
                            [[o["worker"], o["step"], f"{o['task_id']}:{o['session_id']}", o["status"],
                              fmt_s(o["total_s"]), fmt_x(o["x_median"]),
                              ", ".join(f"{k} {fmt_s(v)}" for k, v in sorted(o["phases_s"].items(), key=lambda kv: -kv[1])),
                              fmt_s(o["unattributed_s"])] for o in outliers], left=4))
    turns = view.get("turns")
    if turns:
        page.add(f"<h3>Turns ({esc(turns['phase'])} instances per session)</h3>")
        by_step = turns["by_step"]
        if len(by_step) > 1:
            fig = go.Figure()
            n_turns = sorted({int(t) for s in by_step for t in s["avg_s_by_turn"]})
            vals = [v for s in by_step for v in s["avg_s_by_turn"].values()]
            sc, un = seconds_unit(vals)
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
        sc, un = seconds_unit([r["avg_s"] for r in btc])
        fig = go.Figure(go.Bar(x=[str(r["turns"]) for r in btc], y=[(r["avg_s"] or 0) * sc for r in btc],
                               text=[f"{r['count']:,} sessions" for r in btc], marker_color="#0ea5e9"))
        fig.update_layout(title="Average session time by number of turns", xaxis_title="turns", yaxis_title=un,
                          xaxis_type="category")
        page.figure(fig, 320)
        page.add(html_table(["turn", "count", "avg", "p50", "p95", "max"],
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


def lifecycle_section(page: Page, view: dict[str, Any]) -> None:
    """The session lifecycle section: Gantt lanes, busy and idle time, durations, latency."""
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
        sc, un = seconds_unit([r["end_s"] for r in rows])
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
    page.add(html_table(["worker", "sessions", "window", "busy", "idle", "idle share", "max concurrent", "avg concurrent"],
                        [[w["worker"], f"{w['sessions']:,}", fmt_s(w["window_s"]), fmt_s(w["busy_s"]), fmt_s(w["idle_s"]),
                          fmt_pct(w["idle_share"]), w["max_concurrency"], f"{w['avg_concurrency']:.1f}"]
                         for w in workers]))
    hist = view["histogram"]
    if hist["counts"]:
        edges = hist["edges"]
        sc, un = seconds_unit(edges)
        centers = [(a + b) / 2 * sc for a, b in zip(edges, edges[1:])]
        width = [(b - a) * sc for a, b in zip(edges, edges[1:])]
        fig = go.Figure()
        for status, counts in hist["by_status"].items():
            fig.add_bar(name=status, x=centers, y=counts, width=width,
                        marker_color=STATUS_COLORS.get(status))
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
        sy, uy = seconds_unit(sc_view["total_s"])
        sx, ux = seconds_unit(sc_view["x_s"])
        fig = go.Figure()
        for status in sorted(set(sc_view["status"])):
            idx = [i for i, s in enumerate(sc_view["status"]) if s == status]
            fig.add_scatter(x=[sc_view["x_s"][i] * sx for i in idx], y=[sc_view["total_s"][i] * sy for i in idx],
                            mode="markers", name=status, marker=dict(size=5, color=STATUS_COLORS.get(status)),
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


def timeline_section(page: Page, view: dict[str, Any]) -> None:
    """The timelines section: the chosen sessions and requests event by event."""
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
            page.add(f"<details><summary>session {esc(t['task_id'])}:{esc(t['session_id'])} — {esc(t['worker'])}, "
                     f"step {esc(t['step'])}, {esc(t['status'])}, {esc(fmt_ms(t['total_ms']))}</summary>"
                     + html_table(["t_rel_ms", "event", "duration_ms"], rows, left=0) + "</details>")
    for t in requests:
        rows = [[f"{e['t_rel_ms']:.3f}", e["stage"], e["event_name"], e["pid"],
                 json.dumps(e["metadata"], default=str) if e["metadata"] else ""] for e in t["events"]]
        page.add(f"<details><summary>request {esc(t['request_id'])} — {esc(fmt_ms(t['total_ms']))}</summary>"
                 + html_table(["t_rel_ms", "stage", "event", "pid", "metadata"], rows, left=0) + "</details>")
