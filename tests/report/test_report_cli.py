"""``otel-rl report`` end to end, as a user runs it: real subprocesses over a real two-rank run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import report_workload
from hostile_files import gzip_bomb, run_measured

from otel_rl import report


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return report_workload.two_rank_run(str(tmp_path_factory.getbasetemp() / "report-run"))


def cli(*args, module="otel_rl.report"):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RANK"))}
    env["COLUMNS"] = "200"
    prefix = [sys.executable, "-m", module] + (["report"] if module == "otel_rl.cli" else [])
    return subprocess.run(prefix + [str(a) for a in args], capture_output=True, text=True, timeout=120, env=env)


def _without_time(doc):
    doc = dict(doc)
    doc.pop("generated_at")
    return doc


def test_json_output_is_the_api_report(run, tmp_path):
    out = tmp_path / "r.json"
    result = cli(run, "--format", "json", "--out", out)
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    expected = json.loads(json.dumps(report.build(report.load(run)), default=str))
    assert _without_time(doc) == _without_time(expected)
    assert "36 sessions" in result.stderr
    # Standard output when there is no --out.
    result = cli(run, "--format", "json", "--view", "summary,phases", module="otel_rl.cli")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"generator", "generated_at", "summary", "phases", "diagnostics"}


def test_table_output_shows_every_view(run):
    result = cli(run, module="otel_rl.cli")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for title in ("otel_rl report", "Phase breakdown", "Share of session time per phase, per step",
                  "Spans by name", "Timer tree (ML-Agents format) merged over 2 worker(s)", "Gauges",
                  "Long tail per step", "Stragglers", "Sessions per worker", "Slowest sessions",
                  "Turns (generate instances per session)", "Response length",
                  "Session lifecycle per worker", "Session duration histogram", "Timeline of session"):
        assert title in text, title
    summary = report.summary(report.load(run))
    assert re.search(rf"sessions\s+│\s+{summary['sessions']} \(", text)
    assert "rollout-r1" in text and "compute_loss" in text


def test_html_output_is_one_self_contained_file(run, tmp_path):
    out = tmp_path / "sub" / "report.html"
    result = cli(run, "-f", "html", "-o", out)
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stderr
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>")
    markup = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.S)  # plotly.js's own strings aside
    assert not re.search(r"""(src|href)=["'](https?:)?//""", markup)  # nothing fetched from anywhere
    assert "<script src" not in html and "<link rel=\"stylesheet\"" not in html
    assert html.count('class="plotly-graph-div"') == html.count("Plotly.newPlot(") >= 10
    assert len(html) > 3_000_000  # plotly.js is inlined
    for anchor in ("summary", "phases", "spans", "timers", "longtail", "lifecycle", "timeline", "inputs"):
        assert f'<section id="{anchor}">' in html


def test_step_and_rank_options_filter_the_report(run, tmp_path):
    out = tmp_path / "r.json"
    result = cli(run, "-f", "json", "-o", out, "--step", "1-2", "--rank", "rollout-r1", "--outliers", "3",
                 "--straggler-threshold", "2.5", "--session", "rollout-r1:0:0")
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"]["filters"] == {"steps": [1, 2], "ranks": ["rollout-r1"]}
    assert doc["summary"]["steps"] == [1, 2]
    assert [w["worker"] for w in doc["summary"]["workers"]] == ["rollout-r1"]
    assert len(doc["longtail"]["outliers"]) == 3 and doc["longtail"]["threshold"] == 2.5
    assert doc["timeline"]["selected"] == "ids" and doc["timeline"]["sessions"] == []  # session 0 is in step 0


def test_nothing_readable_exits_1_and_names_the_input(tmp_path):
    result = cli(tmp_path / "missing")
    assert result.returncode == 1
    assert f"warning: {tmp_path / 'missing'}: no such file or directory" in result.stderr
    assert "nothing to report" in result.stderr
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics-r0.jsonl").write_text('{"resource_metrics": []}\n')
    result = cli(tmp_path / "empty")
    assert result.returncode == 1
    assert "1 file(s) found, none holding sessions, spans or request events" in result.stderr


