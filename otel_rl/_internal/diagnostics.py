"""Every diagnostic kind otel_rl counts, defined once.

A problem inside otel_rl is never raised into the training loop: it is counted
by kind (:func:`otel_rl.diagnostics`, the run summary) and logged the first time
it is seen (:mod:`otel_rl._internal.guard`). Kinds are part of the public output
(``diagnostics()`` keys, ``summary.json``), so their strings never change.
"""

from __future__ import annotations

#: category must be a Category or str, got …
BAD_CATEGORY_TYPE = "bad_category_type"
#: set_gauge(…): … is not a number; ignored
BAD_GAUGE_VALUE = "bad_gauge_value"
#: unusable session event …: …
BAD_SESSION_EVENT = "bad_session_event"
#: reset_active_stage(): not a token: …
BAD_STAGE_TOKEN = "bad_stage_token"
#: (counted without a message)
BAGGAGE_DROPPED = "baggage_dropped"
#: (counted without a message)
BAGGAGE_TRIMMED = "baggage_trimmed"
#: a span could not be encoded: …
CHROME_TRACE_ENCODE_ERROR = "chrome_trace_encode_error"
#: (counted without a message)
CHROME_TRACE_FLOWS_DROPPED = "chrome_trace_flows_dropped"
#: (counted without a message)
CHROME_TRACE_SESSIONS_RELEASED_EARLY = "chrome_trace_sessions_released_early"
#: (counted without a message)
CONTENT_REDACTED_UNREADABLE = "content_redacted_unreadable"
#: request events not started here: …
CONTROL_APPLY_ERROR = "control_apply_error"
#: (counted without a message)
CONTROL_CONNECTIONS_REFUSED = "control_connections_refused"
#: live profiling control not started: …
CONTROL_ERROR = "control_error"
#: (counted without a message)
CONTROL_PORT_UNAVAILABLE = "control_port_unavailable"
#: unreadable control state …: …
CONTROL_STATE_INVALID = "control_state_invalid"
#: control state not followed: …
CONTROL_STATE_REFUSED = "control_state_refused"
#: CUDA-synchronised timing failed: …
CUDA_SYNC_ERROR = "cuda_sync_error"
#: (counted without a message)
DELETED_FILE_LINES_LOST = "deleted_file_lines_lost"
#: session … finalized twice; the first status stands
DOUBLE_FINALIZE = "double_finalize"
#: … for finalized session …; ignored
EVENT_AFTER_FINALIZE = "event_after_finalize"
#: request event timestamp_ns … is not a number of 
EVENT_BAD_TIMESTAMP = "event_bad_timestamp"
#: request event without an event_name dropped 
EVENT_ERROR = "event_error"
#: cannot write request events to …: …
EVENT_WRITE_ERROR = "event_write_error"
#: (counted without a message)
EVENTS_LOST = "events_lost"
#: (counted without a message)
EVENTS_OTHER_RUN = "events_other_run"
#: an output failed to …: …
EXPORT_ERROR = "export_error"
#: the exporter process is behind by … spans and 
EXPORTER_BACKLOG = "exporter_backlog"
#: the exporter process made no progress for %.1fs 
EXPORTER_PROCESS_LOST = "exporter_process_lost"
#: the exporter process did not flush within %.1fs
FLUSH_TIMEOUT = "flush_timeout"
#: …(): keyword argument … is accepted and ignored
IGNORED_ARGUMENT = "ignored_argument"
#: internal error preparing a profiled scope: …
INTERNAL_ERROR = "internal_error"
#: metrics flush failed: …
METRICS_ERROR = "metrics_error"
#: (counted without a message)
METRICS_LINES_LOST = "metrics_lines_lost"
#: cannot write metrics to …: …
METRICS_WRITE_ERROR = "metrics_write_error"
#: … outside any session; ignored
NO_SESSION = "no_session"
#: (counted without a message)
OTLP_ENV_CORRECTED = "otlp_env_corrected"
#: OTLP export did not finish within %.1fs; 
OTLP_FLUSH_TIMEOUT = "otlp_flush_timeout"
#: phase … started while another instance is open (register_phase 
OVERLAPPING_PHASE = "overlapping_phase"
#: mark_…_end without a start; ignored
PHASE_END_WITHOUT_START = "phase_end_without_start"
#: span processor failed on start: …
PROCESSOR_ERROR = "processor_error"
#: stop for run_id … ignored: request events are recorded for run_id …
PROFILE_RUN_ID_MISMATCH = "profile_run_id_mismatch"
#: (counted without a message)
PROFILE_RUN_SWITCHED = "profile_run_switched"
#: inject failed: …
PROPAGATION_ERROR = "propagation_error"
#: the redactor raised … on … (the value is dropped)
REDACTOR_ERROR = "redactor_error"
#: … was deleted while otel_rl was writing it: the … lines 
RUN_FILE_DELETED = "run_file_deleted"
#: … was moved away (rotated?) while otel_rl was writing it: 
RUN_FILE_MOVED = "run_file_moved"
#: sampler raised; span kept
SAMPLER_ERROR = "sampler_error"
#: (counted without a message)
SESSION_PHASES_EVICTED = "session_phases_evicted"
#: (counted without a message)
SESSION_RECORDS_LINES_LOST = "session_records_lines_lost"
#: a session record could not be written: …
SESSION_RECORDS_WRITE_ERROR = "session_records_write_error"
#: session registered for unregistered task …; registering it
SESSION_WITHOUT_TASK = "session_without_task"
#: (counted without a message)
SESSIONS_EVICTED = "sessions_evicted"
#: an exporter did not shut down within %.1fs
SHUTDOWN_TIMEOUT = "shutdown_timeout"
#: a span ended after otel_rl was shut down; 
SPANS_AFTER_SHUTDOWN = "spans_after_shutdown"
#: (counted without a message)
SPANS_DROPPED_AFTER_END = "spans_dropped_after_end"
#: (counted without a message)
SPANS_DROPPED_EXPORTER_BACKLOG = "spans_dropped_exporter_backlog"
#: (counted without a message)
SPANS_DROPPED_FILE_BUFFER = "spans_dropped_file_buffer"
#: (counted without a message)
SPANS_DROPPED_QUEUE_FULL = "spans_dropped_queue_full"
#: (counted without a message)
SPANS_DROPPED_UNPROCESSED_AT_EXIT = "spans_dropped_unprocessed_at_exit"
#: stats backend … failed in …: …
STATS_BACKEND_ERROR = "stats_backend_error"
#: stats step … is not an integer; logged without a step
STATS_BAD_STEP = "stats_bad_step"
#: commit() got a value that is not a number: …
STATS_BAD_VALUE = "stats_bad_value"
#: stats keys exported by more than one tracker: …
STATS_DUPLICATE_KEY = "stats_duplicate_key"
#: stats key `…` could not be read at export (…); it is 
STATS_EXPORT_ERROR = "stats_export_error"
#: stats key `…` (tracker …) was recorded with different kinds, reduce types or 
STATS_INCONSISTENT_KEY = "stats_inconsistent_key"
#: stats key `…` (tracker …) has a per-key reduce_group on some ranks 
STATS_KEY_SYNC_GROUP_MISSING = "stats_key_sync_group_missing"
#: merge_worker_stats left out …: no `__count` to weight them by 
STATS_MERGE_UNWEIGHTED = "stats_merge_unweighted"
#: (counted without a message)
STATS_NONFINITE_VALUES = "stats_nonfinite_values"
#: stats: stat() of `…` was called more often than denominator `…` since the last 
STATS_UNPAIRED_VALUE = "stats_unpaired_value"
#: cannot write the run summary …: …
SUMMARY_WRITE_ERROR = "summary_write_error"
#: task … registered twice; the first is ended
TASK_REREGISTERED = "task_reregistered"
#: hierarchical_timer(…): …
TIMER_ERROR = "timer_error"
#: torch profiler window for step … skipped: 
TORCH_PROFILER_BUSY = "torch_profiler_busy"
#: torch profiler stop failed: …
TORCH_PROFILER_ERROR = "torch_profiler_error"
#: torch profiler trace not written: …
TORCH_TRACE_WRITE_ERROR = "torch_trace_write_error"
#: a trace event could not be written: …
TRACE_FILE_ERROR = "trace_file_error"
#: (counted without a message)
TRACE_FILE_EVENTS_LOST = "trace_file_events_lost"
#: … for unknown session …; ignored
UNKNOWN_SESSION = "unknown_session"
#: unknown trace_session_event method …; ignored
UNKNOWN_SESSION_METHOD = "unknown_session_method"
#: unknown session status …; recorded as given
UNKNOWN_STATUS = "unknown_status"
#: mark_finalized for unknown task …; ignored
UNKNOWN_TASK = "unknown_task"

#: Prefixes of kinds built at run time: ``<file kind>_lines_lost`` / ``<file kind>_write_error``
#: from an append-only file, ``otlp_<signal>_exporter_log`` from the SDK exporters' own logs.
DYNAMIC_SUFFIXES = ("_lines_lost", "_write_error")

