"""otel_rl: OpenTelemetry instrumentation for RL training and rollout.

A drop-in for AReaL's ``perf_tracer`` (``import otel_rl as perf_tracer``):
tasks, sessions and phases become OpenTelemetry traces, exported over OTLP to a
collector when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and always written as
Perfetto-ready Chrome-trace JSONL per rank. ``OTEL_RL_ENABLED=1`` turns it on
with no code change.
"""

from __future__ import annotations

import os as _os
from collections.abc import Mapping as _Mapping
from typing import Any

from ._internal import diagnostics as _kinds
from ._internal import guard as _guard
from ._internal import runtime as _setup
from ._internal.config import ConfigError, Settings
from ._internal.state import STATE as _STATE
from .environment_variables import OTEL_RL_ENABLED as _OTEL_RL_ENABLED
from . import propagation
from .propagation import attach, carry, context_kwargs, extract, inject, inject_env, propagating
from .sessions import (
    atrace_session_phase,
    get_session_id,
    get_task_id,
    increment_counter,
    register_phase,
    register_session,
    register_task,
    session_context,
    set_session_id,
    set_task_id,
    trace_session,
    trace_session_event,
    trace_session_phase,
)
from .tracing import (
    Category,
    atrace_scope,
    instant,
    set_step,
    step_scope,
    trace_perf,
    trace_scope,
)
from .training import annotate, consume, get_policy_version, set_policy_version, weight_sync
from .inference import record_server_timings
from . import stats  # noqa: E402 - AReaL stats_tracker names; imports neither torch nor numpy
from . import events  # noqa: E402 - request events (sglang-omni's recorder names)
from ._internal.control import (  # noqa: E402 - live profiling control (sglang-omni's endpoints)
    control_app,
    profile_status,
    serve_control,
    start_profile,
    start_request_profile,
    stop_profile,
    stop_request_profile,
)
from .events import ProfilingError  # noqa: E402
from .perf_tracer import (  # noqa: E402 - AReaL's tracer objects
    PerfTraceCategory,
    PerfTracer,
    SessionTraceEvent,
    SessionTracer,
    get_session_tracer,
)

__version__ = "0.1.0"


def configure(config: Any = None, *, rank: int | None = None, role: str | None = None,
              **overrides: Any) -> PerfTracer:
    """Turns tracing on for this process (call once per rank at startup).

    Settings come, lowest precedence first, from defaults, ``OTEL_RL_*``
    environment variables, ``config`` and keyword overrides. Calling it again
    with a dict or keywords reconfigures (the previous configuration is shut
    down first); calling it again with an AReaL config object while one is in
    force raises ``RuntimeError``, as AReaL's ``configure`` does (call
    :func:`reset` first).

    Args:
        config: An AReaL ``PerfTracerConfig`` object (files then go where
            AReaL's tools look, see the ``layout`` setting) or a dict with
            ``enabled``, ``experiment_name``, ``trial_name``, ``fileroot``,
            ``save_interval``, ``profile_steps``, ``session_tracer.enabled``,
            ``session_tracer.flush_threshold``.
        rank: This process's rank (default ``OTEL_RL_RANK``, then ``RANK``, then 0).
        role: This process's role (``trainer``, ``rollout``...), part of file names.
        **overrides: Any setting by name (see the README's configuration table),
            plus ``tracer_provider=`` / ``meter_provider=`` to use providers you own.

    Returns:
        The :class:`PerfTracer` (AReaL's return value; also an OpenTelemetry ``Tracer``).

    Raises:
        ConfigError: A setting is invalid; the message names it.
        RuntimeError: An AReaL config object while an AReaL configuration is in force.
    """
    areal = config is not None and not isinstance(config, _Mapping)
    if areal and _STATE.configured and _STATE.areal_configured:
        raise RuntimeError("otel_rl (perf_tracer) has already been configured; call reset() "
                           "before configuring again")
    _setup.configure(config, rank=rank, role=role, **overrides)
    _STATE.areal_configured = areal
    return PerfTracer._current()


def is_configured() -> bool:
    """Whether :func:`configure` has run (and :func:`reset` / :func:`shutdown` have not)."""
    return _STATE.configured


def is_enabled() -> bool:
    """Whether spans are being recorded in this process."""
    return _STATE.enabled


def save(step: int | None = None, force: bool = False) -> None:
    """Writes everything recorded so far to the files and exporters.

    As in AReaL, with a ``step`` it acts only on the last step of each
    interval, ``(step + 1) % save_interval == 0`` (steps 2, 5, 8... for 3),
    unless ``force`` is set. With ``save_interval`` 1 (the default) the trace
    file is also written continuously in the background; above 1 it waits for
    these saves, as AReaL's does. ``save(step)`` with ``save_interval`` 1 hands
    the work to the export thread and returns at once; ``save(force=True)``,
    ``save()`` and the saving steps of a larger ``save_interval`` return once
    the files are written, within ``shutdown_timeout_ms``. The network is
    never waited for.

    Args:
        step: The training step just finished.
        force: Write regardless of ``save_interval``.
    """
    try:
        _setup.save(step, force)
    except Exception as exc:  # noqa: BLE001
        _guard.report(_kinds.INTERNAL_ERROR, "save failed: %r", exc)


