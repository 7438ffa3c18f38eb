"""A small asynchronous rollout traced with otel_rl: ``python -m otel_rl.demo``.

A rollout controller submits dataset tasks concurrently; each task samples
``--samples`` sessions that generate over one or more turns, sometimes call a
tool, and get a reward; stale or wrong samples are rejected; a trainer step
consumes the batch. Everything is traced; the run directory, a summary and how
to open the trace in Perfetto are printed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
from collections import Counter
from typing import Any

import otel_rl


async def _generate(rng: random.Random, tokens: int) -> str:
    # Stands in for an inference server call: latency grows with tokens.
    await asyncio.sleep(tokens * rng.uniform(0.0001, 0.0004))
    return "answer"


@otel_rl.trace_session("reward")
async def _reward(rng: random.Random, answer_ok: bool) -> float:
    await asyncio.sleep(rng.uniform(0.0005, 0.002))
    return 1.0 if answer_ok else 0.0


@otel_rl.session_context()
async def collect_sample(rng: random.Random, task: dict[str, Any], policy_version: int) -> float:
    turns = rng.randint(1, 3)
    for turn in range(turns):
        async with otel_rl.atrace_session_phase("generate", start_payload={"turn": turn}):
            await _generate(rng, rng.randint(16, 128))
        if turn < turns - 1:
            async with otel_rl.atrace_session_phase("toolcall", start_payload={"tool": "calculator"}):
                await asyncio.sleep(rng.uniform(0.0005, 0.003))
                otel_rl.increment_counter("tool_calls")
    reward = await _reward(rng, rng.random() < 0.6)
    stale = rng.random() < 0.1
    if stale:
        otel_rl.trace_session_event("mark_finalized", status="rejected", reason="stale_weight",
                                    policy_version=policy_version)
    else:
        otel_rl.trace_session_event("mark_finalized", status="accepted")
    return reward


@otel_rl.trace_perf("rollout.arun_episode", category="scheduler")
async def run_episode(rng: random.Random, task: dict[str, Any], samples: int, version: int) -> list[float]:
    otel_rl.set_task_id(otel_rl.register_task())
    return await asyncio.gather(*[collect_sample(rng, task, version) for _ in range(samples)])


@otel_rl.trace_perf("trainer.train_step", category="compute")
def train_step(rewards: list[float]) -> float:
    with otel_rl.trace_scope("trainer.forward_backward", category="compute", args={"n": len(rewards)}):
        total = 0.0
        for _ in range(20_000):
            total += 1e-6
    return sum(rewards) / max(1, len(rewards))


async def rollout(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    summary: dict[str, Any] = {"steps": []}
    for step in range(args.steps):
        with otel_rl.step_scope(step):
            tasks = [{"question": f"{rng.randint(1, 99)} + {rng.randint(1, 99)}"} for _ in range(args.tasks)]
            with otel_rl.trace_scope("rollout.batch", category="scheduler", args={"tasks": len(tasks)}):
                results = await asyncio.gather(*[run_episode(rng, t, args.samples, step) for t in tasks])
            rewards = [r for per_task in results for r in per_task]
            mean = train_step(rewards)
        otel_rl.save(step)
        summary["steps"].append({"step": step, "sessions": len(rewards), "mean_reward": mean})
    return summary


def main(argv: list[str] | None = None) -> int:
    """Runs the demo; see ``--help``."""
    parser = argparse.ArgumentParser(prog="otel-rl demo", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8, help="tasks per step")
    parser.add_argument("--samples", type=int, default=4, help="sessions per task")
    parser.add_argument("--steps", type=int, default=3, help="training steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", default=os.environ.get("OTEL_RL_DIR", "otel_rl_runs"),
                        help="root directory for run files")
    args = parser.parse_args(argv)
    otel_rl.configure(fileroot=args.dir, experiment_name="demo", trial_name="run", rank=0,
                      role="rollout")
    run_dir = otel_rl.settings().run_dir
    summary = asyncio.run(rollout(args))
    otel_rl.shutdown()

    statuses: Counter[str] = Counter()
    sessions_file = os.path.join(run_dir, "sessions-rollout-r0.jsonl")
    with open(sessions_file) as f:
        for line in f:
            statuses[json.loads(line)["status"]] += 1
    out = sys.stdout
    out.write(f"run directory: {run_dir}\n")
    for name in sorted(os.listdir(run_dir)):
        out.write(f"  {name}\n")
    out.write(f"sessions: {dict(statuses)}\n")
    for step in summary["steps"]:
        out.write(f"  step {step['step']}: {step['sessions']} sessions, mean reward {step['mean_reward']:.2f}\n")
    out.write(f"open in Perfetto: otel-rl convert {run_dir} -o trace.json, then load trace.json "
              "at https://ui.perfetto.dev\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
