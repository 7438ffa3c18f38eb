"""One rank of the multi-process otel_rl.stats tests (spawned; kept free of pytest imports).

``rank_data(rank)`` is what a rank of :func:`worker` records; the test
recomputes the expected export from it with plain Python. :func:`group_worker`
records keys with AReaL's per-key ``reduce_group`` and exports them with and
without ``key_sync_group``.
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
    nan_loss = torch.randn(4, generator=gen)
    if rank == 1:
        nan_loss[2] = float("nan")  # as in AReaL, it makes the key's statistics NaN on every rank
    data = {
        "batches": [(loss.tolist(), mask.tolist()) for loss, mask in batches],
        "nan_loss": nan_loss.tolist(),
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
    stats.denominator(n_nan=torch.ones(4, dtype=torch.bool))
    stats.stat(nan_loss=torch.tensor(data["nan_loss"]), denominator="n_nan")
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


def _record_and_export_groups(rank: int, world: int) -> dict:
    """AReaL's data x context parallel export in miniature, on two ranks: each
    rank is its own data-parallel group, and keys of the context-parallel loss
    carry ``reduce_group=`` the whole world (dp x cp), as in AReaL's own test."""
    import torch
    import torch.distributed as dist

    from otel_rl import stats

    everyone = dist.group.WORLD
    # Every rank creates every group, in the same order (torch.distributed's rule).
    dp_groups = [dist.new_group([member], backend="gloo") for member in range(world)]
    dp = dp_groups[rank]
    out = {}

    # 1. key_sync_group: default keys over dp, per-key ones over the wider group.
    stats.denominator(n_seqs=torch.ones(2, dtype=torch.bool))
    stats.scalar(loss=float(rank), reduce_group=everyone)
    mask = torch.tensor([True] * (rank + 1) + [False] * (3 - rank))
    stats.denominator(n_tokens=mask, reduce_group=everyone)
    stats.stat(vocab_min=torch.arange(4, dtype=torch.float32) + 10 * rank, denominator="n_tokens",
               reduce_group=everyone)
    if rank == world - 1:  # known to the other ranks only through key_sync_group
        stats.weighted_mean("only_last", torch.tensor(7.0), torch.tensor(0.25), reduce_group=everyone)
    out["synced"] = stats.export_all(reduce_group=dp, key_sync_group=everyone, log=False)

    # 2. per-key group without key_sync_group: reduced over its group even by a plain export().
    stats.scalar(world_mean=float(rank), reduce_group=everyone)
    stats.scalar(local=float(rank))
    out["per_key"] = stats.export(log=False)

    # 3. a per-key group on some ranks only and no key_sync_group: AReaL raises;
    #    otel_rl leaves the key out on every rank of the export's group and goes on.
    if rank == 0:
        stats.scalar(half=1.0, reduce_group=dp)
    stats.scalar(kept=float(rank))
    out["missing_sync"] = stats.export(reduce_group=everyone, log=False)
    for group in dp_groups:
        dist.destroy_process_group(group)
    return out


def group_worker(rank: int, world: int, init_file: str, queue) -> None:
    try:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        import torch.distributed as dist

        import otel_rl

        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        out = _record_and_export_groups(rank, world)
        dist.barrier()
        dist.destroy_process_group()
        queue.put((rank, out, None, otel_rl.diagnostics()))
    except BaseException:  # noqa: BLE001 - reported to the test, which fails with it
        queue.put((rank, "error", traceback.format_exc(), None))
