"""Every attribute key, baggage key and file name otel_rl writes, defined once.

The ``rl.*`` namespace follows the public RL semantic-convention proposals where
they name something (task, session, step, phase); ``gen_ai.*`` keys come from the
OpenTelemetry GenAI semantic conventions and are used for generation requests.

The ``#:`` comment above each constant is its entry in ``docs/reference.md``,
which ``scripts/gen_reference.py`` writes from this module.
"""

import sys

# --- ids carried in context (span attributes and W3C baggage use the same keys)
#: The task's id (``register_task``): in baggage and on every span started in the task's
#: context; an integer outside int64 is written as its decimal text.
TASK_ID = "rl.task.id"
#: The session's id (``register_session``, ``session_context``): in baggage and on every
#: span started in the session's context.
SESSION_ID = "rl.session.id"
#: The training step (``step_scope``, ``set_step``): in baggage and on every span started
#: inside it; on a session span, the step that consumed the session.
STEP = "rl.step"

#: Keys copied from baggage onto every span started inside their context.
BAGGAGE_KEYS = (TASK_ID, SESSION_ID, STEP)

# --- resource attributes (one process of the job)
#: Resource attribute: the process's rank.
RANK = "rl.rank"
#: Resource attribute: the process's role (``trainer``, ``rollout``, ...), when one is set.
ROLE = "rl.role"
#: Resource attribute: the experiment name.
EXPERIMENT = "rl.experiment.name"
#: Resource attribute: the trial name.
TRIAL = "rl.trial.name"

# --- span attributes
#: On otel_rl's spans: what the span is, one of the span kinds below (``task``, ``session``,
#: ``phase``, ``step``, ``instant``); scopes carry none.
SPAN_KIND = "rl.span.kind"
#: On scopes: their ``Category`` value (``compute``, ``comm``, ...), or the string given.
CATEGORY = "rl.category"
#: On phase spans: the phase's name.
PHASE = "rl.phase"
#: On phase spans: ``true`` when the phase was still running as its session ended.
PHASE_INTERRUPTED = "rl.phase.interrupted"
#: On session spans: ``accepted``, ``rejected``, ``failed`` (span status ERROR), ``dropped``
#: or ``pending``.
SESSION_STATUS = "rl.session.status"
#: On session spans: the ``reason`` given with the verdict.
SESSION_REASON = "rl.session.reason"
#: On session spans: seconds from registration to finalize.
SESSION_TOTAL_S = "rl.session.total_s"
#: True on a span whose context was sent to another process (inject, carry, context_kwargs,
#: inject_env): its remote children get flow arrows from it in the merged Perfetto trace.
CONTEXT_SENT = "rl.context.sent"
#: The step in force where a session's task was registered, when the step that
#: consumed it (``rl.step`` on the session, the step in force at ``mark_finalized``) differs.
SESSION_SUBMIT_STEP = "rl.session.submit_step"
#: The policy (weights) version a span ran under (``set_policy_version``): on phase spans
#: (the version when the phase started), session spans (when registered), weight syncs
#: (the version synced) and annotations. Maps to the ``rl.policy.version`` proposal of the
#: semantic conventions for RL.
POLICY_VERSION = "rl.policy.version"
#: On session spans: the trainer step that consumed the session (``otel_rl.consume``).
SESSION_CONSUMED_STEP = "rl.session.consumed_step"
#: On session spans and consume links: the consumer's policy version minus the oldest
#: version the session saw (numeric versions only).
SESSION_STALENESS = "rl.session.staleness"
#: On consume links: ``true`` when the session saw more than one policy version.
SESSION_CROSSED_UPDATE = "rl.session.crossed_update"
#: On session spans: the reward given with ``mark_finalized(..., reward=...)``.
SESSION_REWARD = "rl.session.reward"
#: On weight-sync spans: ``send`` (the trainer publishing) or ``recv`` (a worker loading).
WEIGHT_SYNC_ROLE = "rl.weight_sync.role"
#: ``rl.annotation.<name>`` carries an ``otel_rl.annotate`` value on an annotation span.
ANNOTATION_PREFIX = "rl.annotation."
#: ``rl.session.<phase>_s`` and ``rl.session.<phase>_count`` are derived per phase.
SESSION_PREFIX = "rl.session."
#: ``rl.session.counter.<name>`` carries ``increment_counter`` values.
SESSION_COUNTER_PREFIX = "rl.session.counter."
#: On task spans: how many sessions the task had.
TASK_SESSIONS = "rl.task.sessions"
#: On task spans: how many of its sessions were accepted.
TASK_ACCEPTED = "rl.task.accepted"
#: On task spans: how many of its sessions were rejected.
TASK_REJECTED = "rl.task.rejected"
#: On task spans: how many of its sessions failed.
TASK_FAILED = "rl.task.failed"
#: On task spans: how many of its sessions were dropped.
TASK_DROPPED = "rl.task.dropped"
#: On task spans: accepted sessions as a fraction of all its sessions.
TASK_ACCEPTANCE_RATE = "rl.task.acceptance_rate"
#: Training / rollout statistics (``otel_rl.stats``): one gauge per exported key,
#: ``rl.stats.<key>``, whose data points carry the tracker's name.
STATS_METRIC_PREFIX = "rl.stats."
#: On ``otel_rl.stats`` data points: the name of the tracker that exported the value.
STATS_TRACKER = "rl.stats.tracker"
#: Prefix for user ``args`` / payload values on spans: ``rl.args.<key>`` (read at the call;
#: tensors and arrays summarised as ``.type``, ``.shape``, ``.dtype``, ``.device``).
ARGS_PREFIX = "rl.args."
#: On request-event span events (``otel_rl.events.emit``): the request's id; the event's
#: metadata rides as ``rl.args.<key>``.
REQUEST_ID = "rl.request.id"
#: On request-event span events: the stage that emitted the event.
STAGE = "rl.stage"
#: On request-event span events: the profiling run the event was recorded in.
PROFILE_RUN_ID = "rl.profile.run_id"
#: GPU time of a scope between two CUDA events, when ``OTEL_RL_CUDA_SYNC`` is on.
CUDA_ELAPSED_MS = "rl.cuda.elapsed_ms"
#: Value of an ML-Agents-style gauge (``otel_rl.timers.set_gauge``), on a span event
#: (or a zero-length span) named after the gauge.
GAUGE_VALUE = "rl.gauge.value"
#: On ``rl.gauge`` metric points: the gauge's (or sampled counter's) name.
GAUGE_NAME = "rl.gauge.name"
#: The sampled counter of open sessions in a process (a counter track in Perfetto).
SESSIONS_IN_FLIGHT = "rl.sessions.in_flight"
#: The sampled counter of GPU memory allocated by torch at the end of each step, in bytes.
GPU_MEMORY_ALLOCATED = "rl.gpu.memory.allocated"

