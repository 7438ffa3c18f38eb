"""Terminal rendering of a built report with rich tables."""

from __future__ import annotations

import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .timeline import describe_event


#: Rows printed per table in the terminal (JSON and HTML have them all).
MAX_ROWS = 25
#: Timelines printed in the terminal.
MAX_TIMELINES = 3
#: Timer tree nodes printed.
MAX_TREE_NODES = 60


def fmt_s(value: Any) -> str:
    """Seconds, in the unit that reads best (``1.23 s``, ``45.6 ms``, ``12 µs``)."""
    if value is None:
        return "-"
    v = float(value)
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f} s"
    if a >= 1:
        return f"{v:.2f} s"
    if a >= 1e-3:
        return f"{v * 1e3:.1f} ms"
    if a == 0:
        return "0"
    return f"{v * 1e6:.0f} µs"


def fmt_ms(value: Any) -> str:
    return "-" if value is None else fmt_s(float(value) / 1e3)


def fmt_pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}%"


def fmt_x(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}×"


def _table(title: str, *columns: str, right: tuple[int, ...] = (), wrap: tuple[int, ...] = ()) -> Table:
    """A table whose first column (a name) never wraps, unless it is listed in ``wrap``."""
    table = Table(title=title, title_justify="left", title_style="bold", header_style="bold cyan")
    for i, col in enumerate(columns):
        table.add_column(col, justify="right" if i in right else "left", overflow="fold",
                         no_wrap=i == 0 and i not in wrap)
    return table


def _more(console: Console, shown: int, total: int, what: str) -> None:
    if total > shown:
        console.print(f"  ... {total - shown} more {what} (all of them in --format json / html)",
                      style="dim")


def _summary(console: Console, s: dict[str, Any]) -> None:
    def when(ts: Any) -> str:
        if ts is None:
            return "-"
        return datetime.datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")

    table = _table("otel_rl report", "", "", wrap=(1,))
    table.show_header = False
    table.add_row("inputs", ", ".join(s["inputs"]))
    status = ", ".join(f"{k} {v:,}" for k, v in s["by_status"].items())
    table.add_row("sessions", f"{s['sessions']:,}" + (f" ({status})" if status else "")
                  + (f"; {s['open']:,} never finalized" if s["open"] else ""))
    table.add_row("workers", ", ".join(w["worker"] for w in s["workers"]) or "-")
    steps = s["steps"]
    table.add_row("steps", (f"{len(steps)}: {steps[0]} .. {steps[-1]}" if len(steps) > 3
                            else ", ".join(map(str, steps))) if steps else "-")
    table.add_row("spans", f"{s['spans']:,}")
    if s["requests"]:
        table.add_row("requests", f"{s['requests']:,} ({s['request_events']:,} events)")
    table.add_row("time", f"{when(s['start_ts'])} .. {when(s['end_ts'])} ({fmt_s(s['duration_s'])})")
    filters = s["filters"]
    if filters["steps"] is not None or filters["ranks"] is not None:
        table.add_row("filters", f"steps {filters['steps'] or 'all'}, ranks {filters['ranks'] or 'all'}")
    console.print(table)


def _training(console: Console, view: dict[str, Any]) -> None:
    keys = view["headline"]
    if not view["rows"] or not keys:
        return
    table = _table("Training per step (otel_rl.stats)", "step", *keys, right=tuple(range(1, len(keys) + 1)))
    for row in view["rows"][:MAX_ROWS]:
        values = row["values"]
        table.add_row(str(row["step"]), *(fmt_num(values.get(k)) for k in keys))
    console.print(table)
    _more(console, min(len(view["rows"]), MAX_ROWS), len(view["rows"]), "steps")