def shutdown() -> None:
    """Ends open sessions as ``pending``, flushes and closes every output.

    Bounded by ``shutdown_timeout_ms`` whatever the collector does. Also runs
    at interpreter exit.
    """
    try:
        _setup.shutdown()
    except Exception as exc:  # noqa: BLE001
        _guard.report(_kinds.INTERNAL_ERROR, "shutdown failed: %r", exc)


def reset() -> None:
    """Shuts tracing down and forgets the configuration (for tests and notebooks)."""
    shutdown()
    _STATE.settings = None
    _STATE.areal_configured = False
    _guard.clear()


def get_tracer() -> PerfTracer:
    """AReaL's ``get_tracer()``: the configured :class:`PerfTracer`.

    It is also an OpenTelemetry ``Tracer`` (``start_as_current_span`` makes
    spans of your own on otel_rl's pipeline); :func:`get_otel_tracer` returns
    one whether or not otel_rl is configured.

    Raises:
        RuntimeError: otel_rl is not configured, as AReaL's raises.
    """
    if not _STATE.configured:
        raise RuntimeError("otel_rl (perf_tracer) is not configured: call otel_rl.configure(...) "
                           "first, or use otel_rl.get_otel_tracer() for an OpenTelemetry Tracer")
    return PerfTracer._current()


def get_otel_tracer() -> Any:
    """The OpenTelemetry ``Tracer`` otel_rl records with (its lean tracer when
    configured, the global one otherwise); never raises."""
    return _setup.get_tracer()


def __getattr__(name: str) -> Any:
    # AReaL's module attribute: the configured tracer, or None.
    if name == "GLOBAL_TRACER":
        return PerfTracer._current() if _STATE.configured else None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def settings() -> Settings | None:
    """The resolved settings of the current configuration, or ``None``."""
    return _STATE.settings


def run_summary() -> dict[str, Any] | None:
    """What this process recorded, wrote, sent and lost, as a plain dict.

    While configured: the numbers so far (the exporter process's as of the last
    :func:`save`). After :func:`shutdown`: the final summary, also logged in one
    line and written to ``summary-r{rank}.json`` in the run directory. ``None``
    before any configuration. Never raises.
    """
    try:
        return _setup.run_summary()
    except Exception as exc:  # noqa: BLE001
        _guard.report(_kinds.INTERNAL_ERROR, "run_summary failed: %r", exc)
        return None


def set_redactor(fn: Any) -> None:
    """Installs a redaction hook for user payloads, or removes it with ``None``.

    ``fn(key, value) -> value`` is called with the attribute key (``rl.args.<key>``,
    nested keys dotted) and the raw value of every ``args`` / phase payload /
    request-event metadata value, on the export thread (never on the caller's),
    before content capture and the length limit apply. Returning ``None`` drops
    the value; an exception drops it and is counted as ``redactor_error``. The
    hook stays installed across ``configure()`` / ``reset()``.

    Raises:
        TypeError: ``fn`` is neither callable nor ``None``.
    """
    from ._internal.recording import privacy

    privacy.set_redactor(fn)


def diagnostics() -> dict[str, int]:
    """Counts of every problem and drop seen (bad input, lost spans, write errors), by kind."""
    return _guard.diagnostics()


__all__ = [
    "Category", "ConfigError", "Settings", "atrace_scope", "atrace_session_phase", "attach",
    "carry", "configure", "context_kwargs", "diagnostics", "extract", "get_session_id",
    "get_task_id", "get_tracer", "increment_counter", "inject", "inject_env", "instant",
    "is_configured", "is_enabled", "propagating", "propagation", "register_phase",
    "register_session", "register_task", "reset", "run_summary", "save", "session_context", "set_redactor",
    "set_session_id",
    "set_step", "set_task_id", "settings", "shutdown", "stats", "step_scope", "trace_perf",
    "trace_scope", "trace_session", "trace_session_event", "trace_session_phase"
]
__all__ += [
    "PerfTraceCategory", "PerfTracer", "SessionTraceEvent", "SessionTracer", "get_otel_tracer",
    "get_session_tracer",
]
__all__ += [
    "ProfilingError", "control_app", "events", "profile_status", "serve_control", "start_profile",
    "start_request_profile", "stop_profile", "stop_request_profile",
]

from . import timers  # noqa: E402 - Unity ML-Agents timer names over the same spans
from .timers import hierarchical_timer, set_gauge, timed  # noqa: E402

__all__ += ["hierarchical_timer", "set_gauge", "timed", "timers"]
__all__ += ["annotate", "consume", "get_policy_version", "record_server_timings", "set_policy_version",
            "weight_sync"]


def _auto_configure() -> None:
    from ._internal.config import parse_bool

    value = _os.environ.get(_OTEL_RL_ENABLED)
    if value is None:
        return
    try:
        enabled = parse_bool(value)
    except ValueError as exc:
        raise ConfigError(f"invalid value for environment variable {_OTEL_RL_ENABLED}: {exc}") from None
    if enabled and not _STATE.configured:
        configure()


_auto_configure()
