"""Every diagnostic kind otel_rl counts, defined once.

A problem inside otel_rl is never raised into the training loop: it is counted
by kind (:func:`otel_rl.diagnostics`, the run summary) and logged the first time
it is seen (:mod:`otel_rl._internal.guard`). Kinds are part of the public output
(``diagnostics()`` keys, ``summary.json``), so their strings never change.
The ``#:`` comment above each kind is its meaning in ``docs/reference.md``, which
``scripts/gen_reference.py`` writes from this module.
"""

from __future__ import annotations

#: A category that is neither a ``Category`` nor a string; recorded as ``misc``.
BAD_CATEGORY_TYPE = "bad_category_type"
#: ``set_gauge`` got a value that is not a number; ignored.
BAD_GAUGE_VALUE = "bad_gauge_value"
#: ``mark_finalized`` got a ``reward`` that is not a number; the session is finalized without it.
BAD_REWARD = "bad_reward"
#: ``SessionTracer.record_event`` got an event it cannot read; ignored.
BAD_SESSION_EVENT = "bad_session_event"
#: ``reset_active_stage`` got something that is not a stage token; ignored.
BAD_STAGE_TOKEN = "bad_stage_token"
#: Incoming baggage entries dropped: keys not otel_rl's and not named by ``OTEL_RL_BAGGAGE_ALLOW``.
BAGGAGE_DROPPED = "baggage_dropped"
#: Incoming baggage entries left out beyond the W3C limits (180 entries, 8192 bytes).
BAGGAGE_TRIMMED = "baggage_trimmed"
#: A span could not be encoded as Chrome trace events; left out of the trace file.
CHROME_TRACE_ENCODE_ERROR = "chrome_trace_encode_error"
#: Flow arrows not drawn: too many children (4096) waited for one parent span not yet placed.
CHROME_TRACE_FLOWS_DROPPED = "chrome_trace_flows_dropped"
#: Spans of a session laid out before its session span arrived (too many were waiting).
CHROME_TRACE_SESSIONS_RELEASED_EARLY = "chrome_trace_sessions_released_early"
#: A payload value whose contents could not be walked; redacted whole.
CONTENT_REDACTED_UNREADABLE = "content_redacted_unreadable"
#: A process could not apply the job's control state (an ``event_dir`` it may not use); its ack says why.
CONTROL_APPLY_ERROR = "control_apply_error"
#: Control connections answered 503: more than 16 were open at once.
CONTROL_CONNECTIONS_REFUSED = "control_connections_refused"
#: Live profiling control failed (start, watcher, acknowledgement or a request); tracing goes on.
CONTROL_ERROR = "control_error"
#: The control port is taken (another rank serves it); this process follows the control file.
CONTROL_PORT_UNAVAILABLE = "control_port_unavailable"
#: The job's control state file could not be read or parsed; ignored.
CONTROL_STATE_INVALID = "control_state_invalid"
#: The control state file was not followed: not a regular file of this user, or reached by a link.
CONTROL_STATE_REFUSED = "control_state_refused"
#: CUDA-synchronised timing failed for a scope or step; it is recorded without it.
CUDA_SYNC_ERROR = "cuda_sync_error"
#: Lines this process had written to a run file that was then deleted.
DELETED_FILE_LINES_LOST = "deleted_file_lines_lost"
#: A session finalized a second time; the first status stands.
DOUBLE_FINALIZE = "double_finalize"
#: A session event for a session already finalized; ignored.
EVENT_AFTER_FINALIZE = "event_after_finalize"
#: A request event's ``timestamp_ns`` is not a number of nanoseconds; the current time is used.
EVENT_BAD_TIMESTAMP = "event_bad_timestamp"
#: A request event could not be recorded (no ``event_name``, or a failure inside ``emit``); dropped.
EVENT_ERROR = "event_error"
#: The request-events file could not be written; it is opened again at the next event.
EVENT_WRITE_ERROR = "event_write_error"
#: Request events lost to a failed write.
EVENTS_LOST = "events_lost"
#: Request events dropped because their ``expected_run_id`` is not the run recording.
EVENTS_OTHER_RUN = "events_other_run"
#: An output failed on a span, a batch, a flush or a shutdown; export goes on.
EXPORT_ERROR = "export_error"
#: The exporter process fell behind while the queue was full too; new spans were dropped.
EXPORTER_BACKLOG = "exporter_backlog"
#: The exporter process died or stopped making progress; export goes on in the training process.
EXPORTER_PROCESS_LOST = "exporter_process_lost"
#: A waiting save or flush did not finish within ``shutdown_timeout_ms``.
FLUSH_TIMEOUT = "flush_timeout"
#: A peer's keyword argument otel_rl cannot honour: accepted, ignored, counted once per name.
IGNORED_ARGUMENT = "ignored_argument"
#: A bug inside otel_rl, caught where the API was called; the call returns without recording.
INTERNAL_ERROR = "internal_error"
#: Session metrics could not be recorded or flushed.
METRICS_ERROR = "metrics_error"
#: Metric exports that could not be written to ``metrics-r{rank}.jsonl``.
METRICS_LINES_LOST = "metrics_lines_lost"
#: The metrics file could not be written.
METRICS_WRITE_ERROR = "metrics_write_error"
#: A session event or phase outside any session; ignored.
NO_SESSION = "no_session"
#: An ``OTEL_EXPORTER_OTLP_*`` / ``OTEL_BSP_*`` value the SDK would misread, corrected (warned once).
OTLP_ENV_CORRECTED = "otlp_env_corrected"
#: OTLP export did not finish within its bound; spans stay queued (bounded) and are retried.
OTLP_FLUSH_TIMEOUT = "otlp_flush_timeout"
#: A phase registered with ``allow_overlap=False`` started while one was open; both are recorded.
OVERLAPPING_PHASE = "overlapping_phase"
#: An event could not be written to a native Perfetto trace; it is left out.
PERFETTO_TRACE_ENCODE_ERROR = "perfetto_trace_encode_error"
#: ``mark_<phase>_end`` with no open instance of that phase; ignored.
PHASE_END_WITHOUT_START = "phase_end_without_start"
#: A span processor raised in ``on_start`` or ``on_end``; the span goes on.
PROCESSOR_ERROR = "processor_error"
#: A stop named a run other than the one recording; nothing was stopped.
PROFILE_RUN_ID_MISMATCH = "profile_run_id_mismatch"
#: ``start`` with another ``run_id`` ended the run that was recording (sglang-omni's switch).
PROFILE_RUN_SWITCHED = "profile_run_switched"
#: Injecting or extracting a trace context failed; the carrier or context is left empty.
PROPAGATION_ERROR = "propagation_error"
#: The redaction hook raised; the value (or the span's payloads) is dropped.
REDACTOR_ERROR = "redactor_error"
#: A run file was deleted while being written; later lines go to a new file at its path.
RUN_FILE_DELETED = "run_file_deleted"
#: A run file was moved away (rotated) while being written; later lines go to a new file.
RUN_FILE_MOVED = "run_file_moved"
#: The sampler raised; the span is kept.
SAMPLER_ERROR = "sampler_error"
#: Phases of sessions never finalized, forgotten beyond ``max_pending_sessions``.
SESSION_PHASES_EVICTED = "session_phases_evicted"
#: Session records that could not be derived or written.
SESSION_RECORDS_LINES_LOST = "session_records_lines_lost"
#: A session record could not be written.
SESSION_RECORDS_WRITE_ERROR = "session_records_write_error"
#: A session registered for a task never registered; the task is registered then.
SESSION_WITHOUT_TASK = "session_without_task"
#: Open sessions ended as ``dropped`` beyond ``max_pending_sessions``, oldest first.
SESSIONS_EVICTED = "sessions_evicted"
#: Shutdown ran out of ``shutdown_timeout_ms`` with work left; what was left is counted.
SHUTDOWN_TIMEOUT = "shutdown_timeout"
#: A span ended after otel_rl was shut down; not recorded.
SPANS_AFTER_SHUTDOWN = "spans_after_shutdown"
#: Spans that reached the exporter process after the end of the run; dropped.
SPANS_DROPPED_AFTER_END = "spans_dropped_after_end"
#: Spans dropped because the exporter process's backlog and the queue were both full.
SPANS_DROPPED_EXPORTER_BACKLOG = "spans_dropped_exporter_backlog"
#: Spans dropped because the trace file's batch buffer was full.
SPANS_DROPPED_FILE_BUFFER = "spans_dropped_file_buffer"
#: Spans the OTLP exporter's full queue dropped (the collector fell ``max_queue_size`` spans behind).
SPANS_DROPPED_OTLP_QUEUE = "spans_dropped_otlp_queue"
#: Spans dropped because ``max_queue_size`` spans already waited for the export thread.
SPANS_DROPPED_QUEUE_FULL = "spans_dropped_queue_full"
#: Spans not yet exported (or not confirmed by the exporter process) when shutdown ran out.
SPANS_DROPPED_UNPROCESSED_AT_EXIT = "spans_dropped_unprocessed_at_exit"
#: A stats backend failed to build, log, flush or close; the other backends go on.
STATS_BACKEND_ERROR = "stats_backend_error"
#: A stats export's step is not an integer; logged without a step.
STATS_BAD_STEP = "stats_bad_step"
#: ``stats.commit()`` got a value that is not a number; left out.
STATS_BAD_VALUE = "stats_bad_value"
#: A key exported by more than one tracker in one ``export_all``; the tracker sorted last wins.
STATS_DUPLICATE_KEY = "stats_duplicate_key"
#: A stats key whose tensors could not be read at export; left out.
STATS_EXPORT_ERROR = "stats_export_error"
#: A stats key recorded differently on different ranks; left out on every rank.
STATS_INCONSISTENT_KEY = "stats_inconsistent_key"
#: A stats key with a per-key group on some ranks only and no ``key_sync_group``; left out.
STATS_KEY_SYNC_GROUP_MISSING = "stats_key_sync_group_missing"
#: ``merge_worker_stats`` left out keys with no ``__count`` to weight them by.
STATS_MERGE_UNWEIGHTED = "stats_merge_unweighted"
#: NaN or infinite values recorded in stats (they propagate into the export, as in AReaL).
STATS_NONFINITE_VALUES = "stats_nonfinite_values"
#: A ``stat()`` beyond the masks its denominator recorded; left out.
STATS_UNPAIRED_VALUE = "stats_unpaired_value"
#: The run summary file could not be written.
SUMMARY_WRITE_ERROR = "summary_write_error"
#: A task id registered twice; the first task is ended.
TASK_REREGISTERED = "task_reregistered"
#: An ML-Agents timer problem (a tree that cannot be merged, ``timed`` on a non-callable); ignored.
TIMER_ERROR = "timer_error"
#: A torch profiler window skipped: another window is running.
TORCH_PROFILER_BUSY = "torch_profiler_busy"
#: The torch profiler failed to stop.
TORCH_PROFILER_ERROR = "torch_profiler_error"
#: A torch profiler window did not start: the profiler refused or failed to start.
TORCH_PROFILER_START_FAILED = "torch_profiler_start_failed"
#: A torch profiler window did not start: torch's profiler cannot be imported or created here.
TORCH_PROFILER_UNAVAILABLE = "torch_profiler_unavailable"
#: A torch profiler trace could not be written, or was still being written at shutdown.
TORCH_TRACE_WRITE_ERROR = "torch_trace_write_error"
#: The trace file could not be opened, encoded or written.
TRACE_FILE_ERROR = "trace_file_error"
#: Trace events that could not be written to the trace file.
TRACE_FILE_EVENTS_LOST = "trace_file_events_lost"
#: ``annotate`` named a session nothing here knows and gave no task id; ignored.
UNKNOWN_ANNOTATED_SESSION = "unknown_annotated_session"
#: ``consume`` named a session nothing here knows (an id not in this process's
#: registry, or an item without ``session_id``); ignored.
UNKNOWN_CONSUMED_SESSION = "unknown_consumed_session"
#: ``weight_sync`` got a role other than ``send`` or ``recv``; recorded as given.
UNKNOWN_WEIGHT_SYNC_ROLE = "unknown_weight_sync_role"
#: A session was consumed under a policy version or with versions that are not numbers
#: (opaque labels): recorded without a staleness.
VERSION_NOT_NUMERIC = "version_not_numeric"
#: A session event for a session id never registered; ignored.
UNKNOWN_SESSION = "unknown_session"
#: ``trace_session_event`` with a method otel_rl does not know; ignored.
UNKNOWN_SESSION_METHOD = "unknown_session_method"
#: A session finalized with a status otel_rl does not know; recorded as given.
UNKNOWN_STATUS = "unknown_status"
#: ``mark_finalized`` for a task id never registered; ignored.
UNKNOWN_TASK = "unknown_task"

#: Prefixes of kinds built at run time: ``<file kind>_lines_lost`` / ``<file kind>_write_error``
#: from an append-only file, ``otlp_<signal>_exporter_log`` from the SDK exporters' own logs.
DYNAMIC_SUFFIXES = ("_lines_lost", "_write_error")


# --- inference server timings (``record_server_timings``)
#: ``record_server_timings`` left out a timing or token field that is not a finite,
#: non-negative number (a string, a bool, NaN, a negative value, a stage ending before it starts).
SERVER_TIMINGS_BAD_VALUE = "server_timings_bad_value"
#: ``record_server_timings`` with no recording span current; nothing recorded.
SERVER_TIMINGS_NO_SPAN = "server_timings_no_span"
#: ``record_server_timings`` got timings of no engine it knows, or an ``engine`` other than
#: ``sglang`` / ``vllm``; nothing recorded.
SERVER_TIMINGS_UNRECOGNIZED = "server_timings_unrecognized"