def _pipeline(console: Console, view: dict[str, Any]) -> None:
    o = view["overall"]
    rows = [r for r in view["steps"] if r["consumed"] or r["rollout_paused_s"] or r["trainer_wait_s"]]
    if rows:
        table = _table("Pipeline per step (consume, weight_sync)", "step", "consumed", "staleness mean / max",
                       "crossed update", "age p50", "age p95", "step", "trainer waited", "weights sent",
                       "rollouts paused", "sessions/s", right=tuple(range(1, 11)))
        for r in rows[:MAX_ROWS]:
            st, age = r["staleness"], r["sample_age"]
            table.add_row(str(r["step"]), f"{r['consumed']:,}",
                          "-" if st["mean"] is None else f"{st['mean']:.2f} / {st['max']:g}",
                          fmt_pct(r["crossed_update"]), fmt_s(age["p50_s"]), fmt_s(age["p95_s"]),
                          fmt_s(r["duration_s"]), fmt_s(r["trainer_wait_s"]), fmt_s(r["weight_sync_s"]),
                          fmt_s(r["rollout_paused_s"]), fmt_num(r["throughput_sps"]))
        console.print(table)
        _more(console, min(len(rows), MAX_ROWS), len(rows), "steps")
        spread = ", ".join(f"{k}: {n:,}" for k, n in o["staleness"]["counts"].items())
        console.print(f"  {o['consumed']:,} sessions consumed ({o['consumed_unknown']:,} not in the records read); "
                      f"staleness {spread or '-'}; {o['dropped_stale']:,} finalized as stale; "
                      f"{fmt_num(o['finalized_per_s'])} sessions finalized/s", style="dim")
        console.print(f"  bubbles: the trainer waited for rollouts {fmt_s(o['trainer_wait_s'])} "
                      f"({fmt_pct(o['trainer_wait_share'])} of its steps); rollouts were paused receiving weights "
                      f"{fmt_s(o['rollout_paused_s'])} ({fmt_pct(o['rollout_paused_share'])} of their time)",
                      style="dim")
    if view["weight_syncs"]:
        table = _table("Weight syncs per worker", "worker", "role", "count", "total", "p50", "max",
                       right=(2, 3, 4, 5))
        for r in view["weight_syncs"][:MAX_ROWS]:
            table.add_row(r["worker"], r["role"], f"{r['count']:,}", fmt_s(r["total_s"]), fmt_s(r["p50_s"]),
                          fmt_s(r["max_s"]))
        console.print(table)
    if view["counters"]:
        table = _table("Counters on the timeline", "counter", "worker", "samples", "min", "mean", "max", "last",
                       right=(2, 3, 4, 5, 6))
        for c in view["counters"][:MAX_ROWS]:
            table.add_row(c["name"], c["worker"], f"{c['count']:,}", fmt_num(c["min"]), fmt_num(c["mean"]),
                          fmt_num(c["max"]), fmt_num(c["last"]))
        console.print(table)
        _more(console, min(len(view["counters"]), MAX_ROWS), len(view["counters"]), "counters")
    if view["values_vs_latency"]:
        table = _table("Annotated values vs session latency (mean per latency fifth, fastest first)", "value",
                       "sessions", "pearson", "spearman", "means", right=(1, 2, 3))
        for name, v in list(view["values_vs_latency"].items())[:MAX_ROWS]:
            table.add_row(name, f"{v['count']:,}", fmt_num(v["pearson"]), fmt_num(v["spearman"]),
                          "  ".join(fmt_num(g["mean"]) for g in v["by_latency"]))
        console.print(table)


def fmt_num(value: Any) -> str:
    """A statistic: 4 significant digits, ``-`` when missing."""
    return "-" if value is None else f"{value:.4g}"


