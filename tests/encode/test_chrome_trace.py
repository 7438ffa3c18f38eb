"""ChromeTraceEncoder: spans become Chrome Trace events that Perfetto draws correctly."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from otel_rl._internal import keys
from otel_rl._internal.encode.chrome_markers import FLOW_CATEGORY, FLOW_SOURCE, slice_trace_id
from otel_rl._internal.encode.chrome_trace import ChromeTraceEncoder
from otel_rl._internal.encode.flows import FlowJoiner
from otel_rl._internal.recording.ids import trace_text
from support import T0_NS, SpanFactory

# Span times (support.SpanFactory) are whole microseconds after T0_NS, so ts and
# ts + dur are exact floats and the nesting checks below can compare exactly.
RANK0 = Resource({keys.SERVICE_NAME: "rollout-worker", keys.PROCESS_PID: 4242,
                  keys.RANK: 0, keys.ROLE: "rollout"})


def by_end(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """Spans in the order an exporter sees them: as they end."""
    return sorted(spans, key=lambda s: s.end_time)


def encode_all(spans: list[ReadableSpan], **options: Any) -> list[dict[str, Any]]:
    encoder = ChromeTraceEncoder(**options)
    return encoder.encode(spans) + encoder.finish()


def complete(events: list[dict[str, Any]], name: str | None = None) -> list[dict[str, Any]]:
    return [e for e in events if e["ph"] == "X" and (name is None or e["name"] == name)]


def one(events: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = complete(events, name)
    assert len(found) == 1, f"expected one {name!r}, got {len(found)}"
    return found[0]


def metadata(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["ph"] == "M" and e["name"] == name]


def track(event: dict[str, Any]) -> tuple[Any, Any]:
    return event["pid"], event["tid"]


def assert_properly_nested(events: list[dict[str, Any]]) -> None:
    """Fails if two complete events on one (pid, tid) track partially overlap."""
    tracks: dict[tuple, list[tuple[float, float, str]]] = defaultdict(list)
    for e in complete(events):
        tracks[track(e)].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for key, slices in tracks.items():
        slices.sort(key=lambda s: (s[0], -s[1]))
        open_slices: list[tuple[float, float, str]] = []
        for start, end, name in slices:
            while open_slices and open_slices[-1][1] <= start:
                open_slices.pop()
            if open_slices:
                outer = open_slices[-1]
                assert end <= outer[1], (
                    f"{name} [{start}, {end}] partially overlaps {outer[2]} "
                    f"[{outer[0]}, {outer[1]}] on track {key}")
            open_slices.append((start, end, name))


def flows(events: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Flow events by id: {"s": start event, "f": finish event}."""
    by_id: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for e in events:
        if e["ph"] in ("s", "f"):
            assert e["ph"] not in by_id[e["id"]], f"flow id {e['id']} used twice for {e['ph']}"
            by_id[e["id"]][e["ph"]] = e
    return by_id


def encloses(event: dict[str, Any], ts: float) -> bool:
    return event["ts"] <= ts <= event["ts"] + event["dur"]


# --- complete events ------------------------------------------------------------------------
def test_span_tree_round_trips_with_exact_timestamps_and_ids():
    f = SpanFactory(RANK0)
    root = f.span("train_step", 0, 1000, attrs={keys.SPAN_KIND: "step", keys.STEP: 7})
    child = f.span("forward", 100, 400, root)
    # Nanoseconds are kept as fractional microseconds.
    grandchild = f.span("matmul", 150.123, 200.456, child)
    events = encode_all(by_end([root, child, grandchild]))

    for span in (root, child, grandchild):
        event = one(events, span.name)
        assert event["ts"] == span.start_time / 1000
        assert event["dur"] == (span.end_time - span.start_time) / 1000
        assert event["args"]["id"] == f"{span.context.span_id:016x}"
        assert event["args"]["trace"] == trace_text(span.context.trace_id)
    assert one(events, "matmul")["dur"] == 50.333
    assert "parent" not in one(events, "train_step")["args"]
    assert one(events, "forward")["args"]["parent"] == f"{root.context.span_id:016x}"
    assert one(events, "train_step")["args"][keys.STEP] == 7
    # A synchronous call tree stays on the thread's own track.
    assert len({track(e) for e in complete(events)}) == 1
    assert_properly_nested(events)


