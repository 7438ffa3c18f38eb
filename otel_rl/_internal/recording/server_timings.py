"""Child spans from an inference engine's own per-request timings.

``otel_rl.record_server_timings(meta)`` runs right after a generation request
returned, inside the span that timed it (a ``generate`` phase). It reads the
timing fields the engine sends back with the response and records them as
child spans of that span - ``queue``, ``prefill``, ``kv_transfer`` and
``decode`` - without any tracing inside the server.

Each engine's fields are read into :class:`Stage` objects (start, end and
duration, whichever are known, on this process's wall clock in nanoseconds),
then :func:`place` decides where each stage lies, and :func:`record` makes the
spans. The fields, their units and their clocks:

SGLang, the ``meta_info`` of a ``/generate`` response (or the response holding
it). The timestamps are wall-clock seconds (the server's ``perf_counter``
readings shifted to ``time.time()`` before they are sent); they need
``--enable-metrics`` on the server:

* ``queue``: ends at ``forward_entry_time`` (timestamp), lasts ``queue_time``
  (seconds: waiting-queue entry to forward entry).
* ``prefill``: ``forward_entry_time`` to ``prefill_finished_time`` (timestamps).
* ``kv_transfer``: lasts ``kv_transfer["latency_ms"]`` (milliseconds), where a
  prefill/decode-disaggregated server reports it.
* ``decode``: ``prefill_finished_time`` to ``request_finished_ts`` (timestamps).
* tokens: ``prompt_tokens``, ``cached_tokens``, ``completion_tokens``.

vLLM, one of three shapes:

* ``RequestOutput`` (or its ``metrics``, a V1 ``RequestStateStats``):
  ``queued_ts`` -> ``scheduled_ts`` (``queue``) -> ``first_token_ts``
  (``prefill``) -> ``last_token_ts`` (``decode``), timestamps of the engine
  core's ``time.monotonic()`` in seconds; tokens: ``len(prompt_token_ids)``,
  ``num_cached_tokens``, ``num_generation_tokens`` (else the outputs'
  ``token_ids``).
* the V0 ``RequestMetrics`` (``*_time`` names): ``arrival_time`` ->
  ``first_scheduled_time`` (``queue``, also ``time_in_queue`` seconds) ->
  ``first_token_time`` (``prefill``) -> ``last_token_time`` or
  ``finished_time`` (``decode``), wall-clock ``time.time()`` seconds.
* the OpenAI-compatible server's response (``--enable-per-request-metrics``),
  or its ``metrics`` object: durations only, in milliseconds:
  ``queue_time_ms`` (``queue``), ``time_to_first_token_ms`` (``prefill``: from
  scheduling to the first token), ``generation_time_ms`` (``decode``); tokens
  from ``usage``: ``prompt_tokens``, ``prompt_tokens_details.cached_tokens``,
  ``completion_tokens``. vLLM reports no KV transfer timing.

Clocks: a wall-clock timestamp is used as it is (the server's clock: a server
on another host shifts its spans by the hosts' clock difference). A monotonic
timestamp is shifted by ``time.time() - time.monotonic()`` read at the call,
which holds for an engine on the same host (``CLOCK_MONOTONIC`` is shared by
the processes of one host).
"""

from __future__ import annotations

import math
import time
from numbers import Real
from typing import Any, Callable

from opentelemetry.trace.propagation import _SPAN_KEY

from .. import diagnostics as kinds
from .. import keys
from ..guard import report
from ..state import STATE
from .spans import get_current

SGLANG = "sglang"
VLLM = "vllm"
ENGINES = (SGLANG, VLLM)

#: Fields whose presence says the timings are SGLang's (``meta_info`` or its keys).
SGLANG_FIELDS = ("meta_info", "forward_entry_time", "prefill_finished_time", "queue_time",
                 "request_received_ts", "request_finished_ts", "e2e_latency", "cached_tokens",
                 "kv_transfer", "prefill_waiting_latency", "prefill_launch_latency")
#: Fields whose presence says the timings are vLLM's (``RequestOutput``, its ``metrics``,
#: the V0 ``RequestMetrics``, the OpenAI-compatible server's ``metrics``).
VLLM_FIELDS = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts",
               "first_scheduled_time", "time_in_queue", "first_token_time", "queue_time_ms",
               "time_to_first_token_ms", "generation_time_ms", "num_cached_tokens",
               "prompt_token_ids")
