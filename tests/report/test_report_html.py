"""The HTML report in a real browser: headless Chromium, offline, no console errors, plots drawn.

Needs Chromium at /usr/bin/chromium (``apt-get install chromium``; CI installs it
in ``.ci/run``) and the ``playwright`` package (the ``test`` extra). Set
``OTEL_RL_REPORT_SCREENSHOTS=DIR`` to also save a screenshot of every section.
"""

from __future__ import annotations

import json
import os

import pytest
import report_workload

from otel_rl import report

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")


@pytest.fixture(scope="module")
def html_file(tmp_path_factory):
    run = report_workload.two_rank_run(str(tmp_path_factory.getbasetemp() / "report-run"))
    directory = tmp_path_factory.mktemp("html")
    # Request events of a two-stage server next to the run: the stage and hop views get data too.
    events = directory / "events_thinker_7.jsonl"
    with open(events, "w") as f:
        for rid in range(5):
            t = 1_717_000_000_000_000_000 + rid * 50_000_000
            for name, dt, md in (("stage_input_received", 0, {"from_stage": "coordinator"}),
                                 ("scheduler_prefill_start", 2, {}), ("scheduler_first_emit", 9 + rid, {}),
                                 ("stage_hop_sent", 12 + rid, {"to_stage": "talker"}),
                                 ("stage_complete", 13 + rid, {})):
                f.write(json.dumps({"request_id": f"req-{rid}", "stage": "thinker", "event_name": name,
                                    "timestamp_ns": t + dt * 1_000_000, "run_id": "r", "pid": 7,
                                    "metadata": md}) + "\n")
            f.write(json.dumps({"request_id": f"req-{rid}", "stage": "talker", "event_name": "stage_input_received",
                                "timestamp_ns": t + (15 + rid) * 1_000_000, "run_id": "r", "pid": 8,
                                "metadata": {"from_stage": "thinker"}}) + "\n")
    path = directory / "report.html"
    path.write_text(report.render_html(report.build(report.load([run, str(events)]))), encoding="utf-8")
    return path


def test_the_report_renders_offline_without_errors(html_file):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")
    url = html_file.as_uri()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            problems: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(url, wait_until="load")
            page.wait_for_function("window.Plotly !== undefined")
            plots = page.evaluate("""() => Array.from(document.querySelectorAll('.plotly-graph-div')).map(d => ({
                id: d.id,
                section: d.closest('section').id,
                svg: d.querySelectorAll('.main-svg').length,
                traces: (d.data || []).length,
                drawn: d.querySelectorAll('.trace, .iciclelayer path, .heatmaplayer image').length,
                title: (d.layout && d.layout.title && d.layout.title.text) || ''}))""")
            sections = page.evaluate("Array.from(document.querySelectorAll('section')).map(s => s.id)")
            shots = os.environ.get("OTEL_RL_REPORT_SCREENSHOTS")
            if shots:
                os.makedirs(shots, exist_ok=True)
                for section in sections:
                    page.locator(f"section#{section}").screenshot(path=os.path.join(shots, f"report-{section}.png"))
        finally:
            browser.close()
    assert problems == []
    assert requests == [url]  # the file itself and nothing else
    assert sections == ["summary", "pipeline", "phases", "spans", "stages", "timers", "longtail", "lifecycle", "timeline",
                        "inputs"]
    assert len(plots) >= 15
    for plot in plots:
        assert plot["svg"] >= 1 and plot["traces"] >= 1 and plot["drawn"] >= 1, plot
    titles = " | ".join(p["title"] for p in plots)
    for expected in ("Phase duration percentiles", "Share of session time per phase, per step", "Stage intervals",
                     "Hops", "Merged timer tree", "Completion-time CDF per step", "Per-worker CDF",
                     "Slowest sessions", "Sessions per worker (lanes)", "Session duration histogram by status",
                     "Session latency at finalization", "Session timelines",
                     "Sessions consumed per step, by staleness", "Bubbles per step", "Sample age at consumption",
                     "Counters over time", "advantage vs session latency"):
        assert expected in titles, expected