def test_category_is_rl_category_then_span_kind_then_none_for_the_default():
    f = SpanFactory(RANK0)
    spans = [
        f.span("a", 0, 1, attrs={keys.CATEGORY: "compute", keys.SPAN_KIND: "scope"}),
        f.span("b", 2, 3, attrs={keys.SPAN_KIND: "phase"}),
        f.span("c", 4, 5),
    ]
    events = encode_all(spans)
    assert [one(events, n).get("cat") for n in "abc"] == ["compute", "phase", None]


def test_an_attribute_named_like_an_id_arg_keeps_its_full_key():
    f = SpanFactory(RANK0)
    span = f.span("a", 0, 1, attrs={keys.ARGS_PREFIX + "id": 7, "parent": "p", keys.ARGS_PREFIX + "span_id": 8})
    args = one(encode_all([span]), "a")["args"]
    assert {k: args[k] for k in ("rl.args.id", "attr.parent", "rl.args.span_id", "id")} == {
        "rl.args.id": 7, "attr.parent": "p", "rl.args.span_id": 8, "id": f"{span.context.span_id:016x}"}
    assert "parent" not in args


def test_a_lines_trace_id_is_its_trace_arg_or_on_a_root_its_own_id():
    assert slice_trace_id({"id": "00000000000000aa"}) == "00000000000000aa"
    assert slice_trace_id({"trace": "00000000000000bb", "id": "00000000000000aa"}) == "00000000000000bb"
    assert slice_trace_id({"trace_id": "cc" * 16, "span_id": "00000000000000aa"}) == "cc" * 16  # older files
    assert slice_trace_id({"rank": 0}) is None  # another tool's trace


def test_status_appears_in_args_only_when_set():
    f = SpanFactory(RANK0)
    spans = [f.span("ok", 0, 1),
             f.span("failed", 2, 3, status=Status(StatusCode.ERROR, "boom"))]
    events = encode_all(spans)
    assert "status" not in one(events, "ok")["args"]
    assert one(events, "failed")["args"]["status"] == "ERROR"
    assert one(events, "failed")["args"]["status.description"] == "boom"


def test_attribute_values_are_made_json_safe():
    f = SpanFactory(RANK0)
    span = f.span("odd", 0, 1, attrs={"blob": b"\x00\xff", "huge": 1 << 70,
                                      "seq": (1, 2.5, "x"), "flag": True})
    event = one(encode_all([span]), "odd")
    assert orjson.loads(orjson.dumps(event))["args"]["seq"] == [1, 2.5, "x"]
    assert event["args"]["blob"] == "00ff"
    assert event["args"]["huge"] == str(1 << 70)
    assert event["args"]["flag"] is True


def test_span_events_become_instant_events_on_the_span_track():
    f = SpanFactory(RANK0)
    span = f.span("generate", 0, 100, events=(
        Event("first_token", {"tokens": 1}, T0_NS + 12_500),
        Event("done", None, T0_NS + 99_000)))
    events = encode_all([span])
    instants = [e for e in events if e["ph"] == "i"]
    assert [(e["name"], e["ts"], e["s"]) for e in instants] == [
        ("first_token", (T0_NS + 12_500) / 1000, "t"), ("done", (T0_NS + 99_000) / 1000, "t")]
    assert instants[0]["args"] == {"tokens": 1}
    assert {track(e) for e in instants} == {track(one(events, "generate"))}


# --- processes and threads --------------------------------------------------------------
def test_metadata_names_process_and_thread_once():
    f = SpanFactory(RANK0)
    encoder = ChromeTraceEncoder()
    first = encoder.encode([f.span("a", 0, 1)])
    again = encoder.encode([f.span("b", 2, 3)])

    (process,) = metadata(first, "process_name")
    assert process["pid"] == 4242 and process["args"]["name"] == "[rollout] Rank 0, Process"
    assert metadata(first, "process_sort_index")[0]["args"]["sort_index"] == 1 << 20  # a rollout worker: after the training side
    (thread,) = metadata(first, "thread_name")
    assert thread["args"]["name"] == "MainThread"
    assert thread["tid"] == one(first, "a")["tid"]
    assert metadata(first, "thread_sort_index")
    assert not [e for e in again if e["ph"] == "M"]