def _phases(console: Console, view: dict[str, Any]) -> None:
    group = view["overall"]
    if not group["rows"]:
        return
    table = _table(f"Phase breakdown ({group['sessions']:,} finalized sessions, "
                   f"{fmt_s(group['session_time_s'])} of session time)",
                   "phase", "count", "open", "total", "avg", "p50", "p95", "p99", "max", "share",
                   "avg share", right=tuple(range(1, 11)))
    for r in group["rows"]:
        table.add_row(r["phase"], f"{r['count']:,}", str(r["open"] or ""), fmt_s(r["total_s"]),
                      fmt_s(r["avg_s"]), fmt_s(r["p50_s"]), fmt_s(r["p95_s"]), fmt_s(r["p99_s"]),
                      fmt_s(r["max_s"]), fmt_pct(r["share"]), fmt_pct(r["avg_share"]))
    s = group["session"]
    if s["count"]:
        table.add_row(Text("session (submit → finalize)", style="italic"), f"{s['count']:,}", "",
                      fmt_s(s["total_s"]), fmt_s(s["avg_s"]), fmt_s(s["p50_s"]), fmt_s(s["p95_s"]),
                      fmt_s(s["p99_s"]), fmt_s(s["max_s"]), "", "")
    console.print(table)
    steps = view["by_step"]
    if len(steps) > 1:
        phases = [r["phase"] for r in group["rows"]]
        table = _table("Share of session time per phase, per step", "step", "sessions", "p50", "p95",
                       *phases, right=tuple(range(1, 4 + len(phases))))
        for g in steps[:MAX_ROWS]:
            share = {r["phase"]: r["share"] for r in g["rows"]}
            table.add_row(str(g["step"]), f"{g['sessions']:,}", fmt_s(g["session"]["p50_s"]),
                          fmt_s(g["session"]["p95_s"]), *(fmt_pct(share.get(p)) for p in phases))
        console.print(table)
        _more(console, min(len(steps), MAX_ROWS), len(steps), "steps")


def _spans(console: Console, view: dict[str, Any]) -> None:
    rows = view["overall"]
    if not rows:
        return
    table = _table("Spans by name (scopes, steps; self = without children)", "name", "category",
                   "count", "total", "avg", "p50", "p95", "p99", "max", "self", "self share",
                   right=tuple(range(2, 11)))
    for r in rows[:MAX_ROWS]:
        table.add_row(r["name"], r["category"] or "", f"{r['count']:,}", fmt_s(r["total_s"]),
                      fmt_s(r["avg_s"]), fmt_s(r["p50_s"]), fmt_s(r["p95_s"]), fmt_s(r["p99_s"]),
                      fmt_s(r["max_s"]), fmt_s(r["self_s"]), fmt_pct(r["share"]))
    console.print(table)
    _more(console, min(len(rows), MAX_ROWS), len(rows), "span names")


def _stages(console: Console, view: dict[str, Any]) -> None:
    rows = view["rows"]
    if not rows:
        return
    table = _table(f"Stage breakdown ({view['requests']:,} requests)", "stage", "interval", "count",
                   "open", "total", "avg", "p50", "p95", "p99", "max", "share of stage",
                   right=tuple(range(2, 11)))
    for r in rows[:MAX_ROWS]:
        table.add_row(r["stage"], r["interval"], f"{r['count']:,}", str(r["open"] or ""),
                      fmt_ms(r["total_ms"]), fmt_ms(r["avg_ms"]), fmt_ms(r["p50_ms"]), fmt_ms(r["p95_ms"]),
                      fmt_ms(r["p99_ms"]), fmt_ms(r["max_ms"]), fmt_pct(r["share"]))
    console.print(table)
    _more(console, min(len(rows), MAX_ROWS), len(rows), "stage intervals")


def _hops(console: Console, view: dict[str, Any]) -> None:
    rows = view["rows"]
    if not rows:
        return
    table = _table("Hop breakdown", "source", "destination", "kind", "count", "unmatched", "total",
                   "avg", "p50", "p95", "p99", "max", right=tuple(range(3, 11)))
    for r in rows[:MAX_ROWS]:
        table.add_row(r["src"], r["dst"], r["kind"], f"{r['count']:,}", str(r["unmatched"] or ""),
                      fmt_ms(r["total_ms"]), fmt_ms(r["avg_ms"]), fmt_ms(r["p50_ms"]), fmt_ms(r["p95_ms"]),
                      fmt_ms(r["p99_ms"]), fmt_ms(r["max_ms"]))
    console.print(table)
    _more(console, min(len(rows), MAX_ROWS), len(rows), "hops")