# --- the trace file's own args on each slice (Chrome JSONL), short because every line has them
#: A slice's span id (16 hex digits); on a root span it is also the trace id (its upper half zero).
TRACE_ARG_SPAN_ID = "id"
#: A slice's parent span id (16 hex digits), on spans with a parent.
TRACE_ARG_PARENT_ID = "parent"
#: A slice's trace id: 16 hex digits where its upper half is zero, 32 otherwise; left out on a
#: root span whose trace id is its own span id.
TRACE_ARG_TRACE_ID = "trace"
#: The same args as files written before these names were shortened call them; readers take both.
TRACE_ARG_LEGACY = {"span_id": TRACE_ARG_SPAN_ID, "parent_span_id": TRACE_ARG_PARENT_ID,
                    "trace_id": TRACE_ARG_TRACE_ID}
#: Every name a slice's id args have had (older names first): not an attribute's name in args.
TRACE_ARG_NAMES = (*TRACE_ARG_LEGACY, *TRACE_ARG_LEGACY.values())
#: The category a slice has when the trace file writes none.
DEFAULT_CATEGORY = "span"

# --- content capture (``OTEL_RL_CAPTURE_CONTENT``): user payload keys whose values are
# prompt / completion text or token ids. A flattened payload attribute
# (``rl.args.<a>.<b>``) is content when any of its dotted parts, lowercased, is one
# of these; any attribute is content when its key (``rl.args.`` stripped) starts
# with one of the GenAI prefixes.
#: Payload keys whose string or sequence values are content: redacted unless capture is on.
CONTENT_KEYS = frozenset({
    "prompt", "prompts", "completion", "completions", "messages", "message", "text",
    "response", "responses", "input", "output", "content", "query", "answer",
    "input_ids", "output_ids", "token_ids", "prompt_ids", "completion_ids", "tokens",
})
#: GenAI attribute prefixes whose values are content: redacted unless capture is on.
GEN_AI_CONTENT_PREFIXES = (
    "gen_ai.prompt", "gen_ai.completion", "gen_ai.input.messages", "gen_ai.output.messages",
    "gen_ai.system_instructions", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
)
#: What a content string becomes when capture is off (its length in characters).
REDACTED_TEXT = "<redacted: {n} chars>"
#: What a content sequence becomes when capture is off (its item count).
REDACTED_ITEMS = "<redacted: {n} items>"
#: How every redacted value starts (a value already redacted is left as it is).
REDACTED_PREFIX = "<redacted: "

