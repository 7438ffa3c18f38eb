"""``record_server_timings``: an inference engine's own timings as child spans.

The ``capture`` clock reads 1 s, 2 s, ... one step per read (support/capture.py);
``record_server_timings`` reads it once, as "now", through the module's
``now_ns`` seam, which these tests point at the same fake clock. Engine
timestamps are chosen inside the ``generate`` phase, which starts at 4 s:
``start_session()`` reads the clock three times first.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support.capture import MAIN_THREAD as MAIN
from support.capture import S

import otel_rl
from otel_rl._internal import guard
from otel_rl._internal.recording import server_timings
from otel_rl.inference import record_server_timings

IDS = {"rl.task.id": 0, "rl.session.id": 0}
MS = S // 1000
#: What a monotonic reading of 100 s is on the test's wall clock: 4 s.
MONOTONIC_OFFSET = 4 * S - 100 * S


@pytest.fixture(autouse=True)
def clocks(capture, monkeypatch):
    monkeypatch.setattr(server_timings, "now_ns", capture.clock)
    monkeypatch.setattr(server_timings, "monotonic_offset_ns", lambda: MONOTONIC_OFFSET)
    guard.clear()


def start_session():
    task_id = otel_rl.register_task()  # 1 s
    otel_rl.set_task_id(task_id)
    session_id = otel_rl.register_session()  # 2 s, made current at 3 s
    otel_rl.set_session_id(session_id)
    return session_id


def generate(end_s):
    """The generate phase (span 4), from 4 s."""
    return {"name": "generate", "trace_id": 1, "span_id": 4, "parent_id": 2,
            "start_ns": 4 * S, "end_ns": end_s * S,
            "attributes": {**MAIN, **IDS, "rl.span.kind": "phase", "rl.phase": "generate"}}


def child(name, span_id, start_ns, end_ns, engine, placement, **usage):
    """A server-timing span under the generate phase."""
    attributes = {**MAIN, **IDS, "rl.span.kind": "server_timing", "rl.server.engine": engine,
                  "rl.server.placement": placement}
    attributes.update({f"gen_ai.usage.{k.replace('__', '.')}": v for k, v in usage.items()})
    return {"name": name, "trace_id": 1, "span_id": span_id, "parent_id": 4,
            "start_ns": start_ns, "end_ns": end_ns, "attributes": attributes}


def session_spans(capture):
    """The spans of the session's trace (trace 1), by start time: run-level spans of
    other traces (gauges of sessions in flight at a flush) are not these tests' business."""
    return [span for span in capture.spans() if span["trace_id"] == 1]


def record_in_generate(meta, engine=None):
    """Calls record_server_timings inside a generate phase (4 s); returns its result."""
    start_session()
    with otel_rl.trace_session_phase("generate"):  # 4 s; now is read at 5 s; ends at 6 s
        return record_server_timings(meta, engine)


#: SGLang ``meta_info`` of a server run with ``--enable-metrics``: wall-clock
#: timestamps in seconds and durations in seconds.
SGLANG_META = {
    "id": "r1", "finish_reason": {"type": "stop"}, "prompt_tokens": 12, "completion_tokens": 30,
    "cached_tokens": 8, "reasoning_tokens": 0, "e2e_latency": 0.95,
    "queue_time": 0.125, "forward_entry_time": 4.25, "prefill_finished_time": 4.5,
    "prefill_waiting_latency": None, "prefill_launch_latency": 0.2,
    "request_received_ts": 4.0625, "request_finished_ts": 4.875, "inference_time": 0.625,
}


@pytest.mark.parametrize("shape", ["meta_info", "response"])
def test_sglang_meta_info_becomes_queue_prefill_and_decode_under_the_generate_span(capture, shape):
    meta = SGLANG_META if shape == "meta_info" else {"text": "...", "output_ids": [1], "meta_info": SGLANG_META}
    assert record_in_generate(meta) == 3
    assert session_spans(capture) == [
        generate(6),
        child("queue", 5, 4125 * MS, 4250 * MS, "sglang", "measured"),
        child("prefill", 6, 4250 * MS, 4500 * MS, "sglang", "measured", input_tokens=12,
              cache_read__input_tokens=8),
        child("decode", 7, 4500 * MS, 4875 * MS, "sglang", "measured", output_tokens=30),
    ]
    assert otel_rl.diagnostics() == {}


