"""The trainer process: rollout controller, GRPO verdicts, backward pass, weight broadcast.

One process (role ``trainer``, rank 0) drives the loop; rollout workers run in
processes of their own (:mod:`.rollout`). Per step the trainer

1. submits tasks while the controller's capacity allows (it may run
   ``ahead`` steps ahead of training, as AReaL's ``max_head_offpolicyness``),
2. waits for ``tasks`` finished groups, in the order they arrive,
3. judges every session: too stale, truncated, or in a group whose rewards
   are all equal (zero group-relative advantage) means rejected; the owning
   worker finalizes the sessions with that verdict,
4. takes a PPO-clipped policy-gradient step on the accepted samples,
5. sends the new weights to every worker.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import otel_rl

from . import policy as pol
from .arithmetic import Task, make_task
from .rollout import worker_main

#: Supervised warm-up steps before RL (about a second on one core).
WARMUP_STEPS = 150
WARMUP_LR = 3e-3
RL_LR = 2e-3
#: Seconds a worker may stay silent while the trainer waits for it.
WORKER_TIMEOUT_S = 60.0


class DemoError(RuntimeError):
    """A worker failed; the message says which and why."""


@dataclass
class StepStats:
    """What one training step consumed and did."""

    step: int
    sessions: int = 0
    accepted: int = 0
    rejected: Counter = field(default_factory=Counter)
    mean_reward: float = 0.0
    correct: float = 0.0
    tool_use: float = 0.0
    loss: float | None = None
    max_staleness: int = 0


@dataclass
class RunResult:
    """Everything the summary needs from the trainer."""

    steps: list[StepStats]
    warmup_loss: float
    diagnostics: dict[int, dict[str, int]]  # otel_rl problems counted by each worker, by rank
    examples: list[str]


@dataclass
class DemoConfig:
    """The demo's size and knobs (the command-line flags)."""

    tasks: int
    samples: int
    steps: int
    workers: int
    seed: int
    ahead: int
    max_staleness: int
    fileroot: str
    trial: str


