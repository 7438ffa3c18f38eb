"""A small traced rollout whose files the report tests read.

``python tests/report_workload.py FILEROOT RANK SLOW_RANK`` runs, as rank
``RANK`` (role ``rollout``), ``STEPS`` training steps: in each, ``TASKS`` tasks
of ``SAMPLES`` asyncio sessions with 1-3 generate turns (with tool calls
between turns) and a reward phase, finalized accepted or rejected; then a
``train`` scope with an ML-Agents ``@timed`` function, a nested
``hierarchical_timer`` and a gauge, a weight sync received and the step's
sessions consumed (one of them annotated). In step ``SLOW_STEP`` the rank
``SLOW_RANK`` has one session that generates for ``SLOW_S`` (the straggler),
and in the last step one session fails while a phase is still open. Run
by the tests as real processes, one per rank.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time

import otel_rl
from otel_rl.timers import hierarchical_timer, set_gauge, timed

STEPS = 3
TASKS = 3
SAMPLES = 2
SLOW_STEP = 1
SLOW_S = 0.35
#: Values set on the gauge ``loss``: the tests know what went in.
LOSS = (0.9, 0.5, 0.7)


@timed
def compute_loss(step: int) -> float:
    with hierarchical_timer("backward"):
        time.sleep(0.002)
    return LOSS[step]


@otel_rl.session_context()
async def collect(rng: random.Random, slow: bool, fail: bool) -> dict:
    sample = {"task_id": otel_rl.get_task_id(), "session_id": otel_rl.get_session_id()}
    turns = rng.randint(1, 3)
    for turn in range(turns):
        async with otel_rl.atrace_session_phase("generate", start_payload={"turn": turn}) as span:
            await asyncio.sleep(SLOW_S if slow and turn == turns - 1 else 0.002 + 0.002 * rng.random())
            tokens = rng.randint(5, 60)
            if span is not None:
                span.set_attributes({"gen_ai.usage.output_tokens": tokens})
        otel_rl.increment_counter("output_tokens", tokens)
        if turn < turns - 1:
            async with otel_rl.atrace_session_phase("toolcall"):
                await asyncio.sleep(0.001)
    if fail:
        # A reward the engine never finishes: the phase is still open when the session fails.
        otel_rl.trace_session_event("mark_reward_start")
        otel_rl.trace_session_event("mark_finalized", status="failed", reason="engine_error")
        return sample
    with otel_rl.trace_session_phase("reward"):
        time.sleep(0.0005)
    ok = rng.random() < 0.7
    otel_rl.trace_session_event("mark_finalized", status="accepted" if ok else "rejected",
                                reason=None if ok else "wrong_answer")
    return sample


async def run_task(rng: random.Random, slow: bool, fail: bool) -> list:
    otel_rl.set_task_id(otel_rl.register_task())
    return await asyncio.gather(*(collect(rng, slow and i == 0, fail and i == 0) for i in range(SAMPLES)))


async def rollout(step: int, rank: int, slow_rank: int, rng: random.Random) -> list:
    with otel_rl.trace_scope("rollout.batch", category="scheduler"):
        return await asyncio.gather(*(
            run_task(rng, slow=(rank == slow_rank and step == SLOW_STEP and k == 0),
                     fail=(step == STEPS - 1 and k == TASKS - 1))
            for k in range(TASKS)))


def step_barrier(fileroot: str, step: int, rank: int, world: int = 2, timeout_s: float = 60.0) -> None:
    """Every rank starts the step together, as in a synchronous training step: the
    slow rank is the straggler whatever the machine's load made each process's start."""
    import os

    directory = os.path.join(fileroot, "barrier")
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, f"{step}-{rank}"), "w").close()
    deadline = time.monotonic() + timeout_s
    while not all(os.path.exists(os.path.join(directory, f"{step}-{r}")) for r in range(world)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank {rank}: the other ranks never reached step {step}")
        time.sleep(0.001)


def main(fileroot: str, rank: int, slow_rank: int) -> None:
    otel_rl.configure(fileroot=fileroot, experiment_name="exp", trial_name="t", rank=rank, role="rollout")
    rng = random.Random(rank)
    for step in range(STEPS):
        step_barrier(fileroot, step, rank)
        with otel_rl.step_scope(step):
            samples = [s for task in asyncio.run(rollout(step, rank, slow_rank, rng)) for s in task]
            otel_rl.consume(samples)
            otel_rl.annotate(samples[0]["session_id"], samples[0]["task_id"], advantage=LOSS[step])
            with otel_rl.trace_scope("train", category="compute"):
                for _ in range(2):
                    set_gauge("loss", compute_loss(step))
            with otel_rl.weight_sync(step + 1, role="recv"):
                time.sleep(0.001)
        otel_rl.save(step)
    otel_rl.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))


_RUNS: dict[str, str] = {}


def two_rank_run(root: str) -> str:
    """Runs the workload as two real processes (ranks 0 and 1, rank 1 the straggler)
    under ``root`` once per test session; returns the run directory."""
    import os
    import subprocess

    if root not in _RUNS:
        from support import clean_env

        env = clean_env()
        procs = [subprocess.Popen([sys.executable, __file__, root, str(rank), "1"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for rank in (0, 1)]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode()
        _RUNS[root] = os.path.join(root, "exp", "t")
    return _RUNS[root]
