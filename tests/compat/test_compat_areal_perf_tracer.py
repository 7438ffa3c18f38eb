"""AReaL ``perf_tracer`` code runs unchanged with ``import otel_rl as perf_tracer``.

Written from AReaL's documented behaviour and its call sites (trainer, workflow
executor, engines): configure with a ``PerfTracerConfig`` object, scopes with
``args={"global_step": ...}``, ``save(step=...)`` at AReaL's steps, the session
tracer object, and the files where AReaL's converter and plot scripts look.
"""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
from pathlib import Path

import pytest
from support import read_jsonl, read_trace, scrub_environ, slices

import otel_rl as perf_tracer
from otel_rl import Category, SessionTraceEvent


@dataclasses.dataclass
class SessionTracerConfig:
    """The shape of AReaL's ``SessionTracerConfig``."""

    enabled: bool = False
    flush_threshold: int = 256


@dataclasses.dataclass
class PerfTracerConfig:
    """The shape of AReaL's ``PerfTracerConfig`` (a dataclass, not a dict)."""

    experiment_name: str = "exp"
    trial_name: str = "trial"
    fileroot: str = ""
    enabled: bool = False
    save_interval: int = 1
    profile_steps: list[int] | None = None
    session_tracer: SessionTracerConfig | None = None


def _config(root: Path, **kw) -> PerfTracerConfig:
    return PerfTracerConfig(fileroot=str(root), enabled=True, **kw)


def _areal_dir(config: PerfTracerConfig) -> Path:
    return Path(config.fileroot) / "logs" / getpass.getuser() / config.experiment_name / config.trial_name


def _traces(config: PerfTracerConfig, rank: int = 0, role: str | None = None) -> Path:
    base = _areal_dir(config) / "perf_tracer"
    return (base / role if role else base) / f"traces-r{rank}.jsonl"


def _sessions(config: PerfTracerConfig, rank: int = 0) -> Path:
    return _areal_dir(config) / "session_tracer" / f"sessions-r{rank}.jsonl"


def _slices(path: Path) -> list[dict]:
    return slices(read_trace(path), phases=("X", "i"))


def _process_names(path: Path) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in read_trace(path) if e.get("name") == "process_name"}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    scrub_environ(monkeypatch)


# --- configuration ----------------------------------------------------------------------------

def test_get_tracer_before_configure_raises_runtime_error():
    with pytest.raises(RuntimeError):
        perf_tracer.get_tracer()


def test_get_otel_tracer_works_before_configure():
    with perf_tracer.get_otel_tracer().start_as_current_span("mine") as span:
        assert span is not None


def test_configure_returns_the_tracer_get_tracer_returns(tmp_path):
    tracer = perf_tracer.configure(_config(tmp_path), rank=0)
    assert isinstance(tracer, perf_tracer.PerfTracer)
    assert type(perf_tracer.get_tracer()) is type(tracer)
    assert perf_tracer.GLOBAL_TRACER is not None and tracer.enabled


def test_second_configure_with_an_areal_config_raises_like_areal(tmp_path):
    perf_tracer.configure(_config(tmp_path), rank=0)
    with pytest.raises(RuntimeError):
        perf_tracer.configure(_config(tmp_path), rank=1)
    perf_tracer.reset()
    assert perf_tracer.configure(_config(tmp_path), rank=1)._rank == 1


def test_the_tracer_is_also_an_opentelemetry_tracer(tmp_path):
    config = _config(tmp_path)
    tracer = perf_tracer.configure(config, rank=0)
    with tracer.start_as_current_span("otel-span"):
        pass
    tracer.save(force=True)
    assert "otel-span" in {e["name"] for e in _slices(_traces(config))}


def test_areal_config_writes_where_areal_tools_look(tmp_path):
    config = _config(tmp_path)
    tracer = perf_tracer.configure(config, rank=2, role="actor")
    with tracer.trace_scope("train_step", category=Category.COMPUTE):
        pass
    perf_tracer.save(force=True)
    assert {e["name"] for e in _slices(_traces(config, 2, "actor"))} == {"train_step"}


