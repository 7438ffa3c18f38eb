"""One registry of otel_rl's configuration parameters.

Each :class:`Param` names its setting, environment variable, default, type, unit
and, where AReaL's ``PerfTracerConfig`` has the same setting, its path there.
Precedence, lowest first: default, environment, config object, keyword overrides.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from .. import environment_variables as ev
from . import keys


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the setting."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected one of {sorted(_TRUE | _FALSE - {''})}, got {text!r}")


def _non_negative_int(text: str) -> int:
    value = int(str(text).strip())
    if value < 0:
        raise ValueError(f"must be >= 0, got {value}")
    if value > sys.maxsize:
        raise ValueError(f"must be at most {sys.maxsize}, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value <= 0:
        raise ValueError(f"must be > 0, got {value}")
    return value


#: The longest timeout a ``*_MS`` setting may give (about 24.8 days): the largest
#: that every wait it reaches accepts (``poll`` takes a C ``int`` of milliseconds,
#: the exporter process's frames an unsigned 32-bit budget, ``threading`` waits at
#: most ``threading.TIMEOUT_MAX``). A longer one would be accepted here and then
#: fail inside ``save()`` and ``shutdown()``.
MAX_TIMEOUT_MS = min(2**31 - 1, int(threading.TIMEOUT_MAX * 1000))


def _timeout_ms(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_TIMEOUT_MS:
        raise ValueError(f"must be at most {MAX_TIMEOUT_MS} ms (about 24.8 days), got {value}")
    return value


def _wait_ms(text: str) -> int:
    value = _non_negative_int(text)
    if value > MAX_TIMEOUT_MS:
        raise ValueError(f"must be at most {MAX_TIMEOUT_MS} ms (about 24.8 days), got {value}")
    return value


def _steps(text: str) -> tuple[int, ...] | None:
    text = str(text).strip()
    if not text:
        return None
    return tuple(_non_negative_int(part) for part in text.split(",") if part.strip())


def _ranks(text: str) -> frozenset[int] | None:
    """``0,2-4`` -> {0, 2, 3, 4} (AReaL's ``AREAL_PERF_TRACER_RANKS`` form); empty = every rank."""
    text = str(text).strip()
    if not text:
        return None
    ranks: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, sep, high = part.partition("-")
        if sep:
            first, last = _non_negative_int(low), _non_negative_int(high)
            if last < first:
                raise ValueError(f"range {part!r} ends before it starts")
            if last - first > 1_000_000:
                raise ValueError(f"range {part!r} is too large")
            ranks.update(range(first, last + 1))
        else:
            ranks.add(_non_negative_int(part))
    return frozenset(ranks)


LAYOUTS = ("otel_rl", "areal")
#: Formats of the per-rank trace file.
FILE_FORMATS = ("jsonl", "perfetto")


def _file_format(text: str) -> str:
    value = str(text).strip().lower()
    if value not in FILE_FORMATS:
        raise ValueError(f"expected one of {list(FILE_FORMATS)}, got {text!r}")
    return value


def _layout(text: str) -> str:
    value = str(text).strip().lower()
    if value not in LAYOUTS:
        raise ValueError(f"expected one of {list(LAYOUTS)}, got {text!r}")
    return value


def _str(text: str) -> str:
    return str(text)


def _event_dirs(text: str) -> str:
    """``os.pathsep``-separated absolute directories, or ``*``; kept as given."""
    text = str(text).strip()
    if text == "*":
        return text
    for part in text.split(os.pathsep):
        part = part.strip()
        if part and not os.path.isabs(os.path.expanduser(part)):
            raise ValueError(f"expected absolute directories separated by {os.pathsep!r}, or *, "
                             f"got {part!r}")
    return text


def _file_mode(text: str) -> int:
    """Octal permission bits (``0600``, ``640``, ``0o640``); the owner must keep read and write."""
    text = str(text).strip().lower()
    value = int(text[2:] if text.startswith("0o") else text, 8)
    if not 0 <= value <= 0o777:
        raise ValueError(f"must be octal permission bits from 0600 to 0777, got {text!r}")
    if value & 0o600 != 0o600:
        raise ValueError(f"the owner needs read and write permission (0600), got {text!r}")
    return value


#: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` values that turn capture on
#: (the GenAI instrumentations' modes, and the older boolean form).
_GENAI_CAPTURE_ON = {"span_only", "event_only", "span_and_event", "true", "1", "yes", "on"}
_GENAI_CAPTURE_OFF = {"no_content", "false", "0", "no", "off", ""}


def _genai_capture(text: str) -> bool:
    value = str(text).strip().lower()
    if value in _GENAI_CAPTURE_ON:
        return True
    if value in _GENAI_CAPTURE_OFF:
        return False
    raise ValueError("expected NO_CONTENT, SPAN_ONLY, EVENT_ONLY, SPAN_AND_EVENT, true or false, "
                     f"got {text!r}")


def _port(text: str) -> int | None:
    text = str(text).strip()
    if not text:
        return None
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(f"must be a TCP port from 0 to 65535, got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class Param:
    """One configuration parameter."""

    name: str
    env: str
    default: Any
    parse: Callable[[str], Any]
    unit: str
    doc: str
    areal: str | None = None


PARAMS: tuple[Param, ...] = (
    Param("enabled", ev.OTEL_RL_ENABLED, True, parse_bool, "bool",
          "tracing on when configure() runs; the env var also configures on import", "enabled"),
    Param("fileroot", ev.OTEL_RL_DIR, "otel_rl_runs", _str, "path",
          "root directory for run files", "fileroot"),
    Param("experiment_name", ev.OTEL_RL_EXPERIMENT, "default", _str, "name",
          "experiment name", "experiment_name"),
    Param("trial_name", ev.OTEL_RL_TRIAL, "trial0", _str, "name",
          "trial name", "trial_name"),
    Param("rank", ev.OTEL_RL_RANK, None, _non_negative_int, "int",
          "process rank (falls back to RANK, torch.distributed, LOCAL_RANK, then 0)"),
    Param("role", ev.OTEL_RL_ROLE, "", _str, "name",
          "process role, part of file names when set"),
    Param("session_tracer", ev.OTEL_RL_SESSION_TRACER, True, parse_bool, "bool",
          "session lifecycle tracking", "session_tracer.enabled"),
    Param("flush_threshold", ev.OTEL_RL_FLUSH_THRESHOLD, 100, _positive_int, "sessions",
          "session records buffered before writing", "session_tracer.flush_threshold"),
    Param("save_interval", ev.OTEL_RL_SAVE_INTERVAL, 1, _positive_int, "steps",
          "save(step) writes at steps where (step + 1) % save_interval == 0; above 1 the "
          "trace file waits for those saves", "save_interval"),
    Param("profile_steps", ev.OTEL_RL_PROFILE_STEPS, None, _steps, "steps",
          "steps whose enable_profiler scopes run under the torch profiler", "profile_steps"),
    Param("ranks", ev.OTEL_RL_RANKS, None, _ranks, "ranks",
          "ranks that record, e.g. 0,2-4 (unset: every rank; AREAL_PERF_TRACER_RANKS as fallback)"),
    Param("layout", ev.OTEL_RL_LAYOUT, "otel_rl", _layout, "name",
          "file layout: otel_rl (<root>/<experiment>/<trial>) or areal (AReaL's "
          "<root>/logs/<user>/... paths; the default for an AReaL config object)"),
    Param("file_export", ev.OTEL_RL_FILE_EXPORT, True, parse_bool, "bool",
          "write traces-r{rank}.jsonl for Perfetto"),
    Param("file_format", ev.OTEL_RL_FILE_FORMAT, "jsonl", _file_format, "name",
          "format of the per-rank trace file: jsonl (Chrome JSON lines, crash-safe, what "
          "otel-rl convert merges) or perfetto (traces-r{rank}.pftrace, Perfetto's native format; "
          "the files of all ranks concatenate into one trace)"),
    Param("export_process", ev.OTEL_RL_EXPORT_PROCESS, True, parse_bool, "bool",
          "encode and export in a child process (when otel_rl owns the tracer provider)"),
    Param("max_queue_size", ev.OTEL_RL_MAX_QUEUE_SIZE, 262_144, _positive_int, "spans",
          "finished spans buffered before drops (counted)"),
    Param("export_interval_ms", ev.OTEL_RL_EXPORT_INTERVAL_MS, 200, _timeout_ms, "ms",
          "background drain interval"),
    Param("shutdown_timeout_ms", ev.OTEL_RL_SHUTDOWN_TIMEOUT_MS, 5_000, _timeout_ms, "ms",
          "upper bound on shutdown and exit"),
    Param("handle_sigterm", ev.OTEL_RL_HANDLE_SIGTERM, True, parse_bool, "bool",
          "on SIGTERM (when nothing else handles it) flush and close, bounded, then exit as killed"),
    Param("max_pending_sessions", ev.OTEL_RL_MAX_PENDING_SESSIONS, 100_000, _positive_int,
          "sessions", "open sessions kept before the oldest is dropped (counted)"),
    # --- live profiling control, torch profiler windows, CUDA-synchronised timing
    Param("control", ev.OTEL_RL_CONTROL, True, parse_bool, "bool",
          "follow live profiling commands broadcast through <run_dir>/control/state.json"),
    Param("control_port", ev.OTEL_RL_CONTROL_PORT, None, _port, "port",
          "serve the HTTP control surface from configure() on this port (0 = any free port)"),
    Param("control_host", ev.OTEL_RL_CONTROL_HOST, "127.0.0.1", _str, "host",
          "interface the HTTP control surface binds to"),
    Param("control_token", ev.OTEL_RL_CONTROL_TOKEN, "", _str, "secret",
          "bearer token the HTTP control surface requires when set"),
    Param("control_poll_ms", ev.OTEL_RL_CONTROL_POLL_MS, 200, _timeout_ms, "ms",
          "how often each process checks the control file"),
    Param("control_ack_wait_ms", ev.OTEL_RL_CONTROL_ACK_WAIT_MS, 2_000, _wait_ms, "ms",
          "how long a control request waits for registered processes to acknowledge"),
    Param("control_event_dirs", ev.OTEL_RL_CONTROL_EVENT_DIRS, "", _event_dirs, "paths",
          "directories (os.pathsep list) a control request's event_dir may name besides the run "
          "directory; * allows any"),
    Param("torch_profile_steps", ev.OTEL_RL_TORCH_PROFILE_STEPS, None, _steps, "steps",
          "steps whose step_scope runs under the torch profiler"),
    Param("torch_record_shapes", ev.OTEL_RL_TORCH_RECORD_SHAPES, False, parse_bool, "bool",
          "torch profiler: record input shapes per op"),
    Param("torch_profile_memory", ev.OTEL_RL_TORCH_PROFILE_MEMORY, False, parse_bool, "bool",
          "torch profiler: track every allocation and free"),
    Param("torch_with_stack", ev.OTEL_RL_TORCH_WITH_STACK, False, parse_bool, "bool",
          "torch profiler: record the call stack per op"),
    Param("torch_with_flops", ev.OTEL_RL_TORCH_WITH_FLOPS, False, parse_bool, "bool",
          "torch profiler: estimate FLOPs per op"),
    Param("cuda_sync", ev.OTEL_RL_CUDA_SYNC, False, parse_bool, "bool",
          "wait for the GPU (CUDA events) at the start and end of scopes and steps"),
    Param("stats_step_attribute", ev.OTEL_RL_STATS_STEP_ATTRIBUTE, True, parse_bool, "bool",
          "rl.step on every otel_rl.stats data point"),
    Param("stats_tensorboard", ev.OTEL_RL_STATS_TENSORBOARD, True, parse_bool, "bool",
          "otel_rl.stats exports as TensorBoard event files when tensorboard is installed"),
    # --- security and privacy
    Param("capture_content", ev.OTEL_RL_CAPTURE_CONTENT, False, parse_bool, "bool",
          "record prompt / completion text and token ids in user payloads (unset: "
          "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT decides)"),
    Param("attribute_value_length_limit", ev.OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT, 4096,
          _non_negative_int, "chars",
          "longest string attribute value on otel_rl's spans (unset: OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT)"),
    Param("file_mode", ev.OTEL_RL_FILE_MODE, 0o600, _file_mode, "octal",
          "permission bits of files otel_rl creates; directories get the matching x bits"),
    Param("baggage_allow", ev.OTEL_RL_BAGGAGE_ALLOW, "", _str, "keys",
          "incoming baggage keys kept besides otel_rl's own (comma list, * for all)"),
)

#: Standard variables a setting falls back to when its own variable is unset.
_FALLBACK_ENV: dict[str, tuple[str, Callable[[str], Any]]] = {
    "capture_content": (ev.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, _genai_capture),
    "attribute_value_length_limit": (ev.OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, _non_negative_int),
    "ranks": (ev.AREAL_PERF_TRACER_RANKS, _ranks),
}

PARAMS_BY_NAME = {p.name: p for p in PARAMS}


@dataclasses.dataclass(frozen=True)
class Settings:
    """Resolved configuration of one process."""

    enabled: bool
    fileroot: str
    experiment_name: str
    trial_name: str
    rank: int
    role: str
    session_tracer: bool
    flush_threshold: int
    save_interval: int
    profile_steps: tuple[int, ...] | None
    ranks: frozenset[int] | None
    layout: str
    file_export: bool
    file_format: str
    export_process: bool
    max_queue_size: int
    export_interval_ms: int
    shutdown_timeout_ms: int
    handle_sigterm: bool
    max_pending_sessions: int
    control: bool
    control_port: int | None
    control_host: str
    control_token: str = dataclasses.field(repr=False)
    control_poll_ms: int
    control_ack_wait_ms: int
    control_event_dirs: str
    torch_profile_steps: tuple[int, ...] | None
    torch_record_shapes: bool
    torch_profile_memory: bool
    torch_with_stack: bool
    torch_with_flops: bool
    cuda_sync: bool
    stats_step_attribute: bool
    stats_tensorboard: bool
    capture_content: bool
    attribute_value_length_limit: int
    file_mode: int
    baggage_allow: str

    @property
    def run_dir(self) -> str:
        if self.layout == "areal":
            return os.path.join(os.path.expanduser(os.path.expandvars(self.fileroot)), "logs",
                                _user(), self.experiment_name, self.trial_name)
        return os.path.join(self.fileroot, self.experiment_name, self.trial_name)

    def file_path(self, template: str) -> str:
        """Path of a per-rank file; the role, when set, prefixes the rank.

        In the ``areal`` layout the trace and session files are where AReaL's
        tools look: ``perf_tracer/[<role>/]traces-r{rank}.jsonl`` and
        ``session_tracer/[<role>/]sessions-r{rank}.jsonl`` under the run directory.
        """
        subdir = _AREAL_SUBDIRS.get(template) if self.layout == "areal" else None
        if subdir is not None:
            parts = [self.run_dir, subdir] + ([self.role] if self.role else [])
            return os.path.join(*parts, template.replace("{rank}", str(self.rank)))
        rank = f"{self.role}-r{self.rank}" if self.role else f"r{self.rank}"
        return os.path.join(self.run_dir, template.replace("r{rank}", rank))


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container without a passwd entry)
        return str(os.getuid()) if hasattr(os, "getuid") else "user"


#: Files AReaL's layout puts in a subdirectory of the run directory (AReaL's names).
_AREAL_SUBDIRS = {keys.TRACES_FILE: "perf_tracer", keys.PERFETTO_TRACES_FILE: "perf_tracer",
                  keys.SESSIONS_FILE: "session_tracer"}


def _lookup(config: Any, path: str) -> Any:
    """Reads ``a.b`` from an attribute object or a mapping; ``_MISSING`` if absent."""
    node = config
    for part in path.split("."):
        if node is None:
            return _MISSING
        if isinstance(node, Mapping):
            if part not in node:
                return _MISSING
            node = node[part]
        else:
            node = getattr(node, part, _MISSING)
            if node is _MISSING:
                return _MISSING
    return node


_MISSING = object()


def _coerce(param: Param, value: Any, source: str) -> Any:
    if value is None and param.default is None:
        return None
    try:
        if param.parse is parse_bool and isinstance(value, bool):
            return value
        if param.parse is _steps and isinstance(value, (list, tuple)):
            return tuple(_non_negative_int(v) for v in value) or None
        if param.parse is _event_dirs and isinstance(value, (list, tuple)):
            value = os.pathsep.join(os.fspath(v) for v in value)
        if param.parse is _file_mode and type(value) is int:
            # An int (``file_mode=0o640``) already holds the bits.
            return _file_mode(oct(value))
        if param.parse in (_positive_int, _non_negative_int, _timeout_ms, _wait_ms) \
                and isinstance(value, bool):
            raise ValueError("expected an integer, got a bool")
        return param.parse(value if isinstance(value, str) else str(value)) \
            if param.parse is not _str else str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value for {source}: {exc}") from None


def resolve(
    config: Any = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Builds :class:`Settings` from defaults, the environment, a config object and overrides.

    Raises:
        ConfigError: a value is invalid or an override names no setting; the
            message names the setting and where it came from.
    """
    environ = os.environ if environ is None else environ
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(PARAMS_BY_NAME))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {unknown}; known: {sorted(PARAMS_BY_NAME)}"
        )
    values: dict[str, Any] = {}
    for param in PARAMS:
        value = param.default
        if param.env in environ:
            value = _coerce(param, environ[param.env], f"environment variable {param.env}")
        elif param.name == "rank":
            value = _launcher_rank(param, environ)
        elif param.name in _FALLBACK_ENV and _FALLBACK_ENV[param.name][0] in environ:
            name, parse = _FALLBACK_ENV[param.name]
            try:
                value = parse(environ[name])
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"invalid value for environment variable {name}: {exc}") from None
        if config is not None:
            found = _lookup(config, param.areal or param.name)
            if found is not _MISSING and found is not None:
                value = _coerce(param, found, f"config setting {param.areal or param.name!r}")
            elif param.name == "session_tracer" and _lookup(config, "session_tracer") is None:
                value = False  # AReaL's default session_tracer=None: no session tracing
            elif (param.name == "layout" and param.env not in environ
                  and not isinstance(config, Mapping)):
                value = "areal"  # an AReaL PerfTracerConfig writes where AReaL's tools look
        if param.name in overrides and overrides[param.name] is not None:
            value = _coerce(param, overrides[param.name], f"argument {param.name}=")
        values[param.name] = value
    if values["rank"] is None:
        values["rank"] = 0
    if values["ranks"] is not None and values["rank"] not in values["ranks"]:
        values["enabled"] = False  # AREAL_PERF_TRACER_RANKS: this rank does not record
    settings = Settings(**values)
    if settings.enabled:
        # Read by the exporters only once spans flow; checked here so that a typo
        # fails configure() naming its variable, not an export deep in the run.
        _check_otlp_endpoints(environ)
        _check_run_dir(settings)
    return settings


def _check_run_dir(settings: Settings) -> None:
    """Refuses a run directory that already exists and belongs to someone else.

    On a shared file root another user could have made it (or a symbolic link
    in its place) to receive this job's files or plant links in it; the files
    themselves are opened safely, but nothing would reach them.
    """
    from . import files

    problem = files.dir_problem(settings.run_dir, settings.file_mode)
    if problem is not None:
        raise ConfigError(
            f"refusing the run directory: {problem}; run files are only written in a directory of "
            f"your own: choose another {ev.OTEL_RL_DIR} (fileroot), {ev.OTEL_RL_EXPERIMENT} "
            f"(experiment_name) or {ev.OTEL_RL_TRIAL} (trial_name)")


#: Standard endpoint variables otel_rl's exporters read (the specific one first).
OTLP_ENDPOINT_VARIABLES = (ev.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, ev.OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
                           ev.OTEL_EXPORTER_OTLP_ENDPOINT)


def check_otlp_endpoint(value: str) -> None:
    """Raises ``ValueError`` when ``value`` is no endpoint an OTLP exporter can use.

    Catches what would otherwise fail far from the variable: a port outside
    0-65535 or not a number, an unclosed IPv6 bracket (``urllib`` raises a bare
    ``ValueError`` on these when the exporter starts), and an ``http(s)://`` URL
    without a host. gRPC's forms without a scheme (``host:port``,
    ``unix:///path``) are accepted.
    """
    text = value.strip()
    try:
        if "://" in text:
            parts = urlsplit(text)
            if parts.scheme.lower() in ("http", "https") and not parts.hostname:
                raise ValueError("the URL has no host")
        else:
            # gRPC's ``host:port``: read as the network location of a URL.
            parts = urlsplit("//" + text)
        parts.port  # noqa: B018 - raises on a port out of range or not a number
    except ValueError as exc:
        # Credentials in the URL (user:password@) stay out of the message.
        shown = re.sub(r"^(\w[\w+.-]*://)?[^/@]*@", lambda m: (m.group(1) or "") + "***@", text)
        raise ValueError(f"{shown!r} is not a usable OTLP endpoint ({exc}); expected a URL such as "
                         "http://collector:4318 or, for gRPC, host:4317") from None


def _check_otlp_endpoints(environ: Mapping[str, str]) -> None:
    for name in OTLP_ENDPOINT_VARIABLES:
        value = environ.get(name)
        if value:
            try:
                check_otlp_endpoint(value)
            except ValueError as exc:
                raise ConfigError(f"invalid value for environment variable {name}: {exc}") from None


def _launcher_rank(param: Param, environ: Mapping[str, str]) -> int | None:
    """The rank a launcher gave this process: ``RANK`` (torchrun, Slurm
    wrappers), then torch.distributed when it is already initialised (never
    imported here), then ``LOCAL_RANK``."""
    if "RANK" in environ:
        return _coerce(param, environ["RANK"], "environment variable RANK")
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001 - a half-initialised backend: fall through
        pass
    if "LOCAL_RANK" in environ:
        return _coerce(param, environ["LOCAL_RANK"], "environment variable LOCAL_RANK")
    return None