def test_process_without_rank_is_named_after_its_service():
    f = SpanFactory(RANK0)
    server = Resource({keys.SERVICE_NAME: "sglang", keys.PROCESS_PID: 77})
    events = encode_all([f.span("req", 0, 1, resource=server)])
    assert metadata(events, "process_name")[0]["args"]["name"] == "sglang"
    assert "process_sort_index" not in {e["name"] for e in events}


def test_process_without_pid_gets_a_stable_synthetic_pid():
    f = SpanFactory(RANK0)
    nopid = Resource({keys.SERVICE_NAME: "worker", keys.RANK: 3})
    first = one(encode_all([f.span("a", 0, 1, resource=nopid)]), "a")["pid"]
    second = one(encode_all([f.span("a", 0, 1, resource=nopid)]), "a")["pid"]
    assert first == second
    assert (1 << 22) <= first < (1 << 32)


def test_two_resources_claiming_one_pid_get_two_tracks():
    f = SpanFactory(RANK0)
    host_a = Resource({keys.SERVICE_NAME: "w", keys.PROCESS_PID: 1, "host.name": "a"})
    host_b = Resource({keys.SERVICE_NAME: "w", keys.PROCESS_PID: 1, "host.name": "b"})
    events = encode_all([f.span("a", 0, 1, resource=host_a), f.span("b", 0, 1, resource=host_b)])
    assert one(events, "a")["pid"] != one(events, "b")["pid"]
    assert len(metadata(events, "process_name")) == 2


def test_spans_without_a_thread_are_grouped_by_instrumentation_scope():
    f = SpanFactory(RANK0)
    events = encode_all([f.span("http", 0, 1, thread=None, scope="opentelemetry.instrumentation.httpx"),
                         f.span("work", 0, 1)])
    names = {e["tid"]: e["args"]["name"] for e in metadata(events, "thread_name")}
    assert names[one(events, "http")["tid"]] == "opentelemetry.instrumentation.httpx"
    assert one(events, "http")["tid"] != one(events, "work")["tid"]


# --- lanes ------------------------------------------------------------------------------------
def test_overlapping_spans_of_one_thread_go_to_named_lanes():
    f = SpanFactory(RANK0)
    events = encode_all(by_end([f.span("session A", 0, 100), f.span("session B", 50, 150)]))
    a, b = one(events, "session A"), one(events, "session B")
    assert a["tid"] != b["tid"]
    names = {e["tid"]: e["args"]["name"] for e in metadata(events, "thread_name")}
    assert names[a["tid"]] == "MainThread"
    assert names[b["tid"]] == "MainThread · lane 1"
    assert_properly_nested(events)


def test_a_span_only_nests_under_its_own_ancestors():
    f = SpanFactory(RANK0)
    # "other" runs inside "long" on the same thread (asyncio) but is not its child.
    events = encode_all(by_end([f.span("long", 0, 100), f.span("other", 10, 20)]))
    assert one(events, "long")["tid"] != one(events, "other")["tid"]


def test_two_hundred_interleaved_async_sessions_nest_properly():
    f = SpanFactory(RANK0)
    rng = random.Random(7)
    spans: list[ReadableSpan] = []
    phases_of: dict[str, list[ReadableSpan]] = {}
    for task_no in range(20):
        task_start = rng.randint(0, 50_000)
        children: list[ReadableSpan] = []
        task_id = f"task-{task_no}"
        # The task span is built last, once its end is known, under this context.
        task_ctx = f.context()
        task_end = task_start
        for sample in range(10):
            session_id = f"{task_id}/{sample}"
            start = task_start + rng.randint(0, 2_000)
            cursor = start
            phases = []
            for phase in ("generate", "toolcall", "generate", "reward"):
                length = rng.randint(50, 3_000)
                phases.append((phase, cursor, cursor + length))
                cursor += length + rng.randint(0, 200)
            session = f.span("session", start, cursor, task_ctx,
                             attrs={keys.SPAN_KIND: "session", keys.SESSION_ID: session_id})
            phase_spans = [f.span(name, s, e, session,
                                  attrs={keys.SPAN_KIND: "phase", keys.SESSION_ID: session_id,
                                         keys.PHASE: name})
                           for name, s, e in phases]
            phases_of[f"{session.context.span_id:016x}"] = phase_spans
            children += phase_spans + [session]
            task_end = max(task_end, cursor)
        task = f.span("task", task_start, task_end + 10, context=task_ctx,
                      attrs={keys.SPAN_KIND: "task", keys.TASK_ID: task_id})
        spans += children + [task]

    events = encode_all(by_end(spans))

    assert_properly_nested(events)
    assert len(complete(events)) == len(spans) == 20 + 200 + 800
    assert len(complete(events, "session")) == 200
    # Each session is drawn together with its phases, on one track.
    for session in complete(events, "session"):
        phase_ids = {f"{p.context.span_id:016x}" for p in phases_of[session["args"]["id"]]}
        placed = [e for e in complete(events) if e["args"]["id"] in phase_ids]
        assert {track(e) for e in placed} == {track(session)}


