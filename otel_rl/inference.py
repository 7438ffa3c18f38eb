"""The inference server's own timings as spans, without tracing inside the server."""

from __future__ import annotations

from typing import Any

from ._internal import guard
from ._internal.recording import server_timings
from ._internal.state import STATE

__all__ = ["record_server_timings"]

_record = guard.guarded(default=0)(server_timings.record)


def record_server_timings(meta: Any, engine: str | None = None) -> int:
    """Records an inference engine's per-request timings as child spans of the current span.

    Call it right after a generation request returned, inside the span that
    timed it (usually a ``generate`` phase)::

        with otel_rl.trace_session_phase("generate"):
            out = await client.generate(prompt)          # SGLang's /generate
            otel_rl.record_server_timings(out["meta_info"])

    The engine's fields become up to four child spans, each marked
    ``rl.span.kind = "server_timing"`` and ``rl.server.engine``:

    * ``queue``: waiting in the scheduler's queue;
    * ``prefill``: from scheduling to the end of the prompt's forward pass (the
      first token), with ``gen_ai.usage.input_tokens`` and
      ``gen_ai.usage.cache_read.input_tokens`` (prefix-cache hits);
    * ``kv_transfer``: the KV cache moving to the decode server, where a
      disaggregated SGLang server reports it;
    * ``decode``: generating the rest, with ``gen_ai.usage.output_tokens``.

    Fields read:

    * SGLang (``meta_info`` of a ``/generate`` response, or the response; the
      server needs ``--enable-metrics`` for timings): ``queue_time``,
      ``forward_entry_time``, ``prefill_finished_time``, ``request_finished_ts``,
      ``kv_transfer.latency_ms``, ``prompt_tokens``, ``cached_tokens``,
      ``completion_tokens``.
    * vLLM: a ``RequestOutput`` or its ``metrics`` (``queued_ts``,
      ``scheduled_ts``, ``first_token_ts``, ``last_token_ts``; or the older
      ``arrival_time``, ``first_scheduled_time``, ``first_token_time``,
      ``last_token_time``), or a response of the OpenAI-compatible server
      started with ``--enable-per-request-metrics`` (or its ``metrics``):
      ``queue_time_ms``, ``time_to_first_token_ms``, ``generation_time_ms``, and
      ``usage``.

    Where the spans lie:

    * Wall-clock timestamps (SGLang's, vLLM's ``*_time`` fields) are used as
      they are: a server on another host shows its clock's offset from yours.
    * Monotonic timestamps (vLLM's ``*_ts`` fields, from the engine core's
      ``time.monotonic()``) are moved onto the wall clock by
      ``time.time() - time.monotonic()`` read at this call; that holds for an
      engine on the same host.
    * A stage known only by its duration starts where the stage before it
      ends, else ends where the stage after it starts; when no stage has a
      timestamp (vLLM's OpenAI-server durations), the stages are laid back to
      back in the order above, the last ending now, at this call.
    * A stage whose start alone is known ends where the next stage starts
      when that is known, or now when it is the last stage; one whose end
      alone is known starts where the previous stage ends when that is known.
      Otherwise the stage is left out.

    ``rl.server.placement`` says which: ``measured`` (the engine's timestamps,
    or one timestamp and the stage's duration) or ``inferred``.

    Missing fields give no span. A field that is not a finite, non-negative
    number (a string, a bool, NaN, a negative value), or a stage that would end
    before it starts, is left out and counted as ``server_timings_bad_value``
    in :func:`otel_rl.diagnostics`. With no recording span current nothing is
    recorded (``server_timings_no_span``); timings of no known engine, or an
    unknown ``engine``, record nothing (``server_timings_unrecognized``).
    Nothing is raised. With tracing off the call returns at once.

    Args:
        meta: The engine's timings: SGLang's ``meta_info`` (or the response
            holding it), a vLLM ``RequestOutput``, its ``metrics``, or an
            OpenAI-compatible response (or its ``metrics``); a dict or an object
            with attributes.
        engine: ``"sglang"`` or ``"vllm"`` to read ``meta`` as that engine's;
            ``None`` (the default) tells from the fields present.

    Returns:
        How many child spans were recorded (0 when tracing is off).
    """
    if not STATE.scopes_on:
        return 0
    return _record(meta, engine)