V1_TIMESTAMPS = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
V0_TIMESTAMPS = ("arrival_time", "first_scheduled_time", "first_token_time", "last_token_time",
                 "finished_time", "time_in_queue")

_NS = 1_000_000_000


def now_ns() -> int:
    """The time of the call on the wall clock, in ns: where stages known only by their
    duration end when nothing else places them (a seam the tests replace)."""
    return time.time_ns()


def monotonic_offset_ns() -> int:
    """``time.time() - time.monotonic()`` now, in ns: what turns a monotonic timestamp
    of this host into a wall-clock one (a seam the tests replace)."""
    return time.time_ns() - time.monotonic_ns()


class Stage:
    """One stage of a request: what the engine says of it, then where it lies."""

    __slots__ = ("name", "start", "end", "duration", "attributes", "placement")

    def __init__(self, name: str, start: int | None = None, end: int | None = None,
                 duration: int | None = None, attributes: dict[str, int] | None = None) -> None:
        self.name = name
        self.start = start
        self.end = end
        self.duration = duration
        self.attributes = attributes or {}
        self.placement: str | None = None

    @property
    def known(self) -> bool:
        return self.start is not None or self.end is not None or self.duration is not None

    def __repr__(self) -> str:
        return (f"Stage({self.name!r}, start={self.start}, end={self.end}, "
                f"duration={self.duration}, placement={self.placement})")


def field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, ``obj.name`` of anything else; ``None`` when absent."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    get = getattr(obj, "get", None)
    if get is not None and hasattr(obj, "keys"):
        try:
            return get(name)
        except Exception:  # noqa: BLE001 - a mapping that refuses the key: absent
            return None
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - a property that raises: absent
        return None


class Reader:
    """Reads numeric fields of one engine's timings, counting the unusable ones."""

    __slots__ = ("engine", "offset_ns")

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.offset_ns: int | None = None

    def number(self, obj: Any, name: str) -> float | None:
        """A finite, non-negative number, or ``None`` (absent, or counted as bad)."""
        value = field(obj, name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, Real):
            return self.bad(name, f"a {type(value).__name__}")
        try:
            number = float(value)
        except Exception:  # noqa: BLE001 - a Real that cannot convert
            return self.bad(name, f"a {type(value).__name__}")
        if not math.isfinite(number) or number < 0:
            return self.bad(name, repr(number))
        return number

    def bad(self, name: str, what: str) -> None:
        """Counts an unusable field (``what`` says why, without its value's contents)."""
        report(kinds.SERVER_TIMINGS_BAD_VALUE,
               "record_server_timings: %s field %r is %s, not a finite non-negative number; left out",
               self.engine, name, what)
        return None

    def duration(self, obj: Any, name: str, unit_ns: int = _NS) -> int | None:
        """A duration in ``unit_ns`` units (seconds by default), as ns."""
        value = self.number(obj, name)
        return None if value is None else round(value * unit_ns)

    def wall(self, obj: Any, name: str) -> int | None:
        """A wall-clock timestamp in seconds, as ns; zero means not set."""
        value = self.number(obj, name)
        return round(value * _NS) if value else None

    def monotonic(self, obj: Any, name: str) -> int | None:
        """A timestamp of this host's monotonic clock in seconds, as wall-clock ns."""
        value = self.number(obj, name)
        if not value:
            return None
        if self.offset_ns is None:
            self.offset_ns = monotonic_offset_ns()
        return round(value * _NS) + self.offset_ns

    def tokens(self, obj: Any, name: str) -> int | None:
        """A token count (a whole number)."""
        value = self.number(obj, name)
        if value is None:
            return None
        if not value.is_integer():
            return self.bad(name, repr(value))
        return int(value)


def _usage(**counts: int | None) -> dict[str, int]:
    names = {"input": keys.GEN_AI_USAGE_INPUT_TOKENS, "cached": keys.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
             "output": keys.GEN_AI_USAGE_OUTPUT_TOKENS}
    return {names[k]: v for k, v in counts.items() if v is not None}


