#!/usr/bin/env python3
"""Regenerates the README's screenshots of the HTML report (``docs/report-*.png``).

    .venv/bin/python scripts/report_screenshots.py [--out docs] [--steps 4]

Runs the demo (``python -m otel_rl.demo``) into a temporary directory, renders its
``otel-rl report --format html`` and photographs sections of the page in headless
Chromium (``/usr/bin/chromium``, driven by playwright), each cut to its first
``--height`` pixels.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SECTIONS = ("phases", "longtail", "lifecycle", "timers")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--height", type=int, default=900)
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "otel_rl.demo", "--dir", tmp, "--trial", "shots",
                        "--steps", str(args.steps)], check=True, stdout=subprocess.DEVNULL)
        html = os.path.join(tmp, "report.html")
        subprocess.run([sys.executable, "-m", "otel_rl.report", os.path.join(tmp, "demo", "shots"),
                        "--format", "html", "--out", html, "--quiet"], check=True)
        os.makedirs(args.out, exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto("file://" + html, wait_until="load")
            page.add_style_tag(content="nav { display: none; } th { position: static; }")
            for section in SECTIONS:
                box = page.locator(f"section#{section}").bounding_box()
                if box is None:
                    continue
                page.evaluate(f"window.scrollTo(0, {box['y']} + window.scrollY)")
                box = page.locator(f"section#{section}").bounding_box()
                path = os.path.join(args.out, f"report-{section}.png")
                page.screenshot(path=path, full_page=True,
                                clip={"x": box["x"], "y": box["y"] + page.evaluate("window.scrollY"),
                                      "width": box["width"], "height": min(box["height"], args.height)})
                print(path)
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