def test_session_tracer_none_means_sessions_off(tmp_path):
    perf_tracer.configure(_config(tmp_path, session_tracer=None), rank=0)
    assert perf_tracer.get_session_tracer() is None
    assert perf_tracer.register_session(perf_tracer.register_task()) is None


def test_areal_perf_tracer_ranks_selects_the_recording_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("AREAL_PERF_TRACER_RANKS", "0,2-4")
    assert perf_tracer.configure(_config(tmp_path), rank=3).enabled
    perf_tracer.reset()
    tracer = perf_tracer.configure(_config(tmp_path), rank=1)
    assert not tracer.enabled
    with perf_tracer.trace_scope("not-recorded"):
        pass
    perf_tracer.save(force=True)
    assert not _traces(_config(tmp_path), 1).exists()


def test_constructing_a_perf_tracer_configures_like_areal(tmp_path):
    config = _config(tmp_path)
    tracer = perf_tracer.PerfTracer(config, rank=0)
    assert tracer._rank == 0
    with tracer.trace_scope("unit-block", category=Category.INSTR, args={"step": 1}):
        tracer.instant("inner-mark", args={"value": 42})
    tracer.instant("outer-mark")
    tracer.save()
    assert {"unit-block", "inner-mark", "outer-mark"} <= {e["name"] for e in _slices(_traces(config))}


# --- the Chrome trace AReaL users filter ----------------------------------------------------------

def test_scope_args_keep_their_own_keys_on_a_track_named_for_the_rank_and_role(tmp_path):
    config = _config(tmp_path)
    perf_tracer.configure(config, rank=1, role="rollout")
    with perf_tracer.trace_scope("gen", args={"global_step": 7, "batch": 4}):
        pass
    perf_tracer.save(force=True)
    (event,) = [e for e in _slices(_traces(config, 1, "rollout")) if e["name"] == "gen"]
    assert {k: event["args"][k] for k in ("global_step", "batch")} == {"global_step": 7, "batch": 4}
    assert not any(k.startswith("rl.args.") for k in event["args"])
    # The rank and role are the process track's (AReaL's process name), not repeated per line.
    assert _process_names(_traces(config, 1, "rollout"))[event["pid"]] == "[rollout] Rank 1, Process"


def test_instant_is_an_instant_event_inside_and_outside_a_scope(tmp_path):
    config = _config(tmp_path)
    perf_tracer.configure(config, rank=0)
    with perf_tracer.trace_scope("outer"):
        perf_tracer.instant("inside", args={"flag": True})
    perf_tracer.instant("outside", args={"flag": False})
    perf_tracer.save(force=True)
    marks = {e["name"]: e for e in _slices(_traces(config)) if e["name"] in ("inside", "outside")}
    assert {name: (e["ph"], e["args"]["flag"]) for name, e in marks.items()} == {
        "inside": ("i", True), "outside": ("i", False)}