# --- engines ----------------------------------------------------------------------------
def sglang_stages(meta: Any, r: Reader) -> list[Stage]:
    """SGLang's ``meta_info`` (or a response holding it) as stages."""
    inner = field(meta, "meta_info")
    if inner is not None:
        meta = inner
    forward = r.wall(meta, "forward_entry_time")
    prefilled = r.wall(meta, "prefill_finished_time")
    kv = field(meta, "kv_transfer")
    return [
        Stage("queue", end=forward, duration=r.duration(meta, "queue_time")),
        Stage("prefill", start=forward, end=prefilled,
              attributes=_usage(input=r.tokens(meta, "prompt_tokens"),
                                cached=r.tokens(meta, "cached_tokens"))),
        Stage("kv_transfer", duration=None if kv is None else r.duration(kv, "latency_ms", 1_000_000)),
        Stage("decode", start=prefilled, end=r.wall(meta, "request_finished_ts"),
              attributes=_usage(output=r.tokens(meta, "completion_tokens"))),
    ]


def _present(obj: Any, names: tuple[str, ...]) -> bool:
    return any(field(obj, name) is not None for name in names)


def vllm_stages(meta: Any, r: Reader) -> list[Stage]:
    """vLLM's ``RequestOutput``, its metrics, or an OpenAI-server response, as stages."""
    metrics = field(meta, "metrics")
    stats = meta if metrics is None else metrics
    usage = field(meta, "usage")
    input_tokens = r.tokens(usage, "prompt_tokens")
    prompt = field(meta, "prompt_token_ids")
    if input_tokens is None and prompt is not None:
        try:
            input_tokens = len(prompt)
        except Exception:  # noqa: BLE001 - not a sequence
            r.bad("prompt_token_ids", f"a {type(prompt).__name__} without a length")
    cached = r.tokens(meta, "num_cached_tokens")
    if cached is None:
        cached = r.tokens(field(usage, "prompt_tokens_details"), "cached_tokens")
    output = r.tokens(stats, "num_generation_tokens")
    if output is None:
        output = r.tokens(usage, "completion_tokens")
    if output is None:
        output = _output_tokens(field(meta, "outputs"))
    prefill_usage = _usage(input=input_tokens, cached=cached)
    decode_usage = _usage(output=output)
    if _present(stats, V1_TIMESTAMPS):
        queued, scheduled = r.monotonic(stats, "queued_ts"), r.monotonic(stats, "scheduled_ts")
        first, last = r.monotonic(stats, "first_token_ts"), r.monotonic(stats, "last_token_ts")
        return [Stage("queue", queued, scheduled),
                Stage("prefill", scheduled, first, attributes=prefill_usage),
                Stage("decode", first, last, attributes=decode_usage)]
    if _present(stats, V0_TIMESTAMPS):
        scheduled, first = r.wall(stats, "first_scheduled_time"), r.wall(stats, "first_token_time")
        last = r.wall(stats, "last_token_time") or r.wall(stats, "finished_time")
        return [Stage("queue", r.wall(stats, "arrival_time"), scheduled,
                      r.duration(stats, "time_in_queue")),
                Stage("prefill", scheduled, first, attributes=prefill_usage),
                Stage("decode", first, last, attributes=decode_usage)]
    ms = 1_000_000
    return [Stage("queue", duration=r.duration(stats, "queue_time_ms", ms)),
            Stage("prefill", duration=r.duration(stats, "time_to_first_token_ms", ms),
                  attributes=prefill_usage),
            Stage("decode", duration=r.duration(stats, "generation_time_ms", ms),
                  attributes=decode_usage)]


def _output_tokens(outputs: Any) -> int | None:
    if outputs is None:
        return None
    try:
        return sum(len(field(o, "token_ids")) for o in outputs)
    except Exception:  # noqa: BLE001 - outputs without token ids: no count
        return None


PARSERS: dict[str, Callable[[Any, Reader], list[Stage]]] = {SGLANG: sglang_stages, VLLM: vllm_stages}


def detect(meta: Any) -> str | None:
    """The engine whose fields ``meta`` carries, or ``None``."""
    if _present(meta, SGLANG_FIELDS):
        return SGLANG
    if _present(meta, VLLM_FIELDS) or _present(field(meta, "metrics"), VLLM_FIELDS):
        return VLLM
    if isinstance(meta, dict) and "metrics" in meta and "usage" in meta:
        return VLLM  # the OpenAI-server response of a request with no timing (n > 1)
    return None


