"""The frame of the HTML report: page layout, styles, colours, tables and figure embedding.

plotly.js is inlined once in the page's head (``plotly.offline.get_plotlyjs``),
every figure is a ``<div>`` drawn by it, and nothing refers to a URL, so the
file opens offline, from disk or an e-mail attachment.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

#: Colours of phases, stable across figures (AReaL's palette for its three, then plotly's).
PHASE_COLORS = {"generate": "#2563eb", "toolcall": "#f59e0b", "reward": "#10b981",
                "(unattributed)": "#cbd5e1"}
PALETTE = ("#8b5cf6", "#ef4444", "#14b8a6", "#ec4899", "#84cc16", "#06b6d4", "#f97316", "#6366f1",
           "#a855f7", "#22c55e")
STATUS_COLORS = {"accepted": "#16a34a", "rejected": "#f59e0b", "failed": "#dc2626",
                 "dropped": "#6b7280", "pending": "#a855f7"}

CSS = """
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


def esc(value: Any) -> str:
    """``value`` as HTML text (``None`` as nothing)."""
    return html.escape("" if value is None else str(value))


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    """An HTML table; the first ``left`` columns are left-aligned (text)."""
    head = "".join(f'<th class="{"l" if i < left else ""}">{esc(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{esc(c)}</td>' for i, c in enumerate(row))
        + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Page:
    """The page being built: sections with their navigation links, notes, tables and figures."""

    def __init__(self) -> None:
        import plotly.graph_objects as go
        import plotly.io as pio

        self.go = go
        self.pio = pio
        self.parts: list[str] = []
        self.nav: list[tuple[str, str]] = []
        self._n = 0
        self._colors: dict[str, str] = dict(PHASE_COLORS)

    def color(self, phase: str) -> str:
        """The colour of ``phase``, the same in every figure of the page."""
        if phase not in self._colors:
            self._colors[phase] = PALETTE[(len(self._colors) - len(PHASE_COLORS)) % len(PALETTE)]
        return self._colors[phase]

    def section(self, anchor: str, title: str) -> None:
        """Starts a section (closing the previous one) and links it from the navigation bar."""
        if self.nav:
            self.parts.append("</section>")
        self.nav.append((anchor, title))
        self.parts.append(f'<section id="{anchor}"><h2>{esc(title)}</h2>')

    def add(self, text: str) -> None:
        """Appends HTML as it is."""
        self.parts.append(text)

    def note(self, text: str) -> None:
        """Appends a paragraph of explanatory text (escaped)."""
        self.parts.append(f'<p class="note">{esc(text)}</p>')

    def figure(self, fig: Any, height: int = 380) -> None:
        """Appends a plotly figure, in the page's layout, drawn by the plotly.js of the page's head."""
        self._n += 1
        fig.update_layout(height=height, margin=dict(l=60, r=20, t=76, b=50), template="plotly_white",
                          title=dict(y=0.99, yanchor="top", yref="container", x=0.01, xanchor="left"),
                          legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="left", x=0))
        # The figure was validated as it was built: written from its own data, not a deep copy
        # validated again (the same page, a third faster over a large run).
        self.parts.append('<div class="plot">' + self.pio.to_html(
            fig.to_plotly_json(), validate=False, full_html=False, include_plotlyjs=False,
            div_id=f"fig{self._n}", default_height=f"{height}px",
            config={"displaylogo": False, "responsive": True}) + "</div>")

    def html(self, title: str, subtitle: str) -> str:
        """The whole page, plotly.js inlined: one self-contained file."""
        from plotly.offline import get_plotlyjs

        if self.nav:
            self.parts.append("</section>")
        nav = "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in self.nav)
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><link rel=\"icon\" href=\"data:,\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<style>{CSS}</style>"
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            f"<header><h1>{esc(title)}</h1><div class=\"sub\">{esc(subtitle)}</div></header>"
            f"<nav>{nav}</nav><main>{''.join(self.parts)}</main></body></html>\n")


def seconds_unit(values: Sequence[float | None]) -> tuple[float, str]:
    """Scale and unit label for seconds on a plot axis."""
    vals = [abs(v) for v in values if v is not None]
    peak = max(vals) if vals else 0.0
    return (1e3, "ms") if peak < 1 else (1.0, "s")