def tree_rows(tree: dict[str, Any], limit: int = MAX_TREE_NODES) -> list[tuple[int, str, dict[str, Any]]]:
    """``(depth, name, node)`` of a timer tree, children by total time, the first ``limit``."""
    out: list[tuple[int, str, dict[str, Any]]] = []

    def walk(node: dict[str, Any], name: str, depth: int) -> None:
        if len(out) >= limit:
            return
        out.append((depth, name, node))
        for child_name, child in sorted((node.get("children") or {}).items(),
                                        key=lambda kv: -kv[1]["total"]):
            walk(child, child_name, depth + 1)

    walk(tree, "root", 0)
    return out


def count_nodes(tree: dict[str, Any]) -> int:
    return 1 + sum(count_nodes(c) for c in (tree.get("children") or {}).values())


def _timers(console: Console, view: dict[str, Any]) -> None:
    tree = view["merged"]
    if not tree.get("children"):
        return
    workers = list(view["workers"])
    table = _table(f"Timer tree (ML-Agents format) merged over {len(workers)} worker(s)", "block",
                   "total", "count", "self", "of parent", "parallel", right=(1, 2, 3, 4))
    rows = tree_rows(tree)
    parents: list[float] = []
    for depth, name, node in rows:
        del parents[depth:]
        parent_total = parents[-1] if parents else None
        parents.append(node["total"])
        table.add_row("  " * depth + name, fmt_s(node["total"]), f"{node['count']:,}", fmt_s(node["self"]),
                      fmt_pct(node["total"] / parent_total) if parent_total else "",
                      "yes" if node.get("is_parallel") else "")
    console.print(table)
    _more(console, len(rows), count_nodes(tree), "timer nodes")
    gauges = tree.get("gauges") or {}
    if gauges:
        table = _table("Gauges", "gauge", "value", "min", "max", "count", right=(1, 2, 3, 4))
        for name, g in gauges.items():
            table.add_row(name, f"{g['value']:g}", f"{g['min']:g}", f"{g['max']:g}", f"{g['count']:,}")
        console.print(table)