# --- placing ------------------------------------------------------------------------------
def place(stages: list[Stage], now: int) -> list[Stage]:
    """Where each stage lies; returns the stages that got both ends, in order.

    1. A stage with two of start, end and duration is where the engine says
       (``measured``).
    2. A stage known only by its duration starts where the stage before it
       ends, else ends where the stage after it starts (repeated until nothing
       moves).
    3. When no stage is placed yet, stages known only by their duration are
       laid back to back in order, the last ending at ``now`` (the call).
    4. A stage whose start alone is known ends where the next stage starts
       when that is known, or at ``now`` when it is the last stage; then one
       whose end alone is known starts where the stage before it ends when
       that is known. Otherwise they are left out.

    Stages placed by 2-4 are ``inferred``.
    """
    stages = [s for s in stages if s.known]
    for s in stages:
        if s.start is not None and s.end is not None:
            pass
        elif s.start is not None and s.duration is not None:
            s.end = s.start + s.duration
        elif s.end is not None and s.duration is not None:
            s.start = s.end - s.duration
        else:
            continue
        s.placement = keys.PLACEMENT_MEASURED
    only_duration = [i for i, s in enumerate(stages) if s.start is None and s.end is None]
    moved = True
    while moved:
        moved = False
        for i in only_duration:
            s = stages[i]
            if s.placement:
                continue
            before = stages[i - 1] if i > 0 else None
            after = stages[i + 1] if i + 1 < len(stages) else None
            if before is not None and before.placement:
                _put(s, before.end, None)
            elif after is not None and after.placement:
                _put(s, None, after.start)
            else:
                continue
            moved = True
    if not any(s.placement for s in stages):
        end = now
        for i in reversed(only_duration):
            _put(stages[i], None, end)
            end = stages[i].start
    last = len(stages) - 1
    for i, s in enumerate(stages):
        if s.placement is None and s.start is not None:
            after = stages[i + 1].start if i < last else now
            if after is not None:
                s.end = after
                s.placement = keys.PLACEMENT_INFERRED
    for i, s in enumerate(stages):
        if s.placement is None and s.end is not None and i > 0 and stages[i - 1].placement:
            s.start = stages[i - 1].end
            s.placement = keys.PLACEMENT_INFERRED
    return [s for s in stages if s.placement]


def _put(s: Stage, start: int | None, end: int | None) -> None:
    duration = s.duration or 0
    s.start = start if start is not None else end - duration
    s.end = end if end is not None else start + duration
    s.placement = keys.PLACEMENT_INFERRED


# --- recording ----------------------------------------------------------------------------
def record(meta: Any, engine: str | None = None) -> int:
    """Records ``meta``'s timings as children of the current span; returns how many.

    Callers check ``STATE.scopes_on`` first and guard the call.
    """
    ctx = get_current()
    parent = ctx.get(_SPAN_KEY)
    if parent is None or not parent.is_recording():
        report(kinds.SERVER_TIMINGS_NO_SPAN, "record_server_timings with no recording span current; "
               "call it inside the span that timed the request")
        return 0
    if engine is None:
        engine = detect(meta)
        if engine is None:
            report(kinds.SERVER_TIMINGS_UNRECOGNIZED,
                   "record_server_timings: no SGLang or vLLM timing fields in a %s",
                   type(meta).__name__)
            return 0
    elif engine not in PARSERS:
        report(kinds.SERVER_TIMINGS_UNRECOGNIZED,
               "record_server_timings: engine %r is not one of %s", engine, ENGINES)
        return 0
    reader = Reader(engine)
    placed = place(PARSERS[engine](meta, reader), now_ns())
    tracer = STATE.tracer
    recorded = 0
    for s in placed:
        if s.end < s.start or s.start <= 0:
            reader.bad(s.name, f"a stage from {s.start} ns to {s.end} ns")
            continue
        attributes = {keys.SPAN_KIND: keys.KIND_SERVER_TIMING, keys.SERVER_ENGINE: engine,
                      keys.SERVER_PLACEMENT: s.placement}
        attributes.update(s.attributes)
        span = tracer.start_span(s.name, context=ctx, attributes=attributes, start_time=s.start)
        span.end(s.end)
        recorded += 1
    return recorded
