"""otel_rl.events as a drop-in for sglang-omni's request event recorder.

Each test states one behaviour that sglang-omni's recorder documents, or that
its call sites (launcher, stages, schedulers, duplex session events) rely on,
and checks it against ``otel_rl.events``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os

import pytest
from support import read_jsonl

import otel_rl
from otel_rl import events
from otel_rl._internal import keys

FIELDS = ["request_id", "stage", "event_name", "timestamp_ns", "run_id", "pid", "metadata"]


pytestmark = pytest.mark.usefixtures("recorder_stopped")


@pytest.fixture
def rec():
    return events.get_recorder()


# --- module surface -------------------------------------------------------------------------------
def test_the_module_offers_sglang_omnis_recorder_names():
    for name in ("RequestEvent", "RequestEventRecorder", "get_recorder", "emit", "set_active_stage",
                 "reset_active_stage", "get_active_stage", "json_default", "read_host_boot_id",
                 "emit_model_path", "emit_model_path_start", "emit_model_path_end"):
        assert callable(getattr(events, name)), name
        assert name in events.__all__, name


def test_get_recorder_always_returns_the_same_recorder():
    assert events.get_recorder() is events.get_recorder()
    assert isinstance(events.get_recorder(), events.RequestEventRecorder)


def test_the_process_recorder_is_the_one_module_functions_drive(rec, tmp_path):
    path = rec.start(run_id="r", event_dir=str(tmp_path), stage="coordinator")
    assert events.is_active() and events.active_run_id() == "r"
    events.emit(request_id="q", stage=None, event_name="request_admission")
    assert events.stop() is True and not rec.is_active()
    assert [e["event_name"] for e in read_jsonl(path)] == ["request_admission"]


# --- emit: sglang-omni's call form ----------------------------------------------------------------
def test_the_keyword_only_call_writes_one_line_with_exactly_the_seven_fields(rec, tmp_path):
    path = rec.start("demo-run", str(tmp_path), "thinker")
    events.emit(request_id="req-123", stage="thinker", event_name="scheduler_first_emit",
                metadata={"chunk_id": 0})
    (line,) = read_jsonl(path)
    assert list(line) == FIELDS
    assert (line["request_id"], line["stage"], line["event_name"], line["run_id"], line["pid"]) == (
        "req-123", "thinker", "scheduler_first_emit", "demo-run", os.getpid())


def test_a_metadata_dict_is_the_events_metadata(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "thinker")
    events.emit(request_id="a", stage="thinker", event_name="stage_stream_chunk_sent",
                metadata={"to_stage": "talker", "chunk_id": 3, "modality": "text"})
    assert read_jsonl(path)[0]["metadata"] == {"to_stage": "talker", "chunk_id": 3, "modality": "text"}


def test_metadata_none_records_an_empty_metadata_object(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "thinker")
    events.emit(request_id="a", stage="thinker", event_name="stage_dispatch", metadata=None)
    assert read_jsonl(path)[0]["metadata"] == {}


def test_a_given_timestamp_is_the_events_time_in_the_file(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "coordinator")
    events.emit(request_id="a", stage="coordinator", event_name="session_unit_ready",
                timestamp_ns=1_717_000_000_123_456_789)
    (line,) = read_jsonl(path)
    assert line["timestamp_ns"] == 1_717_000_000_123_456_789
    assert line["metadata"] == {}  # the time is not metadata


def test_a_given_timestamp_is_the_span_events_time(traced, tmp_path):
    events.start(run_id="r", event_dir=str(tmp_path))
    with otel_rl.trace_scope("generate"):
        events.emit(request_id="a", stage="thinker", event_name="scheduler_prefill_start",
                    timestamp_ns=1_700_000_000_000_000_042)
    traced.spans()
    (span,) = [s for s in traced.exporter.get_finished_spans() if s.name == "generate"]
    (event,) = span.events
    assert event.timestamp == 1_700_000_000_000_000_042
    assert event.attributes[keys.STAGE] == "thinker"


def test_the_metadata_dict_is_also_the_span_events_arguments(traced, tmp_path):
    events.start(run_id="r", event_dir=str(tmp_path))
    with otel_rl.trace_scope("encode"):
        events.emit(request_id="a", stage="encoder", event_name="encoder_end",
                    metadata={"modality": "image", "batch_size": 2})
    (span,) = [s for s in traced.spans() if s["name"] == "encode"]
    attrs = span["events"][0]["attributes"]
    assert attrs["rl.args.modality"] == "image" and attrs["rl.args.batch_size"] == 2
    assert "rl.args.metadata" not in attrs


def test_otel_rls_short_form_still_works_beside_it(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "engine")
    events.emit("scheduler_queue_enter", "req-1", "engine", batch=4)  # positional id and stage
    events.emit("stage_complete", request_id="req-1", stage="engine", output_tokens=9)
    assert [(e["event_name"], e["request_id"], e["metadata"]) for e in read_jsonl(path)] == [
        ("scheduler_queue_enter", "req-1", {"batch": 4}),
        ("stage_complete", "req-1", {"output_tokens": 9})]


def test_keyword_metadata_is_added_to_a_metadata_dict(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "s")
    events.emit("stage_complete", request_id="a", metadata={"terminal": True}, next="talker")
    assert read_jsonl(path)[0]["metadata"] == {"terminal": True, "next": "talker"}


def test_a_metadata_value_that_is_not_a_mapping_stays_a_key_named_metadata(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "s")
    events.emit("note", request_id="a", metadata="free text")
    assert read_jsonl(path)[0]["metadata"] == {"metadata": "free text"}


def test_a_timestamp_that_is_not_a_number_is_reported_and_the_current_time_used(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "s")
    before = events.time.time_ns()
    events.emit(request_id="a", stage="s", event_name="x", timestamp_ns="soon")
    assert read_jsonl(path)[0]["timestamp_ns"] >= before
    assert otel_rl.diagnostics()["event_bad_timestamp"] == 1


def test_an_event_without_an_event_name_is_dropped_and_reported_never_raised(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "s")
    events.emit(request_id="a", stage="s")
    rec.emit(request_id="a", stage="s", metadata={"k": 1})
    assert not os.path.exists(path)
    assert otel_rl.diagnostics()["event_error"] == 2


# --- recorder lifecycle ---------------------------------------------------------------------------
def test_start_returns_the_absolute_path_named_after_the_stage_and_pid(rec, tmp_path):
    path = rec.start(run_id="r0", event_dir=str(tmp_path), stage="encoder")
    assert os.path.isabs(path)
    assert path == os.path.join(str(tmp_path), f"events_encoder_{os.getpid()}.jsonl")


def test_start_takes_run_id_event_dir_and_stage_positionally(rec, tmp_path):
    path = rec.start("run-unit", str(tmp_path), "tts_engine")
    assert rec.active_run_id() == "run-unit"
    assert os.path.basename(path).startswith("events_tts_engine_")


def test_start_accepts_a_path_object_and_expands_the_home_directory(rec, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = rec.start("r", tmp_path / "a", "s")
    assert os.path.dirname(path) == str(tmp_path / "a")
    rec.stop()
    path = rec.start("r2", "~/b", "s")
    assert os.path.dirname(path) == str(tmp_path / "b")


def test_the_file_is_created_with_the_first_event(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "s")
    assert not os.path.exists(path)
    rec.emit(request_id="a", stage="s", event_name="x")
    assert os.path.exists(path)


def test_is_active_active_run_id_and_active_path_follow_the_run(rec, tmp_path):
    assert (rec.is_active(), rec.active_run_id(), rec.active_path()) == (False, None, None)
    path = rec.start("r", str(tmp_path), "s")
    assert (rec.is_active(), rec.active_run_id(), rec.active_path()) == (True, "r", path)
    rec.stop()
    assert (rec.is_active(), rec.active_run_id(), rec.active_path()) == (False, None, None)


def test_stop_returns_the_path_it_closed(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "s")
    assert rec.stop() == path


def test_stop_while_inactive_returns_none(rec):
    assert rec.stop() is None


def test_stop_for_another_run_id_keeps_recording_and_returns_none(rec, tmp_path):
    rec.start("r0", str(tmp_path), "s")
    assert rec.stop(run_id="other") is None
    assert rec.is_active() and rec.active_run_id() == "r0"
    assert otel_rl.diagnostics()["profile_run_id_mismatch"] == 1


def test_stop_without_a_run_id_stops_whatever_is_active(rec, tmp_path):
    rec.start("r0", str(tmp_path), "s")
    rec.stop()
    assert not rec.is_active() and not events.is_active()


def test_the_launchers_stop_pattern_stops_the_active_run(rec, tmp_path):
    rec.start("demo", str(tmp_path), "coordinator")
    requested = None  # a body without run_id
    active = rec.active_run_id() if rec.is_active() else None
    if rec.is_active() and (requested is None or active == requested):
        rec.stop(run_id=active)
    assert not rec.is_active()


def test_stages_joining_the_run_share_the_first_stages_file(rec, tmp_path):
    first = rec.start("r0", str(tmp_path), "preprocessing")
    assert rec.start("r0", str(tmp_path), "image_encoder") == first
    assert rec.start("r0", str(tmp_path), "thinker") == first
    for stage in ("preprocessing", "image_encoder", "thinker"):
        rec.emit(request_id="a", stage=stage, event_name="stage_dispatch")
    assert [e["stage"] for e in read_jsonl(first)] == ["preprocessing", "image_encoder", "thinker"]
    assert os.listdir(tmp_path) == [os.path.basename(first)]


def test_starting_another_run_rotates_to_it_with_a_warning(rec, tmp_path, caplog):
    old = rec.start("r0", str(tmp_path / "r0"), "thinker")
    rec.emit(request_id="a", stage="thinker", event_name="before")
    with caplog.at_level("WARNING", logger="otel_rl"):
        new = rec.start("r1", str(tmp_path / "r1"), "thinker")
    rec.emit(request_id="a", stage="thinker", event_name="after")
    assert rec.active_run_id() == "r1" and rec.active_path() == new != old
    assert "switching to run_id 'r1'" in caplog.text
    assert [(e["run_id"], e["event_name"]) for e in read_jsonl(old)] == [("r0", "before")]
    assert [(e["run_id"], e["event_name"]) for e in read_jsonl(new)] == [("r1", "after")]


def test_close_unlocked_ends_the_run(rec, tmp_path):
    rec.start("r", str(tmp_path), "s")
    rec.close_unlocked()
    assert not rec.is_active() and not events.is_active()


# --- independent recorders ------------------------------------------------------------------------
def test_a_new_recorder_is_inactive_and_its_emit_is_a_no_op(tmp_path):
    fresh = events.RequestEventRecorder()
    fresh.emit(request_id="r1", stage="s", event_name="anything")
    assert fresh.is_active() is False and fresh.active_path() is None


def test_a_new_recorder_runs_independently_of_the_process_recorder(tmp_path):
    fresh = events.RequestEventRecorder()
    path = fresh.start("own", str(tmp_path), "s")
    fresh.emit(request_id="a", stage="s", event_name="mine")
    events.emit(request_id="a", stage="s", event_name="not_recorded")  # the process recorder is off
    assert not events.is_active() and events.get_recorder().active_run_id() is None
    fresh.stop()
    assert [e["event_name"] for e in read_jsonl(path)] == ["mine"]


# --- a time observed now, recorded later (duplex session events) ---------------------------------
def test_capturing_a_run_timestamp_while_inactive_gives_none(rec):
    assert rec.capture_active_run_timestamp_ns() is None


def test_capturing_a_run_timestamp_gives_the_run_id_and_the_time(rec, tmp_path):
    rec.start("r", str(tmp_path), "coordinator")
    before = events.time.time_ns()
    run_id, ts = rec.capture_active_run_timestamp_ns()
    assert run_id == "r" and before <= ts <= events.time.time_ns()


def test_an_event_expected_for_the_active_run_is_recorded_at_its_time(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "coordinator")
    run_id, ts = rec.capture_active_run_timestamp_ns()
    rec.emit(request_id="a", stage="coordinator", event_name="session_unit_ready",
             timestamp_ns=ts, expected_run_id=run_id)
    assert [(e["event_name"], e["timestamp_ns"]) for e in read_jsonl(path)] == [("session_unit_ready", ts)]


def test_an_event_expected_for_an_earlier_run_is_dropped(rec, tmp_path):
    rec.start("r0", str(tmp_path / "r0"), "coordinator")
    run_id, ts = rec.capture_active_run_timestamp_ns()
    path = rec.start("r1", str(tmp_path / "r1"), "coordinator")
    rec.emit(request_id="a", stage="coordinator", event_name="session_unit_ready",
             timestamp_ns=ts, expected_run_id=run_id)
    assert not os.path.exists(path)
    assert otel_rl.diagnostics()["events_other_run"] == 1


# --- stage attribution ----------------------------------------------------------------------------
def test_stage_none_takes_the_start_stage_where_none_is_bound(rec, tmp_path):
    path = rec.start("r0", str(tmp_path), "thinker")
    events.emit(request_id="r1", stage=None, event_name="scheduler_prefill_start")
    assert read_jsonl(path)[0]["stage"] == "thinker"


def test_stage_none_takes_the_first_stage_to_start_not_a_later_joiner(rec, tmp_path):
    path = rec.start("r0", str(tmp_path), "preprocessing")
    rec.start("r0", str(tmp_path), "decode")
    events.emit(request_id="r1", stage=None, event_name="from_main")
    assert read_jsonl(path)[0]["stage"] == "preprocessing"


def test_stage_none_takes_the_bound_stage_before_the_start_stage(rec, tmp_path):
    path = rec.start("r0", str(tmp_path), "preprocessing")
    token = events.set_active_stage("encoder")
    events.emit(request_id="r1", stage=None, event_name="encoder_start")
    events.reset_active_stage(token)
    assert read_jsonl(path)[0]["stage"] == "encoder"


def test_stage_none_is_unknown_without_a_binding_or_start_stage(rec, tmp_path):
    rec.start("r0", str(tmp_path))
    events.emit(request_id="r1", stage=None, event_name="x")
    assert [e["stage"] for e in read_jsonl(tmp_path / os.listdir(tmp_path)[0])] == ["unknown"]


def test_an_explicit_stage_wins_over_the_binding(rec, tmp_path):
    path = rec.start("r0", str(tmp_path), "coordinator")
    token = events.set_active_stage("thinker")
    events.emit(request_id="r1", stage="talker", event_name="stage_hop_sent")
    events.reset_active_stage(token)
    assert read_jsonl(path)[0]["stage"] == "talker"


def test_set_active_stage_takes_its_argument_by_the_name_stage():
    token = events.set_active_stage(stage="thinker")
    assert events.get_active_stage() == "thinker"
    events.reset_active_stage(token)
    assert events.get_active_stage() is None


def test_reset_with_none_clears_both_slots_under_sglang_omnis_names():
    events.set_active_stage("leaks")
    assert events._active_stage_cv.get() == "leaks"
    assert getattr(events._thread_active_stage, "stage", None) == "leaks"
    events.reset_active_stage(None)
    assert events._active_stage_cv.get() is None
    assert getattr(events._thread_active_stage, "stage", None) is None


def test_reset_with_a_bare_context_variable_token_restores_the_context_value():
    outer = events.set_active_stage("outer")
    token = events._active_stage_cv.set("inner")
    events.reset_active_stage(token)
    assert events._active_stage_cv.get() == "outer"
    events.reset_active_stage(outer)


def test_a_binding_follows_a_copied_context_into_another_thread(rec, tmp_path):
    import threading

    path = rec.start("r0", str(tmp_path), "first")
    token = events.set_active_stage("encoder")
    ctx = contextvars.copy_context()
    events.reset_active_stage(token)
    worker = threading.Thread(target=ctx.run, args=(events.emit,),
                              kwargs={"request_id": "a", "stage": None, "event_name": "x"})
    worker.start()
    worker.join()
    assert read_jsonl(path)[0]["stage"] == "encoder"


# --- metadata serialisation -----------------------------------------------------------------------
class BigTensor:
    """Shaped like a GPU tensor; reading its contents fails the test."""

    shape = (1024, 4096)
    dtype = "torch.bfloat16"
    device = "cuda:0"

    def tolist(self):
        raise AssertionError("materialised")

    def item(self):
        raise AssertionError("materialised")


def test_json_default_summarises_a_tensor_without_reading_it():
    assert events.json_default(BigTensor()) == {
        "__tensor_summary__": True, "type": "BigTensor", "shape": [1024, 4096],
        "dtype": "torch.bfloat16", "device": "cuda:0"}


def test_json_default_turns_a_zero_d_value_into_its_scalar():
    class Scalar:
        shape = ()
        dtype = "float32"

        def item(self):
            return 3.5

    assert events.json_default(Scalar()) == 3.5


def test_json_default_falls_back_to_repr():
    class Thing:
        def __repr__(self):
            return "<thing>"

    assert events.json_default(Thing()) == "<thing>"


def test_a_tensor_nested_in_metadata_is_summarised_too(rec, tmp_path):
    path = rec.start("r", str(tmp_path), "encoder")
    rec.emit(request_id="a", stage="encoder", event_name="encoder_end",
             metadata={"outputs": {"hidden": BigTensor()}, "items": [BigTensor()]})
    meta = read_jsonl(path)[0]["metadata"]
    assert meta["outputs"]["hidden"]["__tensor_summary__"] is True
    assert meta["items"][0]["shape"] == [1024, 4096]


# --- RequestEvent -----------------------------------------------------------------------------------
def test_request_event_to_dict_has_the_line_fields_in_file_order():
    ev = events.RequestEvent(request_id="r1", stage="thinker", event_name="thinker_first_token",
                             timestamp_ns=1234, run_id="run_x", pid=99, metadata={"chunk_id": 7})
    assert list(ev.to_dict()) == FIELDS
    assert ev.to_dict()["metadata"] == {"chunk_id": 7}


def test_request_event_defaults_and_immutability():
    ev = events.RequestEvent(request_id="r", stage="s", event_name="e", timestamp_ns=1)
    assert (ev.run_id, ev.pid, ev.metadata) == (None, None, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.stage = "other"  # type: ignore[misc]


# --- model-path helpers -----------------------------------------------------------------------------
def test_model_path_helpers_read_no_clock_while_inactive(monkeypatch):
    def no_clock():
        raise AssertionError("clock read while inactive")

    monkeypatch.setattr(events.time, "monotonic_ns", no_clock)
    events.emit_model_path_start("request-off")
    events.emit_model_path_end("request-off", status="success")


def test_model_path_events_carry_a_monotonic_reading_and_the_boot_id(rec, tmp_path, monkeypatch):
    path = rec.start("run-unit", str(tmp_path), "tts_engine")
    monkeypatch.setattr(events.time, "monotonic_ns", lambda: 123456)
    monkeypatch.setattr(events, "read_host_boot_id", lambda: "boot-test")
    events.emit_model_path_start("request-on")
    events.emit_model_path_end("request-on", status="success")
    got = read_jsonl(path)
    assert [e["event_name"] for e in got] == ["model_path_start", "model_path_end"]
    assert all(e["metadata"]["clock"] == "CLOCK_MONOTONIC" and e["metadata"]["monotonic_ns"] == 123456
               and e["metadata"]["host_boot_id"] == "boot-test" for e in got)
    assert got[-1]["metadata"]["status"] == "success"


# --- bad input: accepted, ignored, counted -----------------------------------------------------------
def test_an_unknown_start_keyword_is_accepted_ignored_and_counted(rec, tmp_path):
    path = rec.start(run_id="r", event_dir=str(tmp_path), stage="s", enable_nvtx=False)
    assert rec.active_path() == path
    assert otel_rl.diagnostics()["ignored_argument"] == 1


def test_an_unknown_stop_keyword_is_accepted_ignored_and_counted(rec, tmp_path):
    rec.start("r", str(tmp_path), "s")
    assert rec.stop(run_id="r", timeout_s=3.0) is not None
    assert otel_rl.diagnostics()["ignored_argument"] == 1