class Trainer:
    """Runs the whole loop in this process and the rollout workers it starts.

    Args:
        config: Sizes and knobs.
        on_progress: Called as ``on_progress(kind, n, info)`` when ``n``
            sessions arrive (``"sessions"``) or a step finishes (``"step"``,
            ``info`` a short text on it).
    """

    def __init__(self, config: DemoConfig, on_progress: Callable[[str, int, str], None]) -> None:
        self.config = config
        self.on_progress = on_progress
        self.version = 0
        self.procs: list[Any] = []
        self.requests: list[Any] = []
        self.results: Any = None
        self.stopped: dict[int, dict[str, int]] = {}

    # -- process management ---------------------------------------------------------

    def _start_workers(self) -> None:
        cfg = self.config
        # spawn, not fork: the trainer holds torch and otel_rl threads that a fork would copy.
        ctx = mp.get_context("spawn")
        self.results = ctx.Queue()
        worker_cfg = {"fileroot": cfg.fileroot, "trial": cfg.trial, "seed": cfg.seed, "samples": cfg.samples}
        for rank in range(cfg.workers):
            requests = ctx.Queue()
            proc = ctx.Process(target=worker_main, args=(rank, worker_cfg, requests, self.results),
                               name=f"otel-rl-demo-rollout-{rank}", daemon=True)
            proc.start()
            self.requests.append(requests)
            self.procs.append(proc)

    def _receive(self) -> tuple:
        """The next worker message; raises :class:`DemoError` if a worker died or went silent."""
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        while True:
            try:
                message = self.results.get(timeout=0.25)
            except queue.Empty:
                for rank, proc in enumerate(self.procs):
                    if proc.exitcode is not None and rank not in self.stopped:
                        raise DemoError(f"rollout worker {rank} exited with code {proc.exitcode}") from None
                if time.monotonic() > deadline:
                    raise DemoError(f"no message from the rollout workers for {WORKER_TIMEOUT_S:.0f} s") from None
                continue
            if message[0] == "error":
                raise DemoError(f"rollout worker {message[1]} failed:\n{message[2]}")
            if message[0] == "stopped":
                self.stopped[message[1]] = message[2]
            return message

    def close(self, graceful: bool) -> None:
        """Stops the workers: asks them to flush and exit, then makes sure they did."""
        if graceful:
            for requests in self.requests:
                requests.put(("stop",))
            deadline = time.monotonic() + WORKER_TIMEOUT_S
            while len(self.stopped) < len(self.procs) and time.monotonic() < deadline:
                self._receive()
        for proc in self.procs:
            proc.join(timeout=10 if graceful else 0.1)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for requests in self.requests:
            # Weights still buffered for a worker that is gone would block this
            # process's exit (multiprocessing joins queue feeder threads at exit).
            requests.cancel_join_thread()

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> RunResult:
        """Trains ``config.steps`` steps and stops the workers.

        Raises:
            DemoError: A worker failed, died or went silent (the others are stopped).
        """
        # Workers start first: their start-up (mostly importing torch) overlaps the
        # warm-up. Both are set-up, not RL: recording is paused (AReaL's
        # set_enabled) until the first step, so the trace opens on the RL work
        # instead of squeezing it beside a warm-up several times as long.
        if otel_rl.is_configured():
            otel_rl.get_tracer().set_enabled(False)
        self._start_workers()
        try:
            result = self._train()
            self.close(graceful=True)
            result.diagnostics = dict(self.stopped)
        except BaseException:
            self.close(graceful=False)
            raise
        return result

    def _train(self) -> RunResult:
        cfg = self.config
        pol.set_single_thread()
        torch.manual_seed(cfg.seed)
        rng = random.Random(cfg.seed)
        policy = pol.Policy()
        warmup_loss = pol.sft_warmup(policy, pol.Adam(policy.parameters(), lr=WARMUP_LR), rng,
                                     WARMUP_STEPS)
        if otel_rl.is_configured():
            otel_rl.get_tracer().set_enabled(True)
        optimizer = pol.Adam(policy.parameters(), lr=RL_LR)
        dataset = [make_task(rng, task_id) for task_id in range(cfg.steps * cfg.tasks)]
        otel_rl.set_policy_version(self.version)
        self._broadcast(policy)
        submitted = 0
        arrived: list[tuple[int, int, list[dict[str, Any]]]] = []
        stats: list[StepStats] = []
        examples: list[str] = []
        for step in range(cfg.steps):
            with otel_rl.step_scope(step):
                submitted = self._submit(dataset, submitted)
                with otel_rl.trace_scope("trainer.wait_rollout", category="sync", args={"groups": cfg.tasks}):
                    while len(arrived) < cfg.tasks:
                        message = self._receive()
                        if message[0] == "group":
                            arrived.append(message[1:])
                            # Finished groups waiting to be trained on: a counter track.
                            otel_rl.set_gauge("trainer.buffered_groups", len(arrived))
                            self.on_progress("sessions", len(message[3]), "")
                groups, arrived = arrived[:cfg.tasks], arrived[cfg.tasks:]
                otel_rl.set_gauge("trainer.buffered_groups", len(arrived))
                step_stats, accepted = self._judge(step, groups)
                _record_rollout_stats(groups)
                if accepted:
                    with otel_rl.stats.record_timing("train_step"):
                        step_stats.loss = train_step(policy, optimizer, accepted)
                    otel_rl.stats.scalar(loss=step_stats.loss, accepted_samples=len(accepted))
                else:
                    otel_rl.instant("trainer.no_accepted_samples", category="compute")
                self.version += 1
                otel_rl.set_policy_version(self.version)
                self._broadcast(policy)
                # AReaL's stats_tracker export: `stats-trainer-r0.jsonl`, and OTLP
                # gauges when an endpoint is set.
                otel_rl.stats.export_all(step=step)
            if not examples:
                examples = _examples([s for _, _, group in groups for s in group])
            otel_rl.save(step)
            stats.append(step_stats)
            self.on_progress("step", 1, f"reward {step_stats.mean_reward:.2f}")
        return RunResult(stats, warmup_loss, {}, examples)

    def _submit(self, dataset: list[Task], submitted: int) -> int:
        """Submits the tasks the controller's capacity allows now; returns the new count."""
        cfg = self.config
        capacity = min(len(dataset), (cfg.ahead + self.version + 1) * cfg.tasks)
        if capacity <= submitted:
            return submitted
        with otel_rl.trace_scope("rollout.submit", category="scheduler",
                                 args={"tasks": capacity - submitted, "version": self.version}):
            carrier = otel_rl.inject({})
            per_worker: dict[int, list[dict[str, Any]]] = {}
            for task in dataset[submitted:capacity]:
                per_worker.setdefault(task.task_id % cfg.workers, []).append(task.to_dict())
            for rank, tasks in per_worker.items():
                self.requests[rank].put(("tasks", tasks, carrier))
        return capacity

    def _judge(self, step: int, groups: list[tuple[int, int, list[dict[str, Any]]]]
               ) -> tuple[StepStats, list[dict[str, Any]]]:
        """GRPO verdicts and advantages for the consumed groups; tells workers to finalize."""
        cfg = self.config
        stats = StepStats(step)
        accepted: list[dict[str, Any]] = []
        with otel_rl.trace_scope("trainer.judge_groups", category="compute", args={"groups": len(groups)}):
            verdicts: dict[int, list[tuple[Any, str, str | None]]] = {}
            rewards: list[float] = []
            # Every sample of these groups is consumed by this step (trained on or rejected):
            # its staleness and the step go on its session.
            otel_rl.consume([sample for _, _, samples in groups for sample in samples])
            for rank, _task_id, samples in groups:
                valid = []
                for sample in samples:
                    staleness = self.version - sample["version"]
                    stats.max_staleness = max(stats.max_staleness, staleness)
                    rewards.append(sample["reward"])
                    stats.correct += sample["outcome"] == "correct"
                    stats.tool_use += sample["tool_calls"] > 0
                    if staleness > cfg.max_staleness:
                        sample["verdict"] = "stale_weight"
                    elif sample["outcome"] == "truncated":
                        sample["verdict"] = "truncated"
                    else:
                        valid.append(sample)
                group_rewards = [s["reward"] for s in valid]
                if len(set(group_rewards)) > 1:
                    mean = statistics.fmean(group_rewards)
                    std = statistics.pstdev(group_rewards)
                    for sample in valid:
                        sample["advantage"] = (sample["reward"] - mean) / (std + 1e-6)
                        sample["verdict"] = None
                        accepted.append(sample)
                        otel_rl.annotate(sample, advantage=sample["advantage"])
                else:
                    for sample in valid:
                        sample["verdict"] = "zero_advantage"
                for sample in samples:
                    reason = sample["verdict"]
                    verdicts.setdefault(rank, []).append(
                        (sample["session_id"], "rejected" if reason else "accepted", reason, sample["reward"]))
                    if reason:
                        stats.rejected[reason] += 1
            carrier = otel_rl.inject({})
            for rank, items in verdicts.items():
                self.requests[rank].put(("finalize", items, carrier))
        stats.sessions = len(rewards)
        stats.accepted = len(accepted)
        stats.mean_reward = statistics.fmean(rewards) if rewards else 0.0
        stats.correct /= max(1, stats.sessions)
        stats.tool_use /= max(1, stats.sessions)
        return stats, accepted

    def _broadcast(self, policy: pol.Policy) -> None:
        # Each worker's weight_sync(role="recv") joins this send's trace.
        with otel_rl.weight_sync(self.version, role="send"):
            weights = pol.weights_to_numpy(policy)
            carrier = otel_rl.inject({})
            for requests in self.requests:
                requests.put(("weights", self.version, weights, carrier))