def _longtail(console: Console, view: dict[str, Any]) -> None:
    steps = view["steps"]
    if not steps:
        return
    qs = ("p50", "p80", "p90", "p95", "p99", "p99.9")
    table = _table(f"Long tail per step: completion time after the step's first submission "
                   f"(straggler threshold {view['threshold']:g}×)", "step", "sessions", "span",
                   *qs, "p80 at", "done at 50%", "tail share", "slowest worker",
                   right=tuple(range(1, 12)))
    for sv in steps[:MAX_ROWS]:
        slow = sv["slowest_worker"]
        slow_text = f"{slow['worker']} {fmt_x(slow['ratio'])}" if slow["ratio"] is not None else slow["worker"]
        finished = {f["fraction"]: f["share"] for f in sv["finished_by_fraction"]}
        step = "all" if sv["step"] is None else str(sv["step"])
        if sv.get("straggler"):
            step += " ⚠"
        table.add_row(step, f"{sv['sessions']:,}", fmt_s(sv["span_s"]),
                      *(fmt_s(sv["completion_s"][q]) for q in qs),
                      fmt_pct(sv["completion_fraction"]["p80"]), fmt_pct(finished.get(0.5)),
                      fmt_pct(sv["tail_share"]), slow_text)
    console.print(table)
    _more(console, min(len(steps), MAX_ROWS), len(steps), "steps")
    if view["stragglers"]:
        table = _table("Stragglers", "kind", "step", "worker", "time", "median of others", "ratio",
                       right=(3, 4, 5))
        for s in view["stragglers"][:MAX_ROWS]:
            table.add_row(s["kind"], str(s["step"]), s["worker"] or "", fmt_s(s["value_s"]),
                          fmt_s(s["median_s"]), fmt_x(s["ratio"]))
        console.print(table)
        _more(console, min(len(view["stragglers"]), MAX_ROWS), len(view["stragglers"]), "stragglers")
    if len(view["workers"]) > 1:
        table = _table("Sessions per worker", "worker", "sessions", "avg", "p50", "p95", "p99", "max",
                       "slowest in steps", "straggler steps", right=tuple(range(1, 9)))
        for w in view["workers"][:MAX_ROWS]:
            table.add_row(w["worker"], f"{w['count']:,}", fmt_s(w["avg_s"]), fmt_s(w["p50_s"]),
                          fmt_s(w["p95_s"]), fmt_s(w["p99_s"]), fmt_s(w["max_s"]),
                          str(w["slowest_in_steps"]), str(w["straggler_steps"]))
        console.print(table)
    if view["outliers"]:
        table = _table("Slowest sessions (outliers) and where their time went", "worker", "step",
                       "task:session", "status", "total", "× median", "phases", "unattributed",
                       right=(4, 5, 7), wrap=(6,))
        for o in view["outliers"]:
            phases = ", ".join(f"{k} {fmt_s(v)}" for k, v in sorted(o["phases_s"].items(),
                                                                       key=lambda kv: -kv[1]))
            if o["open_phases"]:
                phases += f" (+{o['open_phases']} open)"
            table.add_row(o["worker"], str(o["step"]), f"{o['task_id']}:{o['session_id']}", o["status"],
                          fmt_s(o["total_s"]), fmt_x(o["x_median"]), phases, fmt_s(o["unattributed_s"]))
        console.print(table)
    turns = view.get("turns")
    if turns:
        table = _table(f"Turns ({turns['phase']} instances per session)", "turns", "sessions", "share",
                       "avg session", "p50 session", "p95 session", right=(1, 2, 3, 4, 5))
        dist = {d["turns"]: d for d in turns["count_distribution"]}
        for r in turns["by_turn_count"]:
            d = dist[r["turns"]]
            table.add_row(str(r["turns"]), f"{d['sessions']:,}", fmt_pct(d["share"]), fmt_s(r["avg_s"]),
                          fmt_s(r["p50_s"]), fmt_s(r["p95_s"]))
        console.print(table)
        table = _table(f"{turns['phase']} time per turn", "turn", "count", "avg", "p50", "p95", "max",
                       right=(1, 2, 3, 4, 5))
        for r in turns["by_turn"]:
            table.add_row(str(r["turn"]), f"{r['count']:,}", fmt_s(r["avg_s"]), fmt_s(r["p50_s"]),
                          fmt_s(r["p95_s"]), fmt_s(r["max_s"]))
        console.print(table)
    rl = view.get("response_length")
    if rl:
        corr = rl["correlation_with_duration"]
        table = _table("Response length (tokens)" + (f"; correlation with session time {corr:.2f}"
                                                      if corr is not None else ""),
                       "sessions", "avg", "p50", "p95", "p99", "max", right=tuple(range(6)))
        table.add_row(f"{rl['sessions']:,}", *(f"{rl[k]:,.1f}" if rl[k] is not None else "-"
                                                for k in ("avg_tokens", "p50_tokens", "p95_tokens",
                                                          "p99_tokens", "max_tokens")))
        console.print(table)


def _bar(count: int, peak: int, width: int = 30) -> str:
    if not peak:
        return ""
    full = count * width / peak
    return "█" * int(full) + ("▌" if full - int(full) >= 0.5 else "")


