"""otel_rl.events: sglang-omni's request event recorder (JSONL file + span events)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from support.spans import one

import otel_rl
from otel_rl import events
from otel_rl._internal import keys

FIELDS = ["request_id", "stage", "event_name", "timestamp_ns", "run_id", "pid", "metadata"]


pytestmark = pytest.mark.usefixtures("recorder_stopped")


def read_events(event_dir) -> list[dict]:
    lines = []
    for name in sorted(os.listdir(event_dir)):
        if name.startswith("events_"):
            with open(os.path.join(event_dir, name), "rb") as f:
                lines.extend(json.loads(line) for line in f)
    return lines


def only_file(event_dir) -> str:
    (name,) = [n for n in os.listdir(event_dir) if n.startswith("events_")]
    return name


# --- the file ------------------------------------------------------------------------------
def test_an_event_is_one_jsonl_line_with_exactly_sglang_omnis_fields(tmp_path):
    events.start(run_id="demo-run", event_dir=str(tmp_path))
    before = time.time_ns()
    events.emit("scheduler_first_emit", request_id="req-123", stage="thinker", chunk_id=0)
    after = time.time_ns()
    events.stop()

    (line,) = read_events(tmp_path)
    assert list(line) == FIELDS == list(keys.EVENT_FIELDS)
    assert line["request_id"] == "req-123"
    assert line["stage"] == "thinker"
    assert line["event_name"] == "scheduler_first_emit"
    assert before <= line["timestamp_ns"] <= after
    assert line["run_id"] == "demo-run"
    assert line["pid"] == os.getpid()
    assert line["metadata"] == {"chunk_id": 0}
    assert only_file(tmp_path) == f"events_thinker_{os.getpid()}.jsonl"


def test_emit_while_inactive_is_a_no_op_that_creates_no_file(tmp_path):
    events.emit("request_admission", request_id="r", stage="coordinator")
    assert not events.is_active() and events.active_run_id() is None

    events.start(run_id="r1", event_dir=str(tmp_path / "events"))
    events.stop()
    events.emit("request_admission", request_id="r", stage="coordinator")

    assert os.listdir(tmp_path / "events") == []


def test_the_first_stage_names_the_file_and_later_stages_share_it(tmp_path):
    events.start(run_id="r", event_dir=str(tmp_path))
    events.emit("stage_hop_sent", request_id="a", stage="thinker")
    events.emit("stage_input_received", request_id="a", stage="talker", from_stage="thinker")

    assert only_file(tmp_path) == f"events_thinker_{os.getpid()}.jsonl"
    assert [e["stage"] for e in read_events(tmp_path)] == ["thinker", "talker"]


def test_a_stage_bound_when_starting_names_the_file(tmp_path):
    token = events.set_active_stage("code2wav")
    events.start(run_id="r", event_dir=str(tmp_path))
    events.reset_active_stage(token)
    events.emit("code2wav_first_audio", request_id="a", stage="talker")
    assert only_file(tmp_path) == f"events_code2wav_{os.getpid()}.jsonl"


def test_the_default_event_dir_is_the_run_directorys_events(traced):
    events.start(run_id="r")
    events.emit("request_admission", request_id="a", stage="coordinator")
    assert read_events(os.path.join(traced.run_dir, "events"))[0]["event_name"] == "request_admission"


def test_request_id_defaults_to_the_current_session_id(traced, tmp_path):
    otel_rl.set_task_id(otel_rl.register_task())
    session_id = otel_rl.register_session()
    otel_rl.set_session_id(session_id)
    events.start(run_id="r", event_dir=str(tmp_path))
    events.emit("engine_generate_start", stage="rollout")
    events.emit("engine_generate_end", request_id="explicit", stage="rollout")
    assert [e["request_id"] for e in read_events(tmp_path)] == [session_id, "explicit"]


# --- span events ---------------------------------------------------------------------------
def test_an_event_is_also_a_span_event_on_the_current_span(traced, tmp_path):
    events.start(run_id="demo", event_dir=str(tmp_path))
    with otel_rl.trace_scope("generate"):
        events.emit("scheduler_prefill_start", request_id="req-1", stage="thinker", batch_size=8)

    span = one(traced.spans(), "generate")
    (event,) = span["events"]
    assert event["name"] == "scheduler_prefill_start"
    assert event["attributes"] == {keys.REQUEST_ID: "req-1", keys.STAGE: "thinker",
                                   keys.PROFILE_RUN_ID: "demo", "rl.args.batch_size": 8}


def test_an_inactive_recorder_adds_no_span_event(traced):
    with otel_rl.trace_scope("generate"):
        events.emit("scheduler_prefill_start", request_id="req-1", stage="thinker")
    assert one(traced.spans(), "generate")["events"] == []


# --- active stage --------------------------------------------------------------------------
def test_the_bound_stage_is_used_and_an_explicit_stage_wins(tmp_path):
    events.start(run_id="r", event_dir=str(tmp_path))
    token = events.set_active_stage("thinker")
    events.emit("scheduler_queue_enter", request_id="a")
    events.emit("stage_dispatch", request_id="a", stage="talker")
    events.reset_active_stage(token)
    events.emit("terminal_response", request_id="a")
    assert [e["stage"] for e in read_events(tmp_path)] == ["thinker", "talker", "unknown"]


def test_an_event_without_a_stage_falls_back_to_the_starting_stage_then_unknown(tmp_path):
    events.start(run_id="r", event_dir=str(tmp_path / "named"), stage="coordinator")
    events.emit("request_admission", request_id="a")
    token = events.set_active_stage("thinker")
    events.emit("scheduler_queue_enter", request_id="a")  # a bound stage beats the starting one
    events.reset_active_stage(token)
    events.stop()
    assert [e["stage"] for e in read_events(tmp_path / "named")] == ["coordinator", "thinker"]

    events.start(run_id="s", event_dir=str(tmp_path / "unnamed"))
    events.emit("request_admission", request_id="b")
    (line,) = read_events(tmp_path / "unnamed")
    assert line["stage"] == "unknown"
    # "unknown" is the event's stage, not a name: the file takes the process's name.
    assert only_file(tmp_path / "unnamed") == f"events_process_{os.getpid()}.jsonl"


def test_the_stage_follows_asyncio_to_thread(tmp_path):
    events.start(run_id="r", event_dir=str(tmp_path))

    async def stage_task(name):
        events.set_active_stage(name)  # bound in this task's own context
        await asyncio.to_thread(events.emit, "preprocess_start", request_id=name)

    async def main():
        await asyncio.gather(stage_task("thinker"), stage_task("talker"))

    asyncio.run(main())
    assert sorted((e["request_id"], e["stage"]) for e in read_events(tmp_path)) == [
        ("talker", "talker"), ("thinker", "thinker")]


def test_the_stage_follows_an_executor_whose_threads_bind_it(tmp_path):
    events.start(run_id="r", event_dir=str(tmp_path))
    # A stage's worker pool binds the stage once per thread (the thread-local slot).
    with ThreadPoolExecutor(2, initializer=events.set_active_stage, initargs=("encoder",)) as pool:
        list(pool.map(lambda i: events.emit("encoder_start", request_id=str(i)), range(4)))
    assert {e["stage"] for e in read_events(tmp_path)} == {"encoder"}


def test_the_stage_follows_work_submitted_with_the_callers_context(tmp_path):
    events.start(run_id="r", event_dir=str(tmp_path))
    token = events.set_active_stage("thinker")
    with ThreadPoolExecutor(1) as pool:
        pool.submit(contextvars.copy_context().run, events.emit, "encoder_end",
                    request_id="a").result()
        pool.submit(events.emit, "encoder_end", request_id="b").result()  # context not copied
    events.reset_active_stage(token)
    assert [(e["request_id"], e["stage"]) for e in read_events(tmp_path)] == [
        ("a", "thinker"), ("b", "unknown")]


def test_a_plain_threads_binding_holds_in_code_it_runs_in_another_context(tmp_path):
    events.start(run_id="r", event_dir=str(tmp_path))
    both_bound = threading.Barrier(2)

    def scheduler(stage):
        events.set_active_stage(stage)
        both_bound.wait()  # the two threads' bindings overlap in time
        # A callback run in a fresh context (an event loop, a library's own
        # context) sees no ContextVar value: the thread-local slot answers.
        contextvars.Context().run(events.emit, "scheduler_first_emit", request_id=stage)

    threads = [threading.Thread(target=scheduler, args=(s,)) for s in ("thinker", "talker")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted((e["request_id"], e["stage"]) for e in read_events(tmp_path)) == [
        ("talker", "talker"), ("thinker", "thinker")]


def test_reset_restores_the_previous_stage_and_none_scrubs_both_slots():
    outer = events.set_active_stage("thinker")
    inner = events.set_active_stage("talker")
    events.reset_active_stage(inner)
    assert events.get_active_stage() == "thinker"

    events.reset_active_stage(None)
    assert events.get_active_stage() is None
    assert contextvars.Context().run(events.get_active_stage) is None  # thread-local scrubbed too
    events.reset_active_stage(outer)  # a stale token never raises


# --- metadata ----------------------------------------------------------------------------------
class HugeArray:
    """Looks like a tensor; touching its contents fails the test."""

    shape = (1 << 20, 1024)
    dtype = "float32"
    device = "cuda:0"

    def __iter__(self):
        raise AssertionError("materialised")

    def tolist(self):
        raise AssertionError("materialised")

    def item(self):
        raise AssertionError("materialised")


def test_tensors_and_arrays_in_metadata_are_summarised_never_materialised(tmp_path):
    torch = pytest.importorskip("torch")
    events.start(run_id="r", event_dir=str(tmp_path))
    events.emit("encoder_end", request_id="a", stage="encoder", huge=HugeArray(),
                tensor=torch.zeros(3, 4), array=np.zeros((2,), dtype=np.int64),
                scalar_tensor=torch.tensor(7), numpy_scalar=np.float32(0.5), modality="image")

    meta = read_events(tmp_path)[0]["metadata"]
    assert meta["huge"] == {"__tensor_summary__": True, "type": "HugeArray", "shape": [1 << 20, 1024],
                            "dtype": "float32", "device": "cuda:0"}
    assert meta["tensor"] == {"__tensor_summary__": True, "type": "Tensor", "shape": [3, 4],
                              "dtype": "torch.float32", "device": "cpu"}
    assert meta["array"]["shape"] == [2] and meta["array"]["__tensor_summary__"] is True
    assert meta["scalar_tensor"] == 7
    assert meta["numpy_scalar"] == 0.5
    assert meta["modality"] == "image"


def test_metadata_that_cannot_be_written_is_counted_never_raised(tmp_path):
    class Unprintable:
        def __repr__(self):
            raise RuntimeError("no repr")

    events.start(run_id="r", event_dir=str(tmp_path))
    events.emit("stage_complete", request_id="a", stage="s", bad=Unprintable())
    assert otel_rl.diagnostics().get("event_error") == 1


# --- lifecycle and faults ----------------------------------------------------------------------
def test_start_without_event_dir_or_configuration_is_a_clear_error():
    with pytest.raises(events.ProfilingError, match="event_dir"):
        events.start(run_id="r")
    assert not events.is_active()


def test_an_unwritable_event_dir_fails_at_start_with_its_reason(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the directory should be")

    with pytest.raises(events.ProfilingError, match="not writable") as info:
        events.start(run_id="r", event_dir=str(blocker / "events"))
    assert info.value.status == 400
    assert not events.is_active()


def test_a_full_disk_is_counted_and_never_raised(tmp_path):
    events.start(run_id="r", event_dir=str(tmp_path))
    os.symlink("/dev/full", tmp_path / f"events_thinker_{os.getpid()}.jsonl")  # writes: ENOSPC

    events.emit("scheduler_first_emit", request_id="a", stage="thinker")
    events.emit("scheduler_first_emit", request_id="b", stage="thinker")

    assert otel_rl.diagnostics()["events_lost"] == 2
    assert otel_rl.diagnostics()["event_write_error"] == 2
    assert events.status()["events_lost"] == 2 and events.is_active()


def test_an_event_dir_removed_mid_run_is_counted_and_writing_resumes_when_it_returns(tmp_path):
    event_dir = tmp_path / "events"
    events.start(run_id="r", event_dir=str(event_dir))
    os.rmdir(event_dir)
    event_dir.write_text("")  # now a file: the events file cannot be opened

    events.emit("lost", request_id="a", stage="s")
    assert otel_rl.diagnostics()["events_lost"] == 1

    event_dir.unlink()
    event_dir.mkdir()
    events.emit("kept", request_id="a", stage="s")
    assert [e["event_name"] for e in read_events(event_dir)] == ["kept"]


def test_stop_with_another_run_id_is_a_reported_no_op(tmp_path):
    events.start(run_id="a", event_dir=str(tmp_path))

    assert events.stop("b") is False
    assert events.is_active() and events.active_run_id() == "a"
    assert otel_rl.diagnostics()["profile_run_id_mismatch"] == 1

    assert events.stop() is True  # no run id: a wildcard
    assert not events.is_active()


def test_starting_the_active_run_again_joins_it(tmp_path):
    assert events.start(run_id="a", event_dir=str(tmp_path)) == "a"
    assert events.start(run_id="a", event_dir=str(tmp_path / "ignored")) == "a"
    assert events.start(event_dir=str(tmp_path / "ignored")) == "a"  # no run id: joins too
    assert events.status()["event_dir"] == str(tmp_path)
    assert otel_rl.diagnostics().get("profile_run_switched") is None


def test_starting_another_run_switches_to_it_with_a_warning(tmp_path, caplog):
    events.start(run_id="a", event_dir=str(tmp_path / "a"), stage="thinker")
    events.emit("stage_dispatch", request_id="x")
    with caplog.at_level("WARNING", logger="otel_rl"):
        assert events.start(run_id="b", event_dir=str(tmp_path / "b"), stage="talker") == "b"
    events.emit("stage_dispatch", request_id="y")

    assert "switching to run_id 'b'" in caplog.text
    assert otel_rl.diagnostics()["profile_run_switched"] == 1
    assert events.active_run_id() == "b"
    assert [(e["run_id"], e["stage"]) for e in read_events(tmp_path / "a")] == [("a", "thinker")]
    assert [(e["run_id"], e["stage"]) for e in read_events(tmp_path / "b")] == [("b", "talker")]


def test_a_switch_to_an_unwritable_directory_keeps_the_active_run(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    events.start(run_id="a", event_dir=str(tmp_path / "a"))
    with pytest.raises(events.ProfilingError, match="not writable"):
        events.start(run_id="b", event_dir=str(blocker / "events"))
    assert events.active_run_id() == "a"


def test_a_run_id_is_generated_when_omitted(tmp_path):
    run_id = events.start(event_dir=str(tmp_path))
    assert run_id and events.active_run_id() == run_id
    events.emit("x", request_id="a", stage="s")
    assert read_events(tmp_path)[0]["run_id"] == run_id
