"""The demo end to end: real trainer and rollout worker processes, files read back."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from importlib.util import find_spec
from pathlib import Path

import pytest
from support import clean_env, read_jsonl, read_trace, slices
from support.perfetto import load_file, same_slices

needs_torch = pytest.mark.skipif(find_spec("torch") is None, reason="the demo needs torch")

TASKS, SAMPLES, STEPS, WORKERS = 2, 2, 2, 2
REJECT_REASONS = {"stale_weight", "truncated", "zero_advantage"}


def _env(**extra: str) -> dict[str, str]:
    return clean_env(NO_COLOR="1", COLUMNS="120", **extra)


def _demo(root: Path, *args: str, env: dict[str, str] | None = None,
          sizes: tuple[int, int, int] = (TASKS, SAMPLES, STEPS)) -> subprocess.CompletedProcess:
    tasks, samples, steps = sizes
    command = [sys.executable, "-m", "otel_rl.demo", "--tasks", str(tasks), "--samples", str(samples),
               "--steps", str(steps), "--workers", str(WORKERS), "--dir", str(root), *args]
    return subprocess.run(command, env=env or _env(), capture_output=True, text=True, timeout=180)


def _spans(path: Path) -> list[dict]:
    return slices(read_trace(path))


class Run:
    def __init__(self, result: subprocess.CompletedProcess, run_dir: Path) -> None:
        self.result = result
        self.run_dir = run_dir

    def sessions(self) -> list[dict]:
        return [r for path in sorted(self.run_dir.glob("sessions-*.jsonl")) for r in read_jsonl(path)]

    def trainer_spans(self) -> list[dict]:
        return _spans(self.run_dir / "traces-trainer-r0.jsonl")

    def rollout_spans(self) -> list[dict]:
        return [s for rank in range(WORKERS) for s in _spans(self.run_dir / f"traces-rollout-r{rank}.jsonl")]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One small demo run shared by the tests below (each reads its own aspect)."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("demo")
    result = _demo(root, "--trial", "t1")
    return Run(result, root / "demo" / "t1")


def test_demo_exits_zero(run: Run) -> None:
    assert run.result.returncode == 0, run.result.stderr


def test_trainer_and_every_rollout_worker_write_a_trace_file(run: Run) -> None:
    for name in ["traces-trainer-r0.jsonl"] + [f"traces-rollout-r{r}.jsonl" for r in range(WORKERS)]:
        assert _spans(run.run_dir / name), f"{name} has no spans"


def test_every_task_has_one_finalized_session_record_per_sample(run: Run) -> None:
    records = run.sessions()
    per_task = Counter(r["task_id"] for r in records)
    assert per_task == {task_id: SAMPLES for task_id in range(TASKS * STEPS)}
    assert {r["status"] for r in records} <= {"accepted", "rejected"}
    assert {r["role"] for r in records} == {"rollout"}
    assert {r["rank"] for r in records} == set(range(WORKERS))


def test_rejected_sessions_name_a_known_reason_and_accepted_ones_none(run: Run) -> None:
    records = run.sessions()
    assert records
    for record in records:
        if record["status"] == "rejected":
            assert record["reason"] in REJECT_REASONS
        else:
            assert record["reason"] is None


def test_every_session_generates_and_is_rewarded_and_some_call_the_tool(run: Run) -> None:
    records = run.sessions()
    for record in records:
        assert record["phase_counts"]["generate"] >= 1
        assert record["phase_counts"]["reward"] == 1
        # A tool call is always followed by another generate turn.
        assert record["phase_counts"]["generate"] == record["phase_counts"].get("toolcall", 0) + 1
    assert any(r["phase_counts"].get("toolcall", 0) for r in records)


def test_trainer_records_a_step_span_and_a_backward_pass_per_step(run: Run) -> None:
    spans = run.trainer_spans()
    assert sorted(s["args"]["rl.step"] for s in spans if s["name"] == "step") == list(range(STEPS))
    for name in ("trainer.train_step", "trainer.backward", "trainer.optimizer_step"):
        steps = {s["args"]["rl.step"] for s in spans if s["name"] == name}
        assert steps, f"no {name} span"
        assert all(s.get("cat") == "compute" for s in spans if s["name"] == name)


def test_worker_spans_join_the_trace_of_the_trainer_step_that_sent_the_request(run: Run) -> None:
    trainer = run.trainer_spans()
    # A root's trace id is its own span id, and its line leaves the trace out.
    step_traces = {s["args"].get("trace", s["args"]["id"]) for s in trainer if s["name"] == "step"}
    submits = {s["args"]["id"]: s for s in trainer if s["name"] == "rollout.submit"}
    batches = [s for s in run.rollout_spans() if s["name"] == "rollout.batch"]
    assert batches
    for batch in batches:
        parent = submits[batch["args"]["parent"]]
        assert batch["args"]["trace"] == parent["args"]["trace"]
        assert batch["args"]["trace"] in step_traces
        assert batch["args"]["rl.step"] == parent["args"]["rl.step"]
    updates = [s for s in run.rollout_spans() if s["name"] == "weight_sync"]
    trainer_updates = {s["args"]["id"]: s for s in trainer if s["name"] == "weight_sync"}
    assert len(updates) == WORKERS * (STEPS + 1)  # the initial weights, then one per step
    assert {u["args"]["parent"] for u in updates} == set(trainer_updates)
    for update in updates:  # each worker loads the version the trainer sent
        sent = trainer_updates[update["args"]["parent"]]["args"]
        assert (update["args"]["rl.weight_sync.role"], sent["rl.weight_sync.role"]) == ("recv", "send")
        assert update["args"]["rl.policy.version"] == sent["rl.policy.version"]


def test_trainer_exports_rollout_stats_once_per_step_matching_the_session_records(run: Run) -> None:
    rollout = [line for line in read_jsonl(run.run_dir / "stats-trainer-r0.jsonl") if line["tracker"] == "rollout"]
    assert [line["step"] for line in rollout] == list(range(STEPS))
    # Every step trains on TASKS x SAMPLES sessions, so the mean of the per-step
    # acceptance averages is the share of accepted session records.
    sessions = run.sessions()
    accepted_share = sum(r["status"] == "accepted" for r in sessions) / len(sessions)
    assert sum(line["values"]["rollout/accepted"] for line in rollout) / STEPS == pytest.approx(accepted_share)


def test_every_worker_records_engine_request_events_for_its_sessions(run: Run) -> None:
    files = sorted((run.run_dir / "events").glob("events_engine_*.jsonl"))
    assert len(files) == WORKERS
    events = [e for path in files for e in read_jsonl(path)]
    assert {tuple(e) for e in events} == {
        ("request_id", "stage", "event_name", "timestamp_ns", "run_id", "pid", "metadata")}
    sessions = {r["session_id"] for r in run.sessions()}
    admitted = [e for e in events if e["event_name"] == "stage_input_received"]
    assert {e["metadata"]["session_id"] for e in admitted} <= sessions  # each request names its session
    assert {e["event_name"] for e in events} >= {"stage_input_received", "scheduler_prefill_start",
                                                  "scheduler_first_emit", "stage_complete"}


def test_convert_merges_the_three_processes_into_one_perfetto_file(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    result = subprocess.run([sys.executable, "-m", "otel_rl.cli", "convert", str(run.run_dir), "-o", str(out)],
                            env=_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    events = read_trace(out)
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert names == {"[trainer] Rank 0, Process", "[rollout] Rank 0, Process", "[rollout] Rank 1, Process"}
    assert len({e["pid"] for e in events if e.get("ph") == "X"}) == 3


def test_summary_names_the_run_directory_and_what_it_left_there(run: Run) -> None:
    out = run.result.stdout
    assert f"run directory: {run.run_dir}" in out
    assert f"open in Perfetto: {run.run_dir / 'trace.json'}" in out
    assert "https://ui.perfetto.dev" in out
    report = "report.html" if find_spec("plotly") else "report.txt"
    assert f"{run.run_dir / report}" in out
    for heading in ("sessions by status", "phase durations", "training steps"):
        assert heading in out


def test_the_run_directory_holds_the_merged_trace_of_every_process(run: Run) -> None:
    events = read_trace(run.run_dir / "trace.json")
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert names == {"[trainer] Rank 0, Process", "[rollout] Rank 0, Process", "[rollout] Rank 1, Process"}


def test_the_run_directory_holds_the_native_trace_beside_the_json_one(run: Run) -> None:
    trace = load_file(run.run_dir / "trace.pftrace")
    assert same_slices(trace, read_trace(run.run_dir / "trace.json"))
    assert f"{run.run_dir / 'trace.pftrace'}" in run.result.stdout


def test_the_native_trace_is_well_over_twice_smaller_than_the_json_one(run: Run) -> None:
    assert (run.run_dir / "trace.json").stat().st_size >= 2.5 * (run.run_dir / "trace.pftrace").stat().st_size


def test_the_native_trace_has_a_row_per_session_and_an_arrow_from_each_task(run: Run) -> None:
    trace = load_file(run.run_dir / "trace.pftrace")
    rows = {(trace.process_of(s.track), trace.track_name(s.track)) for s in trace.by_name("session")}
    arrows = [(parent.name, child.name) for parent, child in trace.flows]
    assert len(rows) == TASKS * SAMPLES * STEPS
    assert arrows.count(("task", "session")) == TASKS * SAMPLES * STEPS


def test_the_run_directory_holds_a_report_with_the_phase_breakdown(run: Run) -> None:
    report = run.run_dir / ("report.html" if find_spec("plotly") else "report.txt")
    assert "generate" in report.read_text(encoding="utf-8")


def test_the_printed_commands_work_as_printed(run: Run, tmp_path: Path) -> None:
    import shlex

    line = next(line.strip() for line in run.result.stdout.splitlines()
                if line.strip().endswith("-o trace.json") and " convert " in line)
    words = shlex.split(line)  # run from the demo's working directory, only the output moved
    result = subprocess.run(words[:-1] + [str(tmp_path / "trace.json")], env=_env(), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    merged = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    original = read_trace(run.run_dir / "trace.json")
    # The merged trace already in the directory is not read again: no event twice.
    assert len([e for e in merged if e.get("ph") == "X"]) == len([e for e in original if e.get("ph") == "X"])


def test_the_warm_up_stays_before_the_trace_window(run: Run) -> None:
    names = {s["name"] for s in run.trainer_spans()}
    assert "trainer.sft_warmup" not in names and "step" in names


@needs_torch
def test_otlp_export_reaches_a_receiver_from_the_trainer_and_every_worker(http_receiver, tmp_path: Path) -> None:
    result = _demo(tmp_path, env=_env(OTEL_EXPORTER_OTLP_ENDPOINT=http_receiver.endpoint), sizes=(2, 2, 1))
    assert result.returncode == 0, result.stderr
    assert http_receiver.endpoint in result.stdout
    # Every process flushed before exiting, so everything has arrived by now.
    spans = http_receiver.wait_for_spans(1)
    processes = {(s["resource"]["rl.role"], s["resource"]["rl.rank"]) for s in spans}
    assert processes == {("trainer", 0)} | {("rollout", r) for r in range(WORKERS)}
    assert {s["name"] for s in spans} >= {"step", "session", "generate", "reward", "trainer.train_step"}


def test_an_out_of_range_flag_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "otel_rl.demo", "--workers", "0", "--dir", str(tmp_path)],
                            env=_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--workers" in result.stderr and "between 1 and 16" in result.stderr
    assert "Traceback" not in result.stderr


@needs_torch
def test_an_unwritable_directory_is_reported_without_a_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = subprocess.run([sys.executable, "-m", "otel_rl.demo", "--dir", str(blocker / "runs")],
                            env=_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "cannot write run files" in result.stderr
    assert "Traceback" not in result.stderr


def test_without_torch_the_demo_says_how_to_install_it() -> None:
    code = "import sys; sys.modules['torch'] = None; from otel_rl.demo import main; sys.exit(main([]))"
    result = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "pip install torch==2.13.0" in result.stderr
    assert "otel_rl[demo]" in result.stderr


@needs_torch
def test_a_bad_otel_rl_variable_is_reported_naming_it_without_a_traceback(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "otel_rl.demo", "--dir", str(tmp_path)],
                            env=_env(OTEL_RL_FLUSH_THRESHOLD="lots"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "OTEL_RL_FLUSH_THRESHOLD" in result.stderr
    assert "Traceback" not in result.stderr


def test_every_flow_in_the_merged_trace_pairs_and_the_trainer_points_at_each_worker(run: Run) -> None:
    events = read_trace(run.run_dir / "trace.json")
    starts = Counter(e["id"] for e in events if e.get("ph") == "s")
    ends = Counter(e["id"] for e in events if e.get("ph") == "f")
    assert ends and starts == ends and set(starts.values()) == {1}
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    start_pid = {e["id"]: e["pid"] for e in events if e.get("ph") == "s"}
    arrows = {(names[start_pid[e["id"]]], names[e["pid"]]) for e in events if e.get("ph") == "f"}
    assert {("[trainer] Rank 0, Process", f"[rollout] Rank {r}, Process") for r in range(WORKERS)} <= arrows


def test_the_report_counts_the_demos_steps_and_sessions_per_step(run: Run) -> None:
    from otel_rl import report

    data = report.load([str(run.run_dir)])
    per_step = Counter(s.step for s in data.sessions)
    assert per_step == {step: TASKS * SAMPLES for step in range(STEPS)}
    assert Counter(r["step"] for r in run.sessions()) == per_step


def test_the_summary_and_the_report_print_the_same_phase_percentiles(run: Run) -> None:
    from otel_rl import report

    rows = {r["phase"]: r for r in report.phase_breakdown(report.load([str(run.run_dir)]))["overall"]["rows"]}
    line = next(line.split() for line in run.result.stdout.splitlines() if line.split()[:1] == ["generate"])
    p50_ms, p95_ms = float(line[2]), float(line[3])
    assert (p50_ms, p95_ms) == (round(rows["generate"]["p50_s"] * 1000, 1), round(rows["generate"]["p95_s"] * 1000, 1))


def test_the_report_counts_each_engine_request_once_though_workers_reuse_ids(run: Run) -> None:
    from otel_rl import report

    data = report.load([str(run.run_dir)])
    generates = sum(len(r["phases"].get("generate", ())) for r in run.sessions())
    assert len(data.requests) == generates  # one engine request per generate turn
    ids = [rid for rid in data.requests if isinstance(rid, str) and "@" in rid]
    assert ids and {rid.split("@")[1] for rid in ids} == {f"rollout-r{r}" for r in range(WORKERS)}


def test_a_session_timeline_shows_only_its_own_workers_engineread_jsonl(run: Run) -> None:
    from otel_rl import report

    data = report.load([str(run.run_dir)])
    pid_of = {w: info["pid"] for w, info in data.workers.items()}
    view = report.timeline(data, limit=10_000)
    with_requests = [s for s in view["sessions"] if any("stage" in e for e in s["events"])]
    assert with_requests
    for session in with_requests:
        pids = {e.get("pid") for e in session["events"] if "stage" in e}
        assert pids == {pid_of[session["worker"]]}, session["worker"]