def _lifecycle(console: Console, view: dict[str, Any]) -> None:
    if view["workers"]:
        table = _table("Session lifecycle per worker (idle = no session open)", "worker", "sessions",
                       "window", "busy", "idle", "idle share", "max concurrent", "avg concurrent",
                       "longest gap", right=tuple(range(1, 9)))
        for w in view["workers"][:MAX_ROWS]:
            gap = w["longest_gaps"][0] if w["longest_gaps"] else None
            table.add_row(w["worker"], f"{w['sessions']:,}", fmt_s(w["window_s"]), fmt_s(w["busy_s"]),
                          fmt_s(w["idle_s"]), fmt_pct(w["idle_share"]), str(w["max_concurrency"]),
                          f"{w['avg_concurrency']:.1f}",
                          f"{fmt_s(gap['duration_s'])} at +{fmt_s(gap['at_s'])}" if gap else "-")
        console.print(table)
    hist = view["histogram"]
    if hist["counts"]:
        counts = hist["counts"]
        edges = hist["edges"]
        # Merge bins pairwise so the terminal histogram stays short.
        group = max(1, len(counts) // 12)
        table = _table("Session duration histogram", "duration", "sessions", "", right=(1,))
        merged = [(edges[i], edges[min(i + group, len(edges) - 1)], sum(counts[i:i + group]))
                  for i in range(0, len(counts), group)]
        peak = max(c for _, _, c in merged)
        for lo, hi, c in merged:
            table.add_row(f"{fmt_s(lo)} – {fmt_s(hi)}", f"{c:,}", _bar(c, peak))
        console.print(table)
        sc = view["scatter"]
        console.print(f"  session duration p50 {fmt_s(sc['p50_s'])}, p95 {fmt_s(sc['p95_s'])}")
    if view["open_sessions"]["count"]:
        console.print(f"  {view['open_sessions']['count']:,} sessions were never finalized (open): "
                      + ", ".join(f"{e['worker']} {e['task_id']}:{e['session_id']}"
                                  for e in view["open_sessions"]["examples"][:5]), style="yellow")


def _timeline(console: Console, view: dict[str, Any]) -> None:
    sessions = view["sessions"][:MAX_TIMELINES]
    for tl in sessions:
        total = fmt_ms(tl["total_ms"])
        table = _table(f"Timeline of session {tl['task_id']}:{tl['session_id']} ({tl['worker']}, step "
                       f"{tl['step']}, {tl['status']}, {total})", "t_rel", "event", "duration",
                       right=(0, 2))
        for e in tl["events"]:
            # Text, not markup: "[worker]" in an event is what it says, not a rich style tag.
            table.add_row(fmt_ms(e["t_rel_ms"]), Text(describe_event(e)),
                          fmt_ms(e.get("duration_ms")) if "duration_ms" in e else "")
        console.print(table)
    if view["sessions"]:
        shown = len(sessions)
        console.print(f"  {shown} of {view['sessions_total']:,} session timelines shown "
                      f"({'slowest' if view['selected'] == 'slowest' else view['selected']}); "
                      "--session ID picks one, --format html shows them all", style="dim")
    for tl in view["requests"][:MAX_TIMELINES]:
        table = _table(f"Timeline of request {tl['request_id']} ({fmt_ms(tl['total_ms'])})", "t_rel_ms",
                       "stage", "event", right=(0,))
        for e in tl["events"]:
            table.add_row(f"{e['t_rel_ms']:.3f}", e["stage"], e["event_name"])
        console.print(table)


def render_table(doc: dict[str, Any], console: Console | None = None) -> None:
    """Prints every view of a built report that has data."""
    console = console or Console()
    sections = (("summary", _summary), ("training", _training), ("pipeline", _pipeline), ("phases", _phases), ("spans", _spans), ("stages", _stages),
                ("hops", _hops), ("timers", _timers), ("longtail", _longtail),
                ("lifecycle", _lifecycle), ("timeline", _timeline))
    for key, render in sections:
        if key in doc:
            render(console, doc[key])
