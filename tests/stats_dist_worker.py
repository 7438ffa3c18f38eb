"""One rank of the multi-process otel_rl.stats test (spawned; kept free of pytest imports).

``rank_data(rank)`` is what a rank records; the test recomputes the expected
export from it with plain Python.
"""

from __future__ import annotations

import datetime
import os
import traceback


def rank_data(rank: int) -> dict:
    import torch

    gen = torch.Generator().manual_seed(100 + rank)
    batches = []
    for _ in range(2 if rank == 0 else 1):
        loss = torch.randn(3, 5, generator=gen) * 2
        mask = torch.rand(3, 5, generator=gen) < 0.5
        mask[0, 0] = True
        batches.append((loss, mask))
    if rank == 1:
        batches[0][0][0, 0] = float("nan")  # excluded from the statistics, counted
    data = {
        "batches": [(loss.tolist(), mask.tolist()) for loss, mask in batches],
        "reward": torch.rand(rank + 2, generator=gen).tolist(),
        "rollout_reward": torch.rand(rank + 1, generator=gen).tolist(),
    }
    if rank == 0:
        rare = torch.randn(4, generator=gen)
        data["rare"] = (rare.tolist(), [True, False, True, True])
    return data


def _record(rank: int, data: dict) -> None:
    import torch

    from otel_rl import stats

    with stats.scope("actor"):
        for loss, mask in data["batches"]:
            stats.denominator(n_valid=torch.tensor(mask))
            stats.stat(loss=torch.tensor(loss), denominator="n_valid")
            stats.stat(loss_sum=torch.tensor(loss), denominator="n_valid", reduce_type=stats.ReduceType.SUM)
    for r in data["reward"]:
        stats.scalar(reward=r)
    for r in data["rollout_reward"]:
        stats.get("rollout").scalar(reward=r)
    if "rare" in data:  # keys and a tracker that only some ranks have
        values, mask = data["rare"]
        stats.denominator(rare_mask=torch.tensor(mask))
        stats.stat(rare=torch.tensor(values), denominator="rare_mask")
        stats.scalar(only_r0=7.0)
    else:
        stats.get("eval-rollout").scalar(acc=0.5 * rank)
    if rank == 0:
        stats.scalar(clash=1.0)
    elif rank == 1:  # the same key as a tensor stat: cannot be combined, left out everywhere
        stats.denominator(clash_d=torch.ones(2, dtype=torch.bool))
        stats.stat(clash=torch.ones(2), denominator="clash_d")


def worker(rank: int, world: int, init_file: str, fileroot: str, queue) -> None:
    try:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        import torch.distributed as dist

        import otel_rl
        from otel_rl import stats

        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        otel_rl.configure(fileroot=fileroot, experiment_name="exp", trial_name="dist", rank=rank,
                          export_process=False, file_export=False, session_tracer=False,
                          stats_tensorboard=False)
        _record(rank, rank_data(rank))
        everything = stats.export_all(reduce_group=dist.group.WORLD, step=5)
        if rank == 0:
            stats.scalar(late=2.0)
        late = stats.export(key="late", reduce_group=dist.group.WORLD, step=6)
        otel_rl.shutdown()
        dist.barrier()
        dist.destroy_process_group()
        queue.put((rank, everything, late, otel_rl.diagnostics()))
    except BaseException:  # noqa: BLE001 - reported to the test, which fails with it
        queue.put((rank, "error", traceback.format_exc(), None))