def test_process_names_are_areal_process_names(tmp_path):
    config = _config(tmp_path)
    perf_tracer.configure(config, rank=3, role="actor")
    with perf_tracer.trace_scope("s"):
        pass
    perf_tracer.save(force=True)
    events = read_trace(_traces(config, 3, "actor"))
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    sort = {e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"}
    assert (names, sort) == ({"[actor] Rank 3, Process"}, {3})


def test_custom_category_strings_are_kept(tmp_path):
    config = _config(tmp_path)
    perf_tracer.configure(config, rank=0)
    with perf_tracer.trace_scope("rollout", category="rollout.sess-0"):
        pass
    perf_tracer.save(force=True)
    (event,) = [e for e in _slices(_traces(config)) if e["name"] == "rollout"]
    assert event["cat"] == "rollout.sess-0"
    assert "unknown_category" not in perf_tracer.diagnostics()


async def _two_sessions():
    async def one(session: str, delay: float) -> None:
        await asyncio.sleep(delay)
        async with perf_tracer.atrace_scope("session", category=f"session.{session}",
                                            args={"session_id": session}):
            for phase in ("rollout", "reward"):
                with perf_tracer.trace_scope(phase, args={"session_id": session}):
                    await asyncio.sleep(0.01)

    await asyncio.gather(one("sess-0", 0), one("sess-1", 0.005))


def test_concurrent_async_scopes_keep_their_args(tmp_path):
    config = _config(tmp_path)
    perf_tracer.configure(config, rank=0)
    asyncio.run(_two_sessions())
    perf_tracer.save()
    seen = {(e["args"].get("session_id"), e["name"]) for e in _slices(_traces(config))}
    assert {(s, n) for s in ("sess-0", "sess-1") for n in ("session", "rollout", "reward")} <= seen


# --- save_interval and profile_steps --------------------------------------------------------------

def test_save_writes_at_the_last_step_of_each_interval(tmp_path):
    config = _config(tmp_path, save_interval=3)
    tracer = perf_tracer.PerfTracer(config, rank=0)
    path = _traces(config)
    for step in (0, 1):
        tracer.instant(f"mark-{step}")
        tracer.save(step=step)
        assert not path.exists()
    tracer.instant("mark-2")
    tracer.save(step=2)
    assert {"mark-0", "mark-1", "mark-2"} <= {e["name"] for e in _slices(path)}
    tracer.instant("mark-3")
    tracer.save(step=3)
    tracer.save(force=True)
    assert "mark-3" in {e["name"] for e in _slices(path)}


def test_profile_steps_do_not_confine_recording(tmp_path):
    config = _config(tmp_path, profile_steps=[5])
    perf_tracer.configure(config, rank=0)
    for step in range(3):
        with perf_tracer.trace_scope("train_step", args={"global_step": step}):
            pass
    perf_tracer.save(force=True)
    steps = sorted(e["args"]["global_step"] for e in _slices(_traces(config)) if e["name"] == "train_step")
    assert steps == [0, 1, 2]


def test_enable_profiler_runs_a_torch_window_only_in_profile_steps(tmp_path):
    pytest.importorskip("torch")
    config = _config(tmp_path, profile_steps=[1])
    perf_tracer.configure(config, rank=0)
    for step in range(3):
        with perf_tracer.trace_scope("train_step", args={"global_step": step}, enable_profiler=True,
                                     profiler_args={"record_shapes": True}):
            with perf_tracer.trace_scope("inner", enable_profiler=True):  # nested: skipped
                sum(range(1000))
    perf_tracer.reset()
    traces = sorted(p.name for p in _areal_dir(config).glob("torch-*.trace.json.gz"))
    assert traces == ["torch-r0-step1-train_step.trace.json.gz"]
    assert not {k: v for k, v in perf_tracer.diagnostics().items() if k.startswith("torch")}


def test_trace_perf_takes_areal_profiler_arguments(tmp_path):
    config = _config(tmp_path)
    perf_tracer.configure(config, rank=0)

    @perf_tracer.trace_perf("update", category="compute", enable_profiler=False, profiler_args=None)
    def update() -> int:
        return 1

    @perf_tracer.trace_perf("aupdate", category="compute", enable_profiler=True)
    async def aupdate() -> int:
        return 2

    assert (update(), asyncio.run(aupdate())) == (1, 2)
    perf_tracer.save(force=True)
    assert {"update", "aupdate"} <= {e["name"] for e in _slices(_traces(config))}


def test_profiler_arguments_never_raise_with_tracing_off():
    with perf_tracer.trace_scope("x", enable_profiler=True, profiler_args={"with_stack": True}):
        pass

    @perf_tracer.trace_perf("y", enable_profiler=True, profiler_args={})
    def y() -> int:
        return 3

    assert y() == 3


# --- the session tracer object ----------------------------------------------------------------

def _session_config(root: Path) -> PerfTracerConfig:
    return _config(root, session_tracer=SessionTracerConfig(enabled=True, flush_threshold=1))


def test_session_tracer_records_phases_and_finalize(tmp_path):
    config = _session_config(tmp_path)
    perf_tracer.configure(config, rank=0)
    tracer = perf_tracer.get_session_tracer()
    task_id = tracer.register_task()
    session_id = tracer.register_session(task_id)
    perf_tracer.set_session_id(session_id)

    async def work() -> None:
        async with perf_tracer.atrace_session_phase("generate"):
            await asyncio.sleep(0.01)
        async with perf_tracer.atrace_session_phase("reward"):
            await asyncio.sleep(0.01)

    asyncio.run(work())
    tracer.record_event(session_id, SessionTraceEvent.FINALIZED, status="accepted")
    tracer.flush(force=True)
    (record,) = read_jsonl(_sessions(config))
    assert (record["status"], record["generate_s"] > 0, record["reward_s"] > 0) == ("accepted", True, True)
    assert [len(record["phases"][p]) for p in ("generate", "reward")] == [1, 1]


def test_session_tracer_marks_by_event_value_and_lists_open_sessions(tmp_path):
    config = _session_config(tmp_path)
    perf_tracer.configure(config, rank=0)
    tracer = perf_tracer.get_session_tracer()
    tracer.register_task(41)
    first, second = tracer.register_session(41), tracer.register_session(41)
    assert tracer.get_session_ids(41) == [first, second]
    tracer.record_event(first, SessionTraceEvent.GENERATE_START)
    tracer.record_event(first, "generate_end")
    tracer.increment_counter(first, "turns", 2)
    tracer.record_event(first, SessionTraceEvent.FINALIZED, status="rejected", reason="stale")
    assert tracer.get_session_ids(41) == [second]
    tracer.flush(force=True)
    (record,) = read_jsonl(_sessions(config))
    assert (record["task_id"], record["status"], record["reason"], record["counters"]) == (
        41, "rejected", "stale", {"turns": 2})


def test_workflow_executor_destroy_flushes_through_get_session_tracer(tmp_path):
    config = _session_config(tmp_path)
    perf_tracer.configure(config, rank=0)
    task = perf_tracer.register_task()
    session = perf_tracer.register_session(task)
    perf_tracer.trace_session_event("mark_finalized", session_id=session, status="accepted")
    perf_tracer.get_session_tracer().flush(force=True)  # what WorkflowExecutor.destroy() does
    assert [r["status"] for r in read_jsonl(_sessions(config))] == ["accepted"]


def test_a_failing_phase_still_records_its_end(tmp_path):
    config = _session_config(tmp_path)
    perf_tracer.configure(config, rank=0)
    tracer = perf_tracer.get_session_tracer()
    session_id = tracer.register_session(tracer.register_task())
    perf_tracer.set_session_id(session_id)

    async def failing() -> None:
        async with perf_tracer.atrace_session_phase("generate"):
            raise ValueError("simulated")

    with pytest.raises(ValueError):
        asyncio.run(failing())
    tracer.record_event(session_id, SessionTraceEvent.FINALIZED, status="failed")
    tracer.flush(force=True)
    (record,) = read_jsonl(_sessions(config))
    ((phase,),) = [record["phases"]["generate"]]
    assert phase["start_ts"] is not None and phase["end_ts"] is not None


# --- reconfiguration -------------------------------------------------------------------------

def test_a_scope_open_across_reset_and_configure_is_not_lost_silently(tmp_path):
    config = _config(tmp_path)
    perf_tracer.configure(config, rank=0)
    scope = perf_tracer.trace_scope("spans-the-reset")
    scope.__enter__()
    perf_tracer.reset()
    perf_tracer.configure(_config(tmp_path, trial_name="second"), rank=0)
    with perf_tracer.trace_scope("child-of-old-scope"):
        pass
    scope.__exit__(None, None, None)
    perf_tracer.save(force=True)
    second = {e["name"] for e in _slices(_traces(_config(tmp_path, trial_name="second")))}
    # The old configuration's span ends in the new one: recorded there, not lost.
    assert {"child-of-old-scope", "spans-the-reset"} <= second
    assert "spans_after_shutdown" not in perf_tracer.diagnostics()


def test_a_span_ending_with_no_configuration_in_force_is_counted():
    perf_tracer.configure({"enabled": True, "file_export": False}, rank=0)
    scope = perf_tracer.trace_scope("outlives-its-configuration")
    scope.__enter__()
    perf_tracer.shutdown()
    scope.__exit__(None, None, None)
    assert perf_tracer.diagnostics()["spans_after_shutdown"] == 1


def test_two_tracers_in_one_process_write_both_ranks_files(tmp_path):
    config = _config(tmp_path)
    first = perf_tracer.PerfTracer(config, rank=0)
    first.instant("rank0-mark")
    first.save()
    second = perf_tracer.PerfTracer(config, rank=1)
    second.instant("rank1-mark")
    second.save()
    ranks = {rank: {(e["name"], _process_names(_traces(config, rank))[e["pid"]]) for e in _slices(_traces(config, rank))}
             for rank in (0, 1)}
    assert ranks == {0: {("rank0-mark", "Rank 0, Process")}, 1: {("rank1-mark", "Rank 1, Process")}}


def test_the_workflow_executor_pattern_records_every_session(tmp_path):
    """AReaL's rollout path: submit() registers the task, the async task sets it,
    the workflow's sessions come from session_context(), phases from trace_session,
    and the executor finalizes the whole task by id."""
    config = _session_config(tmp_path)
    perf_tracer.configure(config, rank=0, role="rollout")

    class Workflow:
        @perf_tracer.session_context()
        async def one_sample(self, prompt: int) -> int:
            return await self.generate(prompt) + await self.reward(prompt)

        @perf_tracer.trace_session("generate")
        async def generate(self, prompt: int) -> int:
            await asyncio.sleep(0)
            return prompt

        @perf_tracer.trace_session("reward")
        async def reward(self, prompt: int) -> int:
            return 1

        async def arun_episode(self, prompt: int) -> list[int]:
            return list(await asyncio.gather(*(self.one_sample(prompt) for _ in range(4))))

    @perf_tracer.trace_perf("workflow_executor.rollout_batch", category="scheduler")
    def rollout_batch(prompts: list[int]) -> None:
        async def execute(task_id: int, prompt: int) -> None:
            perf_tracer.set_task_id(task_id)
            await Workflow().arun_episode(prompt)
            perf_tracer.trace_session_event("mark_finalized", task_id=task_id,
                                            status="accepted" if prompt % 2 else "rejected",
                                            reason=None if prompt % 2 else "rejected")

        async def run_all() -> None:
            await asyncio.gather(*(execute(i, p) for i, p in enumerate(prompts)))

        for task_id in range(len(prompts)):
            perf_tracer.register_task(task_id)
        asyncio.run(run_all())

    rollout_batch([1, 2, 3])
    perf_tracer.get_session_tracer().flush(force=True)  # WorkflowExecutor.destroy()
    path = _areal_dir(config) / "session_tracer" / "rollout" / "sessions-r0.jsonl"
    records = read_jsonl(path)
    by_task = {}
    for record in records:
        by_task.setdefault(record["task_id"], set()).add(record["status"])
    assert (len(records), by_task) == (12, {0: {"accepted"}, 1: {"rejected"}, 2: {"accepted"}})
    assert all(r["generate_s"] >= 0 and r["reward_s"] >= 0 for r in records)
