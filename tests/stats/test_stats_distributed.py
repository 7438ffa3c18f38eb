"""otel_rl.stats across real processes: torch.distributed (gloo, CPU), keys missing on some ranks.

Each rank records different keys (one has a key, a tracker and a denominator
the others lack; two record the same key with different kinds). Every rank
must get the same export, equal to what plain Python computes from all ranks'
raw inputs, and nothing may deadlock. A second scenario follows AReaL's
per-key ``reduce_group`` and ``key_sync_group`` (the Megatron engine's
data x context parallel export).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue as queue_module
import time

import pytest
from support import read_jsonl
from stats_dist_worker import group_worker, rank_data, worker

DEADLINE_S = 120


def _run(world, tmp_path, target=worker):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    init_file = tmp_path / "dist-init"
    extra = (str(tmp_path),) if target is worker else ()
    procs = [ctx.Process(target=target, args=(rank, world, str(init_file), *extra, results))
             for rank in range(world)]
    for proc in procs:
        proc.start()
    got = {}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < world:
            try:
                rank, everything, late, diagnostics = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue_module.Empty:
                pytest.fail(f"ranks {sorted(set(range(world)) - set(got))} did not finish within "
                            f"{DEADLINE_S}s: a collective deadlocked")
            assert everything != "error", f"rank {rank} failed:\n{late}"
            got[rank] = (everything, late, diagnostics)
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    return got


def _expected(world):
    """The export, from every rank's raw inputs, by hand."""
    data = [rank_data(rank) for rank in range(world)]
    tokens = []
    for one in data:
        for loss, mask in one["batches"]:
            for loss_row, mask_row in zip(loss, mask):
                for value, selected in zip(loss_row, mask_row):
                    if selected:
                        tokens.append(value)
    rewards = [r for one in data for r in one["reward"]]
    rollout = [r for one in data for r in one["rollout_reward"]]
    rare_values, rare_mask = data[0]["rare"]
    rare = [v for v, m in zip(rare_values, rare_mask) if m]
    acc = [0.5 * rank for rank in range(1, world)]
    return {
        "actor/n_valid": len(tokens),
        "actor/loss/avg": sum(tokens) / len(tokens),
        "actor/loss/min": min(tokens),
        "actor/loss/max": max(tokens),
        "actor/loss_sum": sum(tokens),
        "n_nan": 4 * world,
        "nan_loss/avg": math.nan,  # rank 1 recorded a NaN: as in AReaL, NaN everywhere
        "nan_loss/min": math.nan,
        "nan_loss/max": math.nan,
        "reward": sum(rewards) / len(rewards),
        "reward__count": len(rewards),
        "rollout/reward": sum(rollout) / len(rollout),
        "rollout/reward__count": len(rollout),
        "rare_mask": len(rare),
        "rare/avg": sum(rare) / len(rare),
        "rare/min": min(rare),
        "rare/max": max(rare),
        "only_r0": 7.0,
        "only_r0__count": 1,
        "eval-rollout/acc": sum(acc) / len(acc),
        "eval-rollout/acc__count": len(acc),
        "clash_d": 2.0,
    }


@pytest.mark.parametrize("world", [2, 3])
def test_export_all_reduces_over_gloo_ranks_with_missing_keys(world, tmp_path):
    got = _run(world, tmp_path)
    expected = _expected(world)
    first = got[0][0]
    for rank in range(world):
        everything, late, diagnostics = got[rank]
        assert everything.keys() == first.keys()
        assert [everything[k] for k in first] == pytest.approx(list(first.values()), nan_ok=True), \
            f"rank {rank} differs from rank 0"
        assert late == {"late": 2.0, "late__count": 1}
        assert diagnostics.get("stats_inconsistent_key") == 1  # `clash`, left out on every rank
    assert set(first) == set(expected)
    for key, value in expected.items():
        assert first[key] == pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True), key

    run_dir = tmp_path / "exp" / "dist"
    assert not any((run_dir / f"stats-r{rank}.jsonl").exists() for rank in range(1, world))
    lines = read_jsonl(run_dir / "stats-r0.jsonl")
    assert [(line["step"], line["tracker"]) for line in lines] == [
        (5, ""), (5, "eval-rollout"), (5, "rollout"), (6, "")]
    logged = {}
    for line in lines[:3]:
        logged.update(line["values"])
    # JSON has no NaN: the JSONL file holds null where the export holds NaN.
    assert logged == {k: (None if v != v else v) for k, v in first.items() if not k.endswith("__count")}
    assert os.path.getsize(run_dir / "stats-r0.jsonl") > 0


def test_per_key_reduce_groups_and_key_sync_group_as_areal_reduces_them(tmp_path):
    world = 2
    got = _run(world, tmp_path, target=group_worker)
    masks = [[i <= r for i in range(4)] for r in range(world)]
    selected = [i + 10 * r for r in range(world) for i in range(4) if masks[r][i]]
    mean_rank = sum(range(world)) / world
    for rank in range(world):
        out, _, diagnostics = got[rank]
        # Default keys over the rank's own data-parallel group, per-key ones over both ranks.
        assert out["synced"] == {
            "n_seqs": 2.0,
            "loss": mean_rank, "loss__count": world,
            "n_tokens": float(len(selected)),
            "vocab_min/avg": pytest.approx(sum(selected) / len(selected)),
            "vocab_min/min": float(min(selected)), "vocab_min/max": float(max(selected)),
            "only_last": 7.0,
        }, rank
        assert out["per_key"] == {"world_mean": mean_rank, "world_mean__count": world,
                                  "local": float(rank), "local__count": 1}, rank
        assert out["missing_sync"] == {"kept": mean_rank, "kept__count": world}, rank
        assert diagnostics.get("stats_key_sync_group_missing", 0) >= 1, rank
