"""Smoke test of the benchmark suite: ``python -m bench --quick`` runs and
reports every workload. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import clean_env
from support.paths import ROOT as REPO_ROOT

ROOT = str(REPO_ROOT)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> dict:
    """The JSON of one ``python -m bench --quick --repeats 1`` run (every workload)."""
    out = tmp_path_factory.mktemp("bench") / "b.json"
    env = clean_env(drop=("PYTEST_",))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--repeats", "1", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


def test_bench_quick_runs_every_workload(quick_run):
    sys.path.insert(0, ROOT)
    try:
        from bench import WORKLOAD_NAMES
    finally:
        sys.path.remove(ROOT)
    data = quick_run
    assert set(data["workloads"]) == set(WORKLOAD_NAMES)
    assert data["errors"] == {}
    for name, result in data["workloads"].items():
        assert result["rows"], f"{name} produced no table rows"
        assert result["samples"], f"{name} kept no raw samples"


def test_the_session_total_is_also_measured_with_the_exporter_in_its_steady_state(quick_run):
    rows = quick_run["workloads"]["total_cpu"]["rows"]
    steady = [row for row in rows if row["label"].strip().startswith("same, exporter in its steady state")]
    assert len(steady) == 1
    assert steady[0]["sources"]["otel_rl"] == "otel_rl_steady"
    assert steady[0]["cells"]["otel_rl"]["median"] > 0 and steady[0]["cells"]["jsonl"]["median"] > 0


# A module with the call forms the bench reads from AReaL's perf_tracer: a dataclass under
# postponed annotations, as AReaL's (which looks its module up in sys.modules while the module
# loads), a tracer of scopes that saves JSON lines, and a request tracer of events.
_AREAL_LIKE = '''
from __future__ import annotations

import dataclasses, enum, json, os, time

@dataclasses.dataclass
class _Event:
    name: str
    ts: float

class RequestTraceEvent(str, enum.Enum):
    ENQUEUED = "enqueued"
    EXECUTION_START = "execution_start"
    EXECUTION_END = "execution_end"
    CONSUMED = "consumed"
    GENERATE_START = "generate_start"
    GENERATE_END = "generate_end"
    REWARD_START = "reward_start"
    REWARD_END = "reward_end"

class _Requests:
    def __init__(self):
        self.events = {}
    def register_submission(self):
        rid = len(self.events)
        self.events[rid] = []
        return rid
    def record_event(self, rid, event, **payload):
        self.events[rid].append((event.value, time.perf_counter(), payload))

class _Scope:
    def __init__(self, tracer, name):
        self.tracer, self.name = tracer, name
    def __enter__(self):
        self.start = time.perf_counter()
    def __exit__(self, *exc):
        self.tracer.events.append(_Event(self.name, self.start))

class PerfTracer:
    def __init__(self, config, rank):
        self.root = os.path.join(config.fileroot, str(rank))
        self.events = []
        self.request_tracer = _Requests() if config.request_tracer else None
    def trace_scope(self, name):
        return _Scope(self, name)
    def save(self, force=False):
        os.makedirs(self.root, exist_ok=True)
        with open(os.path.join(self.root, "traces.jsonl"), "a") as f:
            for event in self.events:
                f.write(json.dumps(dataclasses.asdict(event)) + "\\n")
        self.events = []
'''


def test_bench_measures_an_areal_module_given_by_path(tmp_path):
    module = tmp_path / "perf_tracer.py"
    module.write_text(_AREAL_LIKE)
    out = tmp_path / "b.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--repeats", "1", "--only", "total_cpu,bytes",
         "--areal", str(module), "--out", str(out)],
        cwd=ROOT, env=clean_env(drop=("PYTEST_",)), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert "AReaL figures skipped" not in proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    labels = [row["label"].strip() for name in ("total_cpu", "bytes") for row in data["workloads"][name]["rows"]]
    assert {"AReaL perf_tracer: total CPU per scope", "AReaL perf_tracer: total CPU per session",
            "AReaL perf_tracer: trace-file bytes per scope"} <= set(labels)


def _profile_exporter(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.profile_exporter", *args],
        cwd=ROOT, env=clean_env(drop=("PYTEST_",)), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_the_exporter_replay_kept_in_a_file_replays_every_captured_span(tmp_path):
    # A capture kept once and replayed (as under callgrind) gives the spans it captured, and
    # --empty the replay of none: the two runs whose difference is the exporter's work.
    kept = tmp_path / "cap.pickle"
    _profile_exporter("--workload", "marked", "--spans", "1300", "--save", str(kept))
    replayed = _profile_exporter("--load", str(kept), "--repeats", "1")
    spans = int(replayed.split("spans=")[1].split()[0])
    assert spans >= 1200
    assert "no batch" in _profile_exporter("--load", str(kept), "--repeats", "1", "--empty")