def test_sglang_kv_transfer_follows_prefill_and_a_missing_finish_ends_decode_now(capture):
    meta = {k: v for k, v in SGLANG_META.items() if k != "request_finished_ts"}
    meta["kv_transfer"] = {"latency_ms": 62.5, "total_mb": 3.0, "speed_gb_s": 0.05}
    assert record_in_generate(meta, engine="sglang") == 4
    assert session_spans(capture) == [
        generate(6),
        child("queue", 5, 4125 * MS, 4250 * MS, "sglang", "measured"),
        child("prefill", 6, 4250 * MS, 4500 * MS, "sglang", "measured", input_tokens=12,
              cache_read__input_tokens=8),
        child("kv_transfer", 7, 4500 * MS, 4562500 * 1000, "sglang", "inferred"),
        child("decode", 8, 4500 * MS, 5 * S, "sglang", "inferred", output_tokens=30),
    ]


def vllm_request_output():
    """A vLLM V1 ``RequestOutput``: its ``metrics`` is a ``RequestStateStats`` whose
    ``*_ts`` are the engine core's ``time.monotonic()`` (100 s here is 4 s on the wall)."""
    stats = SimpleNamespace(num_generation_tokens=4, arrival_time=4.0, queued_ts=100.25,
                            scheduled_ts=100.5, first_token_ts=100.625, last_token_ts=100.875,
                            first_token_latency=0.625, is_corrupted=False)
    return SimpleNamespace(request_id="0", prompt="hi", prompt_token_ids=[1, 2, 3, 4, 5],
                           outputs=[SimpleNamespace(index=0, token_ids=[7, 8, 9, 10])],
                           finished=True, num_cached_tokens=2, metrics=stats)


@pytest.mark.parametrize("shape", ["RequestOutput", "metrics"])
def test_vllm_monotonic_timestamps_move_onto_the_wall_clock(capture, shape):
    output = vllm_request_output()
    meta = output if shape == "RequestOutput" else output.metrics
    assert record_in_generate(meta) == 3
    # The tokens of the prompt live on the RequestOutput, not on its metrics.
    prompt = {"input_tokens": 5, "cache_read__input_tokens": 2} if shape == "RequestOutput" else {}
    assert session_spans(capture) == [
        generate(6),
        child("queue", 5, 4250 * MS, 4500 * MS, "vllm", "measured"),
        child("prefill", 6, 4500 * MS, 4625 * MS, "vllm", "measured", **prompt),
        child("decode", 7, 4625 * MS, 4875 * MS, "vllm", "measured", output_tokens=4),
    ]


def test_vllm_v0_request_metrics_are_wall_clock(capture):
    metrics = SimpleNamespace(arrival_time=4.125, last_token_time=4.75, first_scheduled_time=4.25,
                              first_token_time=4.5, time_in_queue=0.125, finished_time=4.8125,
                              scheduler_time=0.001, model_forward_time=None, model_execute_time=None)
    assert record_in_generate(metrics, engine="vllm") == 3
    assert session_spans(capture) == [
        generate(6),
        child("queue", 5, 4125 * MS, 4250 * MS, "vllm", "measured"),
        child("prefill", 6, 4250 * MS, 4500 * MS, "vllm", "measured"),
        child("decode", 7, 4500 * MS, 4750 * MS, "vllm", "measured"),
    ]


def test_vllm_server_durations_are_laid_back_to_back_ending_at_the_call(capture):
    response = {
        "id": "cmpl-1", "object": "chat.completion", "choices": [],
        "usage": {"prompt_tokens": 42, "completion_tokens": 128, "total_tokens": 170,
                  "prompt_tokens_details": {"cached_tokens": 32}},
        "metrics": {"time_to_first_token_ms": 250.0, "generation_time_ms": 500.0,
                    "queue_time_ms": 125.0, "mean_itl_ms": 3.9, "tokens_per_second": 170.6},
    }
    assert record_in_generate(response) == 3
    assert session_spans(capture) == [
        generate(6),
        child("queue", 5, 4125 * MS, 4250 * MS, "vllm", "inferred"),
        child("prefill", 6, 4250 * MS, 4500 * MS, "vllm", "inferred", input_tokens=42,
              cache_read__input_tokens=32),
        child("decode", 7, 4500 * MS, 5 * S, "vllm", "inferred", output_tokens=128),
    ]


