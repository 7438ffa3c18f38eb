"""Smoke test of the benchmark suite: ``python -m bench --quick`` runs and
reports every workload. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

from support import clean_env
from support.paths import ROOT as REPO_ROOT

ROOT = str(REPO_ROOT)


def test_bench_quick_runs_every_workload(tmp_path):
    sys.path.insert(0, ROOT)
    try:
        from bench import WORKLOAD_NAMES
    finally:
        sys.path.remove(ROOT)
    out = tmp_path / "b.json"
    env = clean_env(drop=("PYTEST_",))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--repeats", "1", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    data = json.loads(out.read_text())
    assert set(data["workloads"]) == set(WORKLOAD_NAMES)
    assert data["errors"] == {}
    for name, result in data["workloads"].items():
        assert result["rows"], f"{name} produced no table rows"
        assert result["samples"], f"{name} kept no raw samples"
