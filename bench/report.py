"""The results table (``rich`` when installed, plain text otherwise)."""

from __future__ import annotations

import shutil
import sys
from typing import Any, TextIO

HEADERS = ("workload", "unit", "otel_rl", "SDK", "JSONL", "ratio vs SDK", "ratio vs JSONL", "target",
           "pass/fail")


def _num(value: float | None, fmt: str) -> str:
    if value is None:
        return "—"
    if fmt == "count":
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
    if fmt == "kib":
        return f"{value:,.0f}"
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if magnitude < 0.1:
        return f"{value:.4f}"
    if magnitude < 10:
        return f"{value:.3f}"
    if magnitude < 1000:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def cell(stats: dict[str, Any] | None, fmt: str) -> str:
    if not stats or stats.get("median") is None:
        return "—"
    text = _num(stats["median"], fmt)
    if stats.get("n", 1) > 1 and stats["min"] != stats["max"]:
        text += f" [{_num(stats['min'], fmt)}–{_num(stats['max'], fmt)}]"
    return text


def ratio_text(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def target_text(row: dict[str, Any]) -> str:
    parts = []
    for target in row.get("targets", []):
        measured = target.get("measured")
        if target["kind"] == "ratio":
            shown = "—" if measured is None else f"{measured:.2f}×"
        else:
            shown = "—" if measured is None else _num(measured, "count")
        parts.append(f"{target['text']} ({shown})")
    return "; ".join(parts) or row.get("ref") or "—"


def verdict(row: dict[str, Any]) -> str:
    if row.get("info_only") or not row.get("targets"):
        return "info"
    if row.get("passed") is None:
        return "n/a"
    return "PASS" if row["passed"] else "FAIL"


def table_rows(workloads: dict[str, dict[str, Any]]) -> list[list[str]]:
    out = []
    for result in workloads.values():
        for row in result.get("rows", []):
            fmt = row.get("fmt", "time")
            out.append([
                row["label"], row["unit"],
                cell(row["cells"].get("otel_rl"), fmt),
                cell(row["cells"].get("sdk"), fmt),
                cell(row["cells"].get("jsonl"), fmt),
                ratio_text(row.get("ratio_sdk")) if fmt != "count" else "—",
                ratio_text(row.get("ratio_jsonl")) if fmt != "count" else "—",
                target_text(row),
                verdict(row),
            ])
    return out


def print_table(workloads: dict[str, dict[str, Any]], title: str, caption: str,
                stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout
    rows = table_rows(workloads)
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:
        _plain(rows, title, caption, stream)
        return
    width = max(shutil.get_terminal_size((220, 40)).columns, 220)
    console = Console(file=stream, width=width)
    # Text objects: cells like "1.2 [1.1–1.3]" must not be read as rich markup.
    table = Table(title=Text(title, style="bold"), caption=Text(caption), show_lines=False,
                  header_style="bold")
    for i, header in enumerate(HEADERS):
        table.add_column(header, justify="left" if i in (0, 1, 7) else "right", overflow="fold")
    styles = {"PASS": "green", "FAIL": "bold red", "info": "dim", "n/a": "yellow"}
    for row in rows:
        result = row[-1]
        table.add_row(*(Text(value) for value in row[:-1]), Text(result, style=styles[result]))
    console.print(table)


def _plain(rows: list[list[str]], title: str, caption: str, stream: TextIO) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADERS)]

    def line(values: list[str] | tuple[str, ...]) -> str:
        return " | ".join(v.ljust(w) if i in (0, 1, 7) else v.rjust(w)
                          for i, (v, w) in enumerate(zip(values, widths)))

    stream.write(title + "\n")
    stream.write(line(HEADERS) + "\n")
    stream.write("-+-".join("-" * w for w in widths) + "\n")
    for row in rows:
        stream.write(line(row) + "\n")
    stream.write(caption + "\n")
