"""Several real ranks write their own files, and the converter merges them onto one timeline."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest
from support import clean_env, read_trace

from otel_rl.convert import main as convert_main

# Each rank traces a scope, meets the others at a torch.distributed barrier
# (gloo), then traces a second scope: on one clock every "after" starts once
# every "before" has ended. The rank is not given to otel_rl: it comes from
# torch.distributed, which is initialised before configure().
RANK_SCRIPT = textwrap.dedent("""
    import sys, time
    import torch.distributed as dist
    import otel_rl
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    otel_rl.configure(role="trainer")
    with otel_rl.trace_scope("before_barrier"):
        time.sleep(0.05 * (rank + 1))
    dist.barrier()
    with otel_rl.trace_scope("after_barrier"):
        time.sleep(0.01)
    otel_rl.shutdown()
    dist.destroy_process_group()
    print(otel_rl.settings().rank)
""")

WORLD = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    """Runs WORLD ranks, converts their run directory; returns (printed ranks, trace events, run dir)."""
    pytest.importorskip("torch.distributed")
    root = tmp_path_factory.mktemp("ranks")
    env = clean_env(OTEL_RL_DIR=str(root), OTEL_RL_EXPERIMENT="exp", OTEL_RL_TRIAL="t1")
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(rank), str(WORLD), port], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(WORLD)]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    for proc, (_, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
    out = root / "trace.json"
    assert convert_main([str(root / "exp" / "t1"), "-o", str(out)]) == 0
    return [int(stdout) for stdout, _ in outputs], read_trace(out), root / "exp" / "t1"


def merged_root(merged):
    return merged[2]


def test_each_rank_takes_its_rank_from_torch_distributed(merged):
    ranks = merged[0]
    assert ranks == list(range(WORLD))


def test_each_rank_writes_its_own_trace_file(merged):
    run_dir = merged_root(merged)
    assert sorted(p.name for p in run_dir.glob("traces-*.jsonl")) == [
        f"traces-trainer-r{rank}.jsonl" for rank in range(WORLD)]


def test_the_merged_trace_names_one_process_per_rank(merged):
    events = merged[1]
    names = [e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"]
    assert sorted(names) == [f"[trainer] Rank {rank}, Process" for rank in range(WORLD)]


def test_merged_ranks_share_one_clock(merged):
    events = merged[1]
    spans = [e for e in events if e.get("ph") == "X"]
    before = [e for e in spans if e["name"] == "before_barrier"]
    after = [e for e in spans if e["name"] == "after_barrier"]
    assert len({e["pid"] for e in before}) == WORLD and len({e["pid"] for e in after}) == WORLD
    last_before_end = max(e["ts"] + e["dur"] for e in before)
    assert all(e["ts"] >= last_before_end - 1000 for e in after)  # 1 ms of clock-read slack