def test_session_spans_wait_for_their_session_span():
    f = SpanFactory(RANK0)
    session = f.span("session", 0, 100, attrs={keys.SPAN_KIND: "session", keys.SESSION_ID: "s1"})
    phase = f.span("generate", 10, 50, session,
                   attrs={keys.SPAN_KIND: "phase", keys.SESSION_ID: "s1"})
    encoder = ChromeTraceEncoder()

    assert complete(encoder.encode([phase])) == []
    assert encoder.buffered == 1
    released = complete(encoder.encode([session]))
    assert [e["name"] for e in released] == ["session", "generate"]
    assert encoder.buffered == 0


def test_finish_releases_spans_whose_session_never_ended():
    f = SpanFactory(RANK0)
    parent = f.span("session", 0, 100)  # never exported: the process died first
    phase = f.span("generate", 10, 50, parent, attrs={keys.SESSION_ID: "s1"})
    encoder = ChromeTraceEncoder()
    assert complete(encoder.encode([phase])) == []
    assert [e["name"] for e in complete(encoder.finish())] == ["generate"]


def test_waiting_spans_are_bounded():
    f = SpanFactory(RANK0)
    session = f.span("session", 0, 100)
    encoder = ChromeTraceEncoder(max_buffered_spans=10)
    phases = [f.span(f"p{i}", i, i + 1, session, attrs={keys.SESSION_ID: f"s{i}"})
              for i in range(25)]
    released = complete(encoder.encode(phases))
    assert encoder.buffered <= 10
    assert len(released) + encoder.buffered == 25
    # The oldest waiting sessions are the ones let go.
    assert [e["name"] for e in released] == [f"p{i}" for i in range(len(released))]


def test_work_for_a_session_owned_by_another_process_is_not_held_back():
    f = SpanFactory(RANK0)
    client_side = SpanContext(1, 0xABC, True, TraceFlags(1))
    server_root = f.span("handle_request", 0, 100, parent=client_side,
                         kind=SpanKind.SERVER, attrs={keys.SESSION_ID: "s1"})
    prefill = f.span("prefill", 10, 40, server_root, attrs={keys.SESSION_ID: "s1"})
    encoder = ChromeTraceEncoder()
    first = encoder.encode([prefill])
    out = complete(first) + complete(encoder.encode([server_root]))
    assert sorted(e["name"] for e in out) == ["handle_request", "prefill"]
    assert encoder.buffered == 0


def test_lane_history_is_pruned_to_its_bounds():
    f = SpanFactory(RANK0)
    encoder = ChromeTraceEncoder(max_intervals_per_lane=100, horizon_s=0.001)
    spans = [f.span(f"op{i}", i * 10, i * 10 + 5) for i in range(5_000)]
    events = encoder.encode(spans)
    assert len(complete(events)) == 5_000
    assert_properly_nested(events)
    lanes = [lane for proc in encoder._processes.values()
             for group in proc.groups.values() for lane in group.lanes]
    assert len(lanes) == 1
    assert lanes[0].count <= 100