def test_missing_fields_give_no_span_and_no_diagnostic(capture):
    # SGLang without --enable-metrics: token counts and e2e_latency, no stage timings.
    plain = {"id": "r1", "prompt_tokens": 5, "completion_tokens": 3, "cached_tokens": 0, "e2e_latency": 0.4}
    # prefill_finished_time missing: the end of prefill and the start of decode are unknown.
    partial = {k: v for k, v in SGLANG_META.items() if k != "prefill_finished_time"}
    # vLLM's server with n > 1: metrics is null.
    no_metrics = {"usage": {"prompt_tokens": 4, "completion_tokens": 8}, "metrics": None}
    start_session()
    with otel_rl.trace_session_phase("generate"):  # 4 s
        assert record_server_timings(plain) == 0  # now: 5 s
        assert record_server_timings(partial) == 1  # 6 s
        assert record_server_timings(no_metrics) == 0  # 7 s
        assert record_server_timings(SimpleNamespace(metrics=None, queued_ts=0.0)) == 0  # 8 s
    assert session_spans(capture) == [
        generate(9), child("queue", 5, 4125 * MS, 4250 * MS, "sglang", "measured"),
    ]
    assert otel_rl.diagnostics() == {}


def test_unusable_values_are_left_out_and_counted_never_raised(capture):
    meta = dict(SGLANG_META, queue_time="0.1", forward_entry_time=float("nan"), cached_tokens=-3,
                completion_tokens=True, prompt_tokens=2.5)
    assert record_in_generate(meta) == 1  # decode alone: prefill_finished_time to request_finished_ts
    assert session_spans(capture) == [
        generate(6), child("decode", 5, 4500 * MS, 4875 * MS, "sglang", "measured"),
    ]
    assert otel_rl.diagnostics() == {"server_timings_bad_value": 5}


def test_a_stage_ending_before_it_starts_is_left_out_and_counted(capture):
    meta = {"forward_entry_time": 4.5, "prefill_finished_time": 4.25}
    assert record_in_generate(meta) == 1
    # prefill is dropped; decode, whose start alone is known, is the last stage: it ends now.
    assert session_spans(capture) == [generate(6), child("decode", 5, 4250 * MS, 5 * S, "sglang", "inferred")]
    assert otel_rl.diagnostics() == {"server_timings_bad_value": 1}


@pytest.mark.parametrize("meta", [None, 42, "meta_info", [1, 2], {"text": "hello"}, object()])
def test_timings_of_no_known_engine_record_nothing(capture, meta):
    assert record_in_generate(meta) == 0
    assert session_spans(capture) == [generate(5)]  # no clock read for "now"
    assert otel_rl.diagnostics() == {"server_timings_unrecognized": 1}


def test_an_unknown_engine_name_records_nothing(capture):
    assert record_in_generate(SGLANG_META, engine="trt-llm") == 0
    assert session_spans(capture) == [generate(5)]
    assert otel_rl.diagnostics() == {"server_timings_unrecognized": 1}


def test_outside_any_span_nothing_is_recorded(capture):
    assert record_server_timings(SGLANG_META) == 0
    assert capture.spans() == []
    assert otel_rl.diagnostics() == {"server_timings_no_span": 1}


def test_with_tracing_off_the_call_does_nothing():
    otel_rl.reset()
    assert record_server_timings(SGLANG_META) == 0
    assert record_server_timings(object(), engine="nonsense") == 0
    assert otel_rl.diagnostics() == {}


def test_getters_that_raise_are_read_as_missing(capture):
    class Hostile:
        queued_ts = 100.25

        @property
        def scheduled_ts(self):
            raise RuntimeError("no")

    # scheduled_ts reads as missing: queue's start alone is known, and it is the last stage.
    assert record_in_generate(Hostile()) == 1
    assert session_spans(capture) == [generate(6), child("queue", 5, 4250 * MS, 5 * S, "vllm", "inferred")]
    assert otel_rl.diagnostics() == {}


def test_server_timing_spans_leave_the_session_record_alone_and_reach_the_trace_file(capture):
    session_id = start_session()
    with otel_rl.trace_session_phase("generate"):  # 4 s to 6 s
        record_server_timings(SGLANG_META)  # now: 5 s
    otel_rl.trace_session_event("mark_finalized", session_id=session_id, status="accepted")  # 7 s
    [record] = capture.sessions()
    assert (record["generate_s"], record["phases"]) == (2.0, {"generate": [{"start_ts": 4.0, "end_ts": 6.0}]})
    timings = [(e["name"], e["ts"], e["dur"]) for e in capture.records() if e["name"] in ("queue", "prefill", "decode")]
    assert sorted(timings, key=lambda t: t[1]) == [("queue", 4.125e6, 0.125e6), ("prefill", 4.25e6, 0.25e6),
                                                   ("decode", 4.5e6, 0.375e6)]
    assert otel_rl.diagnostics() == {}