@otel_rl.trace_perf("trainer.train_step", category="compute")
def _record_rollout_stats(groups: list[tuple[int, int, list[dict[str, Any]]]]) -> None:
    """Per-sample rollout statistics on the ``rollout`` tracker (AReaL's names)."""
    rollout = otel_rl.stats.get("rollout")
    for _rank, _task_id, samples in groups:
        for sample in samples:
            rollout.scalar(reward=sample["reward"], tool_calls=sample["tool_calls"],
                           accepted=0.0 if sample.get("verdict") else 1.0,
                           correct=1.0 if sample["outcome"] == "correct" else 0.0)


def train_step(policy: pol.Policy, optimizer: pol.Adam,
               samples: list[dict[str, Any]]) -> float:
    """One optimizer step on the accepted samples; returns the loss."""
    loss = pol.grpo_loss(policy, pol.make_batch(samples))
    with otel_rl.trace_scope("trainer.backward", category="compute"):
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    with otel_rl.trace_scope("trainer.optimizer_step", category="compute"):
        optimizer.step()
    return float(loss.detach())


def _examples(samples: list[dict[str, Any]]) -> list[str]:
    """A few conversations of different outcomes, with their rewards, for the summary."""
    seen: dict[tuple[str, bool], str] = {}
    for sample in samples:
        key = (sample["outcome"], sample["tool_calls"] > 0)
        seen.setdefault(key, f"{sample['text']}  (reward {sample['reward']:.1f}, {sample['outcome']})")
    return list(seen.values())[:4]
