"""Every attribute key, baggage key and file name otel_rl writes, defined once.

The ``rl.*`` namespace follows the public RL semantic-convention proposals where
they name something (task, session, step, phase); ``gen_ai.*`` keys come from the
OpenTelemetry GenAI semantic conventions and are used for generation requests.
"""

# --- ids carried in context (span attributes and W3C baggage use the same keys)
TASK_ID = "rl.task.id"
SESSION_ID = "rl.session.id"
STEP = "rl.step"

#: Keys copied from baggage onto every span started inside their context.
BAGGAGE_KEYS = (TASK_ID, SESSION_ID, STEP)

# --- resource attributes (one process of the job)
RANK = "rl.rank"
ROLE = "rl.role"
EXPERIMENT = "rl.experiment.name"
TRIAL = "rl.trial.name"

# --- span attributes
SPAN_KIND = "rl.span.kind"  # task | session | phase | step | scope | instant
CATEGORY = "rl.category"
PHASE = "rl.phase"
PHASE_INTERRUPTED = "rl.phase.interrupted"
SESSION_STATUS = "rl.session.status"
SESSION_REASON = "rl.session.reason"
SESSION_TOTAL_S = "rl.session.total_s"
#: True on a span whose context was sent to another process (inject, carry, context_kwargs,
#: inject_env): its remote children get flow arrows from it in the merged Perfetto trace.
CONTEXT_SENT = "rl.context.sent"
#: The step in force where a session's task was registered, when the step that
#: consumed it (``rl.step`` on the session, the step in force at ``mark_finalized``) differs.
SESSION_SUBMIT_STEP = "rl.session.submit_step"
#: ``rl.session.<phase>_s`` and ``rl.session.<phase>_count`` are derived per phase.
SESSION_PREFIX = "rl.session."
#: ``rl.session.counter.<name>`` carries ``increment_counter`` values.
SESSION_COUNTER_PREFIX = "rl.session.counter."
TASK_SESSIONS = "rl.task.sessions"
TASK_ACCEPTED = "rl.task.accepted"
TASK_REJECTED = "rl.task.rejected"
TASK_FAILED = "rl.task.failed"
TASK_DROPPED = "rl.task.dropped"
TASK_ACCEPTANCE_RATE = "rl.task.acceptance_rate"
#: Training / rollout statistics (``otel_rl.stats``): one gauge per exported key,
#: ``rl.stats.<key>``, whose data points carry the tracker's name.
STATS_METRIC_PREFIX = "rl.stats."
STATS_TRACKER = "rl.stats.tracker"
#: Prefix for user ``args`` / payload values on spans: ``rl.args.<key>``.
ARGS_PREFIX = "rl.args."
#: Request events (``otel_rl.events.emit``) as span events: the request, its stage
#: and the profiling run; metadata rides as ``rl.args.<key>``.
REQUEST_ID = "rl.request.id"
STAGE = "rl.stage"
PROFILE_RUN_ID = "rl.profile.run_id"
#: GPU time of a scope between two CUDA events, when ``OTEL_RL_CUDA_SYNC`` is on.
CUDA_ELAPSED_MS = "rl.cuda.elapsed_ms"
#: Value of an ML-Agents-style gauge (``otel_rl.timers.set_gauge``), on a span event
#: (or a zero-length span) named after the gauge.
GAUGE_VALUE = "rl.gauge.value"

# --- content capture (``OTEL_RL_CAPTURE_CONTENT``): user payload keys whose values are
# prompt / completion text or token ids. A flattened payload attribute
# (``rl.args.<a>.<b>``) is content when any of its dotted parts, lowercased, is one
# of these; any attribute is content when its key (``rl.args.`` stripped) starts
# with one of the GenAI prefixes.
CONTENT_KEYS = frozenset({
    "prompt", "prompts", "completion", "completions", "messages", "message", "text",
    "response", "responses", "input", "output", "content", "query", "answer",
    "input_ids", "output_ids", "token_ids", "prompt_ids", "completion_ids", "tokens",
})
GEN_AI_CONTENT_PREFIXES = (
    "gen_ai.prompt", "gen_ai.completion", "gen_ai.input.messages", "gen_ai.output.messages",
    "gen_ai.system_instructions", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
)
#: What a content value becomes when capture is off: ``REDACTED_TEXT`` for a string
#: (its length in characters), ``REDACTED_ITEMS`` for a sequence (its item count).
REDACTED_TEXT = "<redacted: {n} chars>"
REDACTED_ITEMS = "<redacted: {n} items>"
REDACTED_PREFIX = "<redacted: "

