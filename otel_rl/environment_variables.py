"""Environment variables read by otel_rl.

Each constant names one variable; its default, type and unit live in the
registry in :mod:`otel_rl._internal.config`, which is also what the table in
``docs/reference.md`` is generated from (``scripts/gen_reference.py``). Standard ``OTEL_*`` variables (``OTEL_SDK_DISABLED``,
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
"""``save(step)`` writes the files at steps where ``(step + 1) % save_interval == 0`` (AReaL semantics)."""

OTEL_RL_PROFILE_STEPS = "OTEL_RL_PROFILE_STEPS"
"""Comma-separated steps whose ``enable_profiler=True`` scopes run under the torch profiler (AReaL ``profile_steps``)."""

OTEL_RL_RANKS = "OTEL_RL_RANKS"
"""Ranks that record (``0,2-4``); the others run with tracing off. Unset: every rank."""

AREAL_PERF_TRACER_RANKS = "AREAL_PERF_TRACER_RANKS"
"""AReaL's name for the ranks that record; read when ``OTEL_RL_RANKS`` is unset."""

OTEL_RL_LAYOUT = "OTEL_RL_LAYOUT"
"""File layout: ``otel_rl`` (``<root>/<experiment>/<trial>/traces-r{rank}.jsonl``) or ``areal``
(``<root>/logs/<user>/<experiment>/<trial>/perf_tracer/[<role>/]traces-r{rank}.jsonl``)."""

OTEL_RL_FILE_EXPORT = "OTEL_RL_FILE_EXPORT"
"""Write the Chrome-trace JSONL file per rank (the embedded default; on unless ``0``)."""

OTEL_RL_FILE_FORMAT = "OTEL_RL_FILE_FORMAT"
"""Format of the per-rank trace file: ``jsonl`` (the default: Chrome trace JSON lines, crash-safe,
what ``otel-rl convert`` merges) or ``perfetto`` (``traces-r{rank}.pftrace``, Perfetto's native
TracePacket protobuf; the files of all ranks concatenate into one trace)."""

OTEL_RL_MAX_QUEUE_SIZE = "OTEL_RL_MAX_QUEUE_SIZE"
"""Finished spans buffered for the background exporter before new ones are dropped and counted."""

OTEL_RL_EXPORT_INTERVAL_MS = "OTEL_RL_EXPORT_INTERVAL_MS"
"""How often the background thread drains finished spans, in milliseconds."""

OTEL_RL_SHUTDOWN_TIMEOUT_MS = "OTEL_RL_SHUTDOWN_TIMEOUT_MS"
"""Upper bound on the time ``shutdown()`` (and process exit) may take, in milliseconds."""

OTEL_RL_HANDLE_SIGTERM = "OTEL_RL_HANDLE_SIGTERM"
"""On SIGTERM (when nothing else handles it), flush and close within ``shutdown_timeout_ms`` before exiting."""

OTEL_RL_MAX_PENDING_SESSIONS = "OTEL_RL_MAX_PENDING_SESSIONS"
"""Sessions kept open at once; beyond it the oldest is ended as ``dropped`` and counted."""

OTEL_RL_EXPORT_PROCESS = "OTEL_RL_EXPORT_PROCESS"
"""Run span encoding and export in a child exporter process when otel_rl owns the tracer provider."""

OTEL_RL_STATS_STEP_ATTRIBUTE = "OTEL_RL_STATS_STEP_ATTRIBUTE"
"""Put the training step (``rl.step``) on every ``otel_rl.stats`` data point (one series per step)."""

OTEL_RL_STATS_TENSORBOARD = "OTEL_RL_STATS_TENSORBOARD"
"""Write ``otel_rl.stats`` exports as TensorBoard event files when the tensorboard package is installed."""

OTEL_RL_CONTROL = "OTEL_RL_CONTROL"
"""Watch the run directory's control file and follow live profiling commands broadcast to the job."""

OTEL_RL_CONTROL_PORT = "OTEL_RL_CONTROL_PORT"
"""Serve the HTTP control surface on this port when ``configure()`` runs (``0``: any free port)."""

OTEL_RL_CONTROL_HOST = "OTEL_RL_CONTROL_HOST"
"""Interface the HTTP control surface binds to (loopback by default)."""

OTEL_RL_CONTROL_TOKEN = "OTEL_RL_CONTROL_TOKEN"
"""Bearer token the HTTP control surface requires (``Authorization: Bearer <token>``) when set."""

OTEL_RL_CONTROL_POLL_MS = "OTEL_RL_CONTROL_POLL_MS"
"""How often each process checks the control file, in milliseconds."""

OTEL_RL_CONTROL_ACK_WAIT_MS = "OTEL_RL_CONTROL_ACK_WAIT_MS"
"""How long a control request waits for the registered processes to acknowledge, in milliseconds."""

OTEL_RL_CONTROL_EVENT_DIRS = "OTEL_RL_CONTROL_EVENT_DIRS"
"""Directories (``os.pathsep``-separated) a control request's ``event_dir`` may name besides the
run directory; ``*`` allows any. Unset: request events and profiler output stay in the run directory."""

OTEL_RL_TORCH_PROFILE_STEPS = "OTEL_RL_TORCH_PROFILE_STEPS"
"""Comma-separated steps whose ``step_scope`` runs under the torch profiler."""

OTEL_RL_TORCH_RECORD_SHAPES = "OTEL_RL_TORCH_RECORD_SHAPES"
"""Torch profiler: record input shapes per op (bigger traces)."""

OTEL_RL_TORCH_PROFILE_MEMORY = "OTEL_RL_TORCH_PROFILE_MEMORY"
"""Torch profiler: track every allocation and free (much bigger traces)."""

OTEL_RL_TORCH_WITH_STACK = "OTEL_RL_TORCH_WITH_STACK"
"""Torch profiler: record the Python and C++ call stack per op (much bigger traces)."""

OTEL_RL_TORCH_WITH_FLOPS = "OTEL_RL_TORCH_WITH_FLOPS"
"""Torch profiler: estimate FLOPs per op."""

OTEL_RL_CUDA_SYNC = "OTEL_RL_CUDA_SYNC"
"""Wait for the GPU at the start and end of each scope and step (CUDA events), so their times include the GPU work."""

# --- security and privacy
OTEL_RL_CAPTURE_CONTENT = "OTEL_RL_CAPTURE_CONTENT"
"""Record prompt / completion text and token ids found in user payloads (off by default)."""

OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI instrumentations' switch; read when ``OTEL_RL_CAPTURE_CONTENT`` is unset."""

OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT = "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"
"""Standard: longest string attribute value on a span (otel_rl's own spans as well)."""

OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT = "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"
"""Standard: the general limit, read when the span-specific one is unset."""

OTEL_RL_FILE_MODE = "OTEL_RL_FILE_MODE"
"""Permission bits (octal) of files otel_rl creates; directories get the matching x bits."""

OTEL_RL_BAGGAGE_ALLOW = "OTEL_RL_BAGGAGE_ALLOW"
"""Incoming baggage keys kept besides otel_rl's own (comma list; ``*`` keeps all)."""

# --- standard OTLP endpoints, checked by configure() (read by the exporters)
OTEL_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
"""Standard: the collector's endpoint for every signal."""

OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
"""Standard: the collector's endpoint for spans (beats ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""

OTEL_EXPORTER_OTLP_METRICS_ENDPOINT = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
"""Standard: the collector's endpoint for metrics (beats ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