# --- span kinds (values of SPAN_KIND)
#: A task's span: the root of the task's own trace.
KIND_TASK = "task"
#: A session's span: a child of its task's span.
KIND_SESSION = "session"
#: A phase instance's span: a child of its session's span.
KIND_PHASE = "phase"
#: A training step's span (``step_scope``): a root span per step.
KIND_STEP = "step"
#: ``instant()`` with no span current: a zero-length span.
KIND_INSTANT = "instant"
#: A weight sync (``otel_rl.weight_sync``): the trainer's send or a worker's receive.
KIND_WEIGHT_SYNC = "weight_sync"
#: ``otel_rl.annotate``: a zero-length span linked to the annotated session's span.
KIND_ANNOTATION = "annotation"
#: A sampled counter value (sessions in flight, GPU memory): a zero-length span named after
#: the counter with ``rl.gauge.value``, drawn as a counter track, not a slice.
KIND_COUNTER = "counter"

# --- GenAI semantic conventions used by generation phases
#: The model a generation request asked for, when passed as an attribute.
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
#: Prompt tokens of a generation request, when passed as an attribute.
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
#: Generated tokens of a request, when passed as an attribute (the report's response lengths).
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"

# --- session statuses
#: Still open when otel_rl shut down.
STATUS_PENDING = "pending"
#: Finalized as used for training.
STATUS_ACCEPTED = "accepted"
#: Finalized as not used (stale, truncated, zero advantage, ...; the reason says which).
STATUS_REJECTED = "rejected"
#: Finalized as failed: the session span's status is ERROR.
STATUS_FAILED = "failed"
#: Ended by otel_rl: evicted beyond ``max_pending_sessions``, or dropped by the caller.
STATUS_DROPPED = "dropped"
#: The statuses ``mark_finalized`` accepts without a warning.
FINAL_STATUSES = (STATUS_ACCEPTED, STATUS_REJECTED, STATUS_FAILED, STATUS_DROPPED)
#: A finalization reason holding this text (any case) marks a session rejected or dropped
#: for staleness: counted by ``rl.sessions.stale`` and the report's pipeline view.
STALE_REASON_MARK = "stale"

# --- instrumentation scope
#: The instrumentation scope of otel_rl's spans and meters.
INSTRUMENTATION_NAME = "otel_rl"

# --- files in the run directory (``{rank}`` is the process rank)
#: Chrome Trace Event Format, one event per line (``{role}-r{rank}`` when a role is set).
TRACES_FILE = "traces-r{rank}.jsonl"
#: The same spans in Perfetto's native format, when ``OTEL_RL_FILE_FORMAT=perfetto``:
#: TracePacket protobuf; the files of every rank concatenate into one trace.
PERFETTO_TRACES_FILE = "traces-r{rank}.pftrace"
#: One AReaL-compatible record per session.
SESSIONS_FILE = "sessions-r{rank}.jsonl"
#: Session metrics, when no OTLP endpoint is set (the SDK's JSON form of each export).
METRICS_FILE = "metrics-r{rank}.jsonl"
#: Torch profiler (Kineto) Chrome trace of one profiling window; ``{run_id}`` is the
#: window's run id (``step<N>`` for a step window).
TORCH_TRACE_FILE = "torch-r{rank}-{run_id}.trace.json.gz"
#: Top-level key of a torch trace written by otel_rl naming the rank's trace file
#: (``{"traces_file": "traces-r0.jsonl", "pid": ..., ...}``): the converter puts
#: the kernels in that rank's process.
TRACE_JOIN_KEY = "otel_rl"
#: The default directory of request events, in the run directory.
EVENTS_DIR = "events"
#: Request events of one process: ``<event_dir>/events_<first stage>_<pid>.jsonl``,
#: one JSON object a line with exactly the fields below (sglang-omni's format).
EVENTS_FILE = "events_{stage}_{pid}.jsonl"
#: The fields of a request-events line, in file order (sglang-omni's).
EVENT_FIELDS = ("request_id", "stage", "event_name", "timestamp_ns", "run_id", "pid", "metadata")
#: Live profiling control, in the run directory: the job's desired profiling state,
#: which every process watches, and each process's acknowledgement.
CONTROL_DIR = "control"
#: The job's desired profiling state, in the control directory.
CONTROL_STATE_FILE = "state.json"
#: One process's acknowledgement and registration, in the control directory
#: (``{host}`` and ``{pid}`` name the process).
CONTROL_ACK_FILE = "ack-{host}-{pid}.json"
#: How acknowledgement files are recognised.
CONTROL_ACK_PREFIX = "ack-"
#: ``otel_rl.stats`` exports of the logging rank: one line per tracker export.
STATS_FILE = "stats-r{rank}.jsonl"
#: Annotations and consumptions of sessions (``otel_rl.annotate``, ``otel_rl.consume``),
#: appended one JSON object a line and joined into the sessions when read.
ANNOTATIONS_FILE = "annotations-r{rank}.jsonl"
#: The run summary of one process (``otel_rl.run_summary()``), written at shutdown.
SUMMARY_FILE = "summary-r{rank}.json"
#: The merged trace the demo leaves in a run directory (every process, for Perfetto).
#: Directory inputs of ``otel-rl convert`` / ``report`` skip it (it repeats every rank).
MERGED_TRACE_FILE = "trace.json"
#: The same merged trace in Perfetto's native format, which the demo leaves beside it.
MERGED_PERFETTO_FILE = "trace.pftrace"
#: The demo's interactive report (``otel-rl report --format html``).
REPORT_HTML_FILE = "report.html"
#: The demo's table report, when plotly is not installed.
REPORT_TEXT_FILE = "report.txt"
#: The run summary of a process forked from a configured one (it shares its parent's rank).
FORKED_SUMMARY_FILE = "summary-r{rank}-pid{pid}.json"
#: A directory: TensorBoard event files of ``otel_rl.stats`` (when tensorboard is installed).
TENSORBOARD_DIR = "tensorboard-r{rank}"