# --- span kinds (values of SPAN_KIND)
KIND_TASK = "task"
KIND_SESSION = "session"
KIND_PHASE = "phase"
KIND_STEP = "step"
KIND_INSTANT = "instant"  # instant() with no span current: a zero-length span

# --- GenAI semantic conventions used by generation phases
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"

# --- session statuses
STATUS_PENDING = "pending"
STATUS_ACCEPTED = "accepted"
STATUS_REJECTED = "rejected"
STATUS_FAILED = "failed"
STATUS_DROPPED = "dropped"
FINAL_STATUSES = (STATUS_ACCEPTED, STATUS_REJECTED, STATUS_FAILED, STATUS_DROPPED)

# --- instrumentation scope
INSTRUMENTATION_NAME = "otel_rl"

# --- files in the run directory (``{rank}`` is the process rank)
TRACES_FILE = "traces-r{rank}.jsonl"
SESSIONS_FILE = "sessions-r{rank}.jsonl"
METRICS_FILE = "metrics-r{rank}.jsonl"
#: Torch profiler (Kineto) Chrome trace of one profiling window; ``{run_id}`` is the
#: window's run id (``step<N>`` for a step window).
TORCH_TRACE_FILE = "torch-r{rank}-{run_id}.trace.json.gz"
#: Top-level key of a torch trace written by otel_rl naming the rank's trace file
#: (``{"traces_file": "traces-r0.jsonl", "pid": ..., ...}``): the converter puts
#: the kernels in that rank's process.
TRACE_JOIN_KEY = "otel_rl"
#: Request events: ``<event_dir>/events_<first stage>_<pid>.jsonl``, one JSON object
#: a line with exactly these fields (sglang-omni's format).
EVENTS_DIR = "events"
EVENTS_FILE = "events_{stage}_{pid}.jsonl"
EVENT_FIELDS = ("request_id", "stage", "event_name", "timestamp_ns", "run_id", "pid", "metadata")
#: Live control, in the run directory: the desired profiling state every process
#: watches, and each process's acknowledgement (``{host}`` and ``{pid}`` name it).
CONTROL_DIR = "control"
CONTROL_STATE_FILE = "state.json"
CONTROL_ACK_FILE = "ack-{host}-{pid}.json"
CONTROL_ACK_PREFIX = "ack-"
STATS_FILE = "stats-r{rank}.jsonl"
#: The run summary of one process (``otel_rl.run_summary()``), written at shutdown.
SUMMARY_FILE = "summary-r{rank}.json"
#: What the demo leaves in a run directory: the merged trace, the report. Directory inputs
#: of ``otel-rl convert`` / ``report`` skip the merged trace (it repeats every rank).
MERGED_TRACE_FILE = "trace.json"
REPORT_HTML_FILE = "report.html"
REPORT_TEXT_FILE = "report.txt"
#: The run summary of a process forked from a configured one (it shares its parent's rank).
FORKED_SUMMARY_FILE = "summary-r{rank}-pid{pid}.json"
#: A directory: TensorBoard event files of ``otel_rl.stats`` (when tensorboard is installed).
TENSORBOARD_DIR = "tensorboard-r{rank}"

# --- standard attribute keys otel_rl reads or writes (OpenTelemetry semantic conventions)
SERVICE_NAME = "service.name"
PROCESS_PID = "process.pid"
THREAD_ID = "thread.id"
THREAD_NAME = "thread.name"
HTTP_REQUEST_METHOD = "http.request.method"
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
URL_PATH = "url.path"
URL_SCHEME = "url.scheme"
