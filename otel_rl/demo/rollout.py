"""A rollout worker process: a copy of the policy, an inference engine and asyncio sessions.

Started by the trainer with the ``spawn`` context. It reads messages from its
request queue and answers on the shared result queue:

* ``("weights", version, weights, carrier)``: load a new policy version.
* ``("tasks", tasks, carrier)``: roll out each task as a group of sessions;
  each finished group goes back as ``("group", rank, task_id, samples)``.
* ``("finalize", verdicts, carrier)``: the trainer's verdict on sessions it
  consumed: ``mark_finalized`` with ``accepted`` or ``rejected`` and a reason.
* ``("stop",)``: finish, flush the trace files, exit.

``carrier`` is what ``otel_rl.inject`` wrote in the trainer: under
``otel_rl.attach(carrier)`` this worker's spans join the trainer step's trace.
"""

from __future__ import annotations

import asyncio
import os
import random
import traceback
from typing import Any

from opentelemetry import trace

import otel_rl

from .arithmetic import CALC, MAX_NEW_TOKENS, MAX_TURNS, Task, calculator, decode, score

#: Latency of the calculator tool, which in a real system runs in a sandbox or
#: behind an API. Most calls are quick, a few hit a slow path: that long tail
#: is what makes samples arrive late and go stale in asynchronous RL.
TOOL_LATENCY_S = (0.002, 0.010)
SLOW_TOOL_LATENCY_S = (0.15, 0.45)
SLOW_TOOL_PROBABILITY = 0.08

#: Requests the engine decodes together.
ENGINE_MAX_BATCH = 32


def worker_main(rank: int, config: dict[str, Any], requests: Any, results: Any) -> None:
    """Entry point of a rollout worker process (role ``rollout``, rank ``rank``).

    Args:
        rank: This worker's rank.
        config: ``fileroot``, ``trial``, ``seed``, ``samples``.
        requests: This worker's request queue.
        results: The queue shared by all workers back to the trainer.
    """
    code = 0
    try:
        otel_rl.configure(fileroot=config["fileroot"], experiment_name="demo",
                          trial_name=config["trial"], rank=rank, role="rollout")
        # Request events of the inference engine, in <run dir>/events/ (as an
        # operator would turn them on with POST /start_request_profile).
        otel_rl.events.start(run_id=config["trial"])
        asyncio.run(RolloutWorker(rank, config, requests, results).run())
        # Flushes the files before the trainer reads them; problems seen go with the reply.
        otel_rl.shutdown()
        results.put(("stopped", rank, otel_rl.diagnostics()))
    except BaseException:  # noqa: BLE001 - the trainer reports it and stops
        code = 1
        results.put(("error", rank, traceback.format_exc()))
    finally:
        otel_rl.shutdown()
        # Everything is written and the reply is on its way: wait until the queue
        # delivered it, then skip the interpreter's teardown (torch's takes about a second).
        results.close()
        results.join_thread()
        os._exit(code)