# --- standard attribute keys otel_rl reads or writes (OpenTelemetry semantic conventions)
#: Resource attribute: the service (``OTEL_SERVICE_NAME``, default ``otel-rl``).
SERVICE_NAME = "service.name"
#: Resource attribute: the process id.
PROCESS_PID = "process.pid"
#: On otel_rl's spans: the thread's id (the Perfetto track).
THREAD_ID = "thread.id"
#: On otel_rl's spans: the thread's name (the Perfetto track's name).
THREAD_NAME = "thread.name"
#: On ``ASGIMiddleware`` SERVER spans: the request's method.
HTTP_REQUEST_METHOD = "http.request.method"
#: On ``ASGIMiddleware`` SERVER spans: the response's status (ERROR on 5xx).
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
#: On ``ASGIMiddleware`` SERVER spans: the request's path.
URL_PATH = "url.path"
#: On ``ASGIMiddleware`` SERVER spans: the request's scheme.
URL_SCHEME = "url.scheme"

# --- inference server timings (``record_server_timings``)
#: A child span made from an inference engine's own per-request timings (``queue``,
#: ``prefill``, ``kv_transfer``, ``decode``), under the span current at the call.
KIND_SERVER_TIMING = "server_timing"
#: On server-timing spans: the engine whose fields they were read from (``sglang``, ``vllm``).
SERVER_ENGINE = "rl.server.engine"
#: On server-timing spans: ``measured`` when both ends come from the engine's own timestamps
#: (or one timestamp and the stage's duration), ``inferred`` when the span was laid against
#: its neighbours or the time of the call from a duration (see ``record_server_timings``).
SERVER_PLACEMENT = "rl.server.placement"
#: ``rl.server.placement`` of a span placed by the engine's own clock.
PLACEMENT_MEASURED = "measured"
#: ``rl.server.placement`` of a span with an end taken from a neighbouring stage or the
#: time of the call (the engine gave its duration, or one timestamp, only).
PLACEMENT_INFERRED = "inferred"
#: On ``prefill`` server-timing spans: prompt tokens served from the engine's prefix cache
#: (OpenTelemetry GenAI semantic conventions; included in ``gen_ai.usage.input_tokens``).
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"


def _interned(value):
    """``value`` with every text in it interned (tuples, frozensets and dicts rebuilt)."""
    if type(value) is str:
        return sys.intern(value)
    if type(value) in (tuple, frozenset):
        return type(value)(_interned(item) for item in value)
    if type(value) is dict:
        return {_interned(key): _interned(item) for key, item in value.items()}
    return value


# Every name above interned: a literal with a dot in it is not, while the exporter process
# interns the names it reads back from its pipe (marshal keeps them interned). The attribute
# and baggage dicts on both sides, and the compiled steps' own keys, are then the very same
# objects, so a dict lookup matches by identity instead of comparing text.
for _name, _value in list(globals().items()):
    if _name.isupper():
        globals()[_name] = _interned(_value)
del _name, _value
