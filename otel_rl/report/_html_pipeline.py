"""The pipeline section of the HTML report: staleness, bubbles, weight syncs, counters, values vs latency."""

from __future__ import annotations

from typing import Any

from ._html_page import Page, html_table, seconds_unit
from ._table import fmt_num, fmt_pct, fmt_s


def _per_step(page: Page, rows: list[dict[str, Any]]) -> None:
    go = page.go
    steps = [str(r["step"]) for r in rows]
    values = sorted({k for r in rows for k in r["staleness"]["counts"]}, key=float)
    if values:
        fig = go.Figure()
        for v in values:
            fig.add_bar(name=f"staleness {v}", x=steps, y=[r["staleness"]["counts"].get(v, 0) for r in rows])
        fig.update_layout(title="Sessions consumed per step, by staleness (policy versions behind)",
                          barmode="stack", xaxis_title="step", yaxis_title="sessions")
        page.figure(fig)
    scale, unit = seconds_unit([max(r["duration_s"] or 0, r["trainer_wait_s"] or 0) for r in rows])
    fig = go.Figure()
    for key, label in (("duration_s", "step"), ("trainer_wait_s", "trainer waited for rollouts"),
                       ("weight_sync_s", "weights sent"), ("rollout_paused_s", "rollouts paused (all workers)")):
        fig.add_bar(name=label, x=steps, y=[(r[key] or 0) * scale for r in rows])
    fig.update_layout(title="Bubbles per step: the trainer waiting for rollouts, rollouts waiting for weights",
                      barmode="group", xaxis_title="step", yaxis_title=unit)
    page.figure(fig)
    fig = go.Figure()
    for q in ("p50", "p95", "max"):
        fig.add_scatter(name=f"age {q}", x=steps, y=[r["sample_age"][f"{q}_s"] for r in rows], mode="lines+markers")
    fig.update_layout(title="Sample age at consumption (its last phase's end -> consume)", xaxis_title="step",
                      yaxis_title="s")
    page.figure(fig)
    page.add(html_table(
        ["step", "consumed", "staleness mean", "max", "crossed update", "age p50", "age p95", "step", "trainer waited",
         "weights sent", "rollouts paused", "sessions/s"],
        [[r["step"], f"{r['consumed']:,}", fmt_num(r["staleness"]["mean"]), fmt_num(r["staleness"]["max"]),
          fmt_pct(r["crossed_update"]), fmt_s(r["sample_age"]["p50_s"]), fmt_s(r["sample_age"]["p95_s"]),
          fmt_s(r["duration_s"]), fmt_s(r["trainer_wait_s"]), fmt_s(r["weight_sync_s"]),
          fmt_s(r["rollout_paused_s"]), fmt_num(r["throughput_sps"])] for r in rows]))


def pipeline_section(page: Page, view: dict[str, Any]) -> None:
    """Adds the pipeline section (nothing when the run has no consume, weight sync, counter or annotation)."""
    rows = [r for r in view["steps"] if r["consumed"] or r["rollout_paused_s"] or r["trainer_wait_s"]]
    if not (rows or view["weight_syncs"] or view["counters"] or view["values_vs_latency"]):
        return
    go = page.go
    o = view["overall"]
    page.section("pipeline", "Pipeline: how rollouts fed training")
    page.note(f"{o['consumed']:,} sessions consumed ({o['consumed_unknown']:,} not in the records read), "
              f"{o['dropped_stale']:,} finalized as stale, {fmt_num(o['finalized_per_s'])} sessions finalized/s. "
              f"The trainer waited for rollouts {fmt_s(o['trainer_wait_s'])} ({fmt_pct(o['trainer_wait_share'])} "
              f"of its steps); rollouts were paused receiving weights {fmt_s(o['rollout_paused_s'])} "
              f"({fmt_pct(o['rollout_paused_share'])} of their time).")
    if rows:
        _per_step(page, rows)
    if view["weight_syncs"]:
        page.add(html_table(["worker", "role", "count", "total", "p50", "p95", "max"],
                            [[r["worker"], r["role"], f"{r['count']:,}", fmt_s(r["total_s"]), fmt_s(r["p50_s"]),
                              fmt_s(r["p95_s"]), fmt_s(r["max_s"])] for r in view["weight_syncs"]], left=2))
    if view["counters"]:
        fig = go.Figure()
        t0 = min(c["points"]["t"][0] for c in view["counters"])
        for c in view["counters"]:
            fig.add_scatter(name=f"{c['name']} · {c['worker']}", x=[t - t0 for t in c["points"]["t"]],
                            y=c["points"]["value"], mode="lines", line_shape="hv")
        fig.update_layout(title="Counters over time", xaxis_title="s from the first sample")
        page.figure(fig)
    for name, v in view["values_vs_latency"].items():
        fig = go.Figure(go.Scatter(x=v["points"]["latency_s"], y=v["points"]["value"], mode="markers",
                                   marker={"size": 5, "opacity": 0.6}))
        fig.update_layout(title=f"{name} vs session latency (pearson {fmt_num(v['pearson'])}, "
                                f"spearman {fmt_num(v['spearman'])})", xaxis_title="session latency (s)",
                          yaxis_title=name)
        page.figure(fig)