# --- flows --------------------------------------------------------------------------------
def test_flow_links_a_task_to_a_session_drawn_on_another_track():
    f = SpanFactory(RANK0)
    task = f.span("task", 0, 1_000, attrs={keys.SPAN_KIND: "task"})
    s1 = f.span("session", 10, 500, task, attrs={keys.SPAN_KIND: "session", keys.SESSION_ID: "a"})
    s2 = f.span("session", 20, 900, task, attrs={keys.SPAN_KIND: "session", keys.SESSION_ID: "b"})
    events = encode_all(by_end([task, s1, s2]))

    task_event = one(events, "task")
    sessions = complete(events, "session")
    elsewhere = [s for s in sessions if track(s) != track(task_event)]
    assert elsewhere, "overlapping sessions cannot all share the task's track"
    links = flows(events)
    assert len(links) == len(elsewhere)
    for session in elsewhere:
        (link,) = [pair for pair in links.values() if track(pair["f"]) == track(session)]
        start, finish = link["s"], link["f"]
        assert track(start) == track(task_event) and encloses(task_event, start["ts"])
        assert finish["ts"] == session["ts"] and finish["bp"] == "e"
        assert start["cat"] == finish["cat"] == FLOW_CATEGORY
        assert start["name"] == finish["name"]


def test_children_on_the_parent_track_need_no_flow():
    f = SpanFactory(RANK0)
    root = f.span("step", 0, 100)
    events = encode_all(by_end([root, f.span("forward", 10, 20, root)]))
    assert flows(events) == {}


def test_cross_process_children_get_one_flow_each_from_their_parent_when_joined():
    f = SpanFactory(RANK0)
    server_res = Resource({keys.SERVICE_NAME: "inference-server", keys.PROCESS_PID: 900})
    other_res = Resource({keys.SERVICE_NAME: "inference-server", keys.PROCESS_PID: 901})
    # An INTERNAL parent whose context was sent to two processes (a broadcast).
    parent = f.span("trainer.update_weights", 0, 100, attrs={keys.CONTEXT_SENT: True})
    remote = SpanContext(parent.context.trace_id, parent.context.span_id, True, TraceFlags(1))
    children = [f.span("rollout.update_weights", 10, 90, kind=SpanKind.SERVER, resource=res,
                       parent=remote) for res in (server_res, other_res)]
    # Each process encodes its own spans, as each writes its own file; the merge joins them.
    joiner = FlowJoiner()
    events = encode_all([parent]) + [e for child in children for e in encode_all([child])]
    for event in events:
        joiner.add(event)
    starts = joiner.starts()
    ends = [e for e in events if e["ph"] == "f"]
    assert len(ends) == 2 and sorted(e["id"] for e in starts) == sorted(e["id"] for e in ends)
    assert len({e["id"] for e in ends}) == 2  # one flow per child, never one start for two ends
    parent_slice = one(events, "trainer.update_weights")
    assert all((s["pid"], s["tid"], s["ts"]) == (parent_slice["pid"], parent_slice["tid"], parent_slice["ts"])
               for s in starts)
    assert {e["pid"] for e in ends} == {900, 901} and all(e["bp"] == "e" for e in ends)


def test_a_client_span_is_a_flow_source_without_being_marked():
    f = SpanFactory(RANK0)
    client = f.span("POST /generate", 0, 100, kind=SpanKind.CLIENT)
    (source,) = [e for e in encode_all([client]) if e.get("name") == FLOW_SOURCE]
    assert source["args"]["id"] == f"{client.context.span_id:016x}"


def test_flow_ids_are_unique_per_link():
    f = SpanFactory(RANK0)
    spans = []
    for i in range(30):
        parent = f.span(f"task{i}", i * 100, i * 100 + 90)
        spans.append(parent)
        spans += [f.span(f"s{i}.{k}", i * 100 + k, i * 100 + 50 + k, parent) for k in range(3)]
    events = encode_all(by_end(spans))
    links = flows(events)  # asserts each id starts and finishes once
    assert links and all(set(pair) == {"s", "f"} for pair in links.values())


def test_the_training_side_sorts_before_rollout_workers_each_by_rank():
    f = SpanFactory(RANK0)
    procs = [("rollout", 0, 11), ("trainer", 0, 12), ("rollout", 1, 13), ("trainer", 1, 14), (None, 2, 15)]
    spans = []
    for role, rank, pid in procs:
        attrs = {keys.RANK: rank, keys.PROCESS_PID: pid, **({keys.ROLE: role} if role else {})}
        spans.append(f.span(f"s{pid}", 0, 10, resource=Resource(attrs)))
    events = encode_all(spans)
    order = {e["pid"]: e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"}
    assert sorted(order, key=order.get) == [12, 14, 15, 11, 13]
    assert order[15] == 2  # no role: AReaL's sort index, the rank