def test_bad_lines_warn_with_file_and_line_and_the_report_goes_on(run, tmp_path):
    src = os.path.join(run, "sessions-rollout-r0.jsonl")
    lines = open(src).read().splitlines()
    bad = tmp_path / "sessions-rollout-r0.jsonl"
    bad.write_text("\n".join(lines[:2] + ["garbage"] + lines[2:]) + "\n" + lines[3][:40])
    out = tmp_path / "r.json"
    result = cli(bad, "-f", "json", "-o", out)
    assert result.returncode == 0, result.stderr
    assert f"warning: {bad}:3: malformed line skipped" in result.stderr
    assert f"warning: {bad}:{len(lines) + 2}: incomplete last line skipped" in result.stderr
    assert json.loads(out.read_text())["summary"]["sessions"] == len(lines)
    quiet = cli(bad, "-f", "json", "-o", out, "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_a_bad_command_line_is_a_usage_error(run):
    result = cli(run, "--step", "two")
    assert result.returncode == 2 and "not a step" in result.stderr
    result = cli(run, "--view", "everything")
    assert result.returncode == 2 and "unknown view" in result.stderr
    result = cli("--help", module="otel_rl.cli")
    assert result.returncode == 0 and "--straggler-threshold" in result.stdout


def test_a_small_gzip_holding_a_256_mib_line_is_reported_on_in_bounded_memory(tmp_path):
    record = {"task_id": 1, "session_id": 2, "submit_ts": 1.0, "finalized_ts": 2.0, "status": "accepted"}
    bomb = gzip_bomb(tmp_path / "sessions-r0.jsonl.gz", before=[record])
    out = tmp_path / "r.json"

    status, peak_mib, err = run_measured("otel_rl.report", [str(bomb), "-f", "json", "-o", str(out)])

    assert status == 0, err
    assert peak_mib < 300, f"peak RSS {peak_mib:.0f} MiB"
    assert json.loads(out.read_text())["summary"]["sessions"] == 1
    assert f"warning: {bomb}: read only in part: stopped after 64 MiB" in err and "--max-gzip-ratio" in err


def test_a_line_over_the_line_bound_is_skipped_and_the_bound_is_a_flag(run, tmp_path):
    src = os.path.join(run, "sessions-rollout-r0.jsonl")
    lines = open(src).read().splitlines()
    record = json.loads(lines[0])
    record["reason"] = "x" * (2 << 20)
    path = tmp_path / "sessions-rollout-r0.jsonl"
    path.write_text("\n".join([json.dumps(record)] + lines[1:]) + "\n")
    out = tmp_path / "r.json"

    result = cli(path, "-f", "json", "-o", out, "--max-line-mb", "1")

    assert result.returncode == 0, result.stderr
    assert f"warning: {path}:1: malformed line skipped: line of {len(json.dumps(record)):,} bytes, " \
           "over the bound of 1 MiB (--max-line-mb)" in result.stderr
    assert json.loads(out.read_text())["summary"]["sessions"] == len(lines) - 1
    result = cli(path, "-f", "json", "-o", out, "--max-line-mb", "3")
    assert result.returncode == 0 and "malformed" not in result.stderr
    assert json.loads(out.read_text())["summary"]["sessions"] == len(lines)
    assert cli(path, "--max-line-mb", "0").returncode == 2


def test_a_step_filter_that_matches_nothing_says_so_and_fails(run):
    result = cli(run, "--step", "999")
    assert result.returncode == 1
    assert "--step 999: no session or span of those steps" in result.stderr


def test_a_session_id_that_matches_nothing_says_so(run, tmp_path):
    result = cli(run, "--session", "no-such-session", "--view", "timeline", "--format", "json",
                 "--out", str(tmp_path / "r.json"))
    assert result.returncode == 0, result.stderr
    assert "--session no-such-session: no such session" in result.stderr