class RolloutWorker:
    """Serves the trainer's requests in one asyncio event loop."""

    def __init__(self, rank: int, config: dict[str, Any], requests: Any, results: Any) -> None:
        from . import policy as pol

        pol.set_single_thread()
        self.rank = rank
        self.samples = config["samples"]
        self.requests = requests
        self.results = results
        self.rng = random.Random(config["seed"] * 1000 + rank)
        self.engine = pol.InferenceEngine(pol.Policy(), ENGINE_MAX_BATCH,
                                          pol.sampling_generator(config["seed"] * 1000 + rank))

    async def run(self) -> None:
        """Handles messages until ``stop``, then waits for its batches and the engine."""
        loop = asyncio.get_running_loop()
        batches: set[asyncio.Task] = set()
        # Created before any carrier is attached: engine spans are not part of any step.
        engine = asyncio.create_task(self.engine.serve())
        engine.add_done_callback(self._report_failure(batches))
        while True:
            # The queue blocks, so it is read on a thread; the loop keeps serving sessions.
            message = await loop.run_in_executor(None, self.requests.get)
            kind = message[0]
            if kind == "stop":
                break
            if kind == "weights":
                _, version, weights, carrier = message
                # Joins the trainer's send; the worker's policy version is the new one after it.
                with otel_rl.attach(carrier), otel_rl.weight_sync(version, role="recv"):
                    self.engine.update_weights(weights, version)
            elif kind == "tasks":
                _, tasks, carrier = message
                with otel_rl.attach(carrier):
                    # The task copies the attached context, so its spans join the step's trace.
                    batch = asyncio.create_task(self.run_batch([Task.from_dict(t) for t in tasks]))
                batches.add(batch)
                batch.add_done_callback(self._report_failure(batches))
            elif kind == "finalize":
                _, verdicts, carrier = message
                with otel_rl.attach(carrier), otel_rl.trace_scope("rollout.finalize", category="scheduler",
                                                                  args={"sessions": len(verdicts)}):
                    for session_id, status, reason, reward in verdicts:
                        otel_rl.trace_session_event("mark_finalized", session_id=session_id,
                                                    status=status, reason=reason, reward=reward)
            else:
                raise ValueError(f"unknown message {kind!r}")
        await asyncio.gather(*batches)
        self.engine.close()
        await engine
        otel_rl.save(force=True)

    def _report_failure(self, batches: set[asyncio.Task]) -> Any:
        # A failed asyncio task would otherwise only be logged at exit, leaving the
        # trainer waiting for groups that never come.
        def done(task: asyncio.Task) -> None:
            batches.discard(task)
            if not task.cancelled() and task.exception() is not None:
                error = task.exception()
                self.results.put(("error", self.rank, "".join(traceback.format_exception(error))))
        return done

    async def run_batch(self, tasks: list[Task]) -> None:
        """Rolls out the tasks of one request concurrently, under one ``rollout.batch`` span."""
        async with otel_rl.atrace_scope("rollout.batch", category="scheduler",
                                        args={"tasks": len(tasks), "version": self.engine.version}):
            await asyncio.gather(*(self.run_group(task) for task in tasks))

    @otel_rl.trace_perf("rollout.arun_episode", category="scheduler")
    async def run_group(self, task: Task) -> None:
        """Samples ``samples`` sessions of one task concurrently (a GRPO group)."""
        otel_rl.set_task_id(otel_rl.register_task(task.task_id))
        samples = await asyncio.gather(*(self.collect(task) for _ in range(self.samples)))
        # Sessions stay open until the trainer decides: it alone knows the
        # policy version the group will be trained with.
        self.results.put(("group", self.rank, task.task_id, samples))

    @otel_rl.session_context()
    async def collect(self, task: Task) -> dict[str, Any]:
        """One session: generate, maybe call the calculator and generate again, get a reward."""
        tokens = task.prompt_tokens()
        policy_mask = [0] * len(tokens)
        logp: list[float] = []
        versions: list[int] = []
        tool_calls = 0
        final: list[int] = []
        for turn in range(MAX_TURNS):
            async with otel_rl.atrace_session_phase("generate", start_payload={"turn": turn}) as span:
                out = await self.engine.agenerate(tokens, MAX_NEW_TOKENS)
                if span is not None:
                    span.set_attributes({"gen_ai.request.model": "demo-gru",
                                         "gen_ai.usage.input_tokens": len(tokens),
                                         "gen_ai.usage.output_tokens": len(out.tokens)})
                # The engine's queue, prefill and decode times, as children of this phase.
                otel_rl.record_server_timings(out.meta, engine="sglang")
            otel_rl.increment_counter("output_tokens", len(out.tokens))
            tokens += out.tokens
            policy_mask += [1] * len(out.tokens)
            logp += out.logp
            versions += out.versions
            final = out.tokens
            if out.tokens[-1] != CALC or turn == MAX_TURNS - 1:
                break
            async with otel_rl.atrace_session_phase("toolcall", start_payload={"tool": "calculator"}):
                await asyncio.sleep(self._tool_latency())
                observation = calculator(task)
            otel_rl.increment_counter("tool_calls")
            tool_calls += 1
            tokens += observation
            policy_mask += [0] * len(observation)
        async with otel_rl.atrace_session_phase("reward"):
            reward, outcome = score(final, task)
        # What the trainer needs to mark the session consumed and annotate it
        # (otel_rl.consume / annotate): its ids and the span to link to.
        context = trace.get_current_span().get_span_context()
        return {
            "session_id": otel_rl.get_session_id(), "task_id": task.task_id,
            "trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}",
            "tokens": tokens, "policy_mask": policy_mask,
            "logp": logp, "version": min(versions), "reward": reward, "outcome": outcome,
            "tool_calls": tool_calls, "text": decode(tokens[1:]),
        }

    def _tool_latency(self) -> float:
        low, high = SLOW_TOOL_LATENCY_S if self.rng.random() < SLOW_TOOL_PROBABILITY else TOOL_LATENCY_S
        return self.rng.uniform(low, high)
