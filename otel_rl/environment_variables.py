"""Environment variables read by otel_rl.

Each constant names one variable; its default, type and unit live in the
registry in :mod:`otel_rl._internal.config`, which is also what the README's
table is generated from. Standard ``OTEL_*`` variables (``OTEL_SDK_DISABLED``,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_*``,
``OTEL_TRACES_SAMPLER[_ARG]``, ``OTEL_BSP_*``, ``OTEL_PROPAGATORS``) keep their
OpenTelemetry meaning and are read by the SDK.
"""

OTEL_RL_ENABLED = "OTEL_RL_ENABLED"
"""``1``/``true`` makes otel_rl configure itself on import, with no code change."""

OTEL_RL_DIR = "OTEL_RL_DIR"
"""Root directory for run files; the run directory is ``<root>/<experiment>/<trial>``."""

OTEL_RL_EXPERIMENT = "OTEL_RL_EXPERIMENT"
"""Experiment name (resource attribute ``rl.experiment.name``, part of the run directory)."""

OTEL_RL_TRIAL = "OTEL_RL_TRIAL"
"""Trial name (resource attribute ``rl.trial.name``, part of the run directory)."""

OTEL_RL_RANK = "OTEL_RL_RANK"
"""Rank of this process; falls back to ``RANK`` (torchrun), then 0."""

OTEL_RL_ROLE = "OTEL_RL_ROLE"
"""Role of this process (``trainer``, ``rollout``, ``server``...); part of file names when set."""

OTEL_RL_SESSION_TRACER = "OTEL_RL_SESSION_TRACER"
"""Session lifecycle tracking (session records, derived attributes, metrics)."""

OTEL_RL_FLUSH_THRESHOLD = "OTEL_RL_FLUSH_THRESHOLD"
"""Session records buffered before they are written (AReaL ``flush_threshold``)."""

OTEL_RL_SAVE_INTERVAL = "OTEL_RL_SAVE_INTERVAL"
"""``save(step)`` flushes files when ``step % save_interval == 0`` (AReaL semantics)."""

OTEL_RL_PROFILE_STEPS = "OTEL_RL_PROFILE_STEPS"
"""Comma-separated steps during which scopes are recorded; unset records every step."""

OTEL_RL_FILE_EXPORT = "OTEL_RL_FILE_EXPORT"
"""Write the Chrome-trace JSONL file per rank (the embedded default; on unless ``0``)."""

OTEL_RL_MAX_QUEUE_SIZE = "OTEL_RL_MAX_QUEUE_SIZE"
"""Finished spans buffered for the background exporter before new ones are dropped and counted."""

OTEL_RL_EXPORT_INTERVAL_MS = "OTEL_RL_EXPORT_INTERVAL_MS"
"""How often the background thread drains finished spans, in milliseconds."""

OTEL_RL_SHUTDOWN_TIMEOUT_MS = "OTEL_RL_SHUTDOWN_TIMEOUT_MS"
"""Upper bound on the time ``shutdown()`` (and process exit) may take, in milliseconds."""

OTEL_RL_MAX_PENDING_SESSIONS = "OTEL_RL_MAX_PENDING_SESSIONS"
"""Sessions kept open at once; beyond it the oldest is ended as ``dropped`` and counted."""

OTEL_RL_EXPORT_PROCESS = "OTEL_RL_EXPORT_PROCESS"
"""Run span encoding and export in a child exporter process when otel_rl owns the tracer provider."""
