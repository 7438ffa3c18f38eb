"""Torch profiler windows and CUDA-synchronised scope timing.

A window runs ``torch.profiler.profile`` continuously between its start and its
stop (no ``schedule``, no ``step()`` calls), with CPU activity, plus CUDA when
``torch.cuda.is_available()``. The expensive options (shapes, memory, stacks,
FLOPs) are off unless ``OTEL_RL_TORCH_*`` turns them on, as in sglang-omni.

Two kinds of window:

* **live** (``/start_profile`` with ``enable_torch``): started and stopped on one
  dedicated thread, because Kineto must be stopped on the thread that started
  it, and with ``profile_all_threads`` so the training and serving threads are
  recorded;
* **step** (``torch_profile_steps``): started at the beginning of ``step_scope``
  and stopped at its end, on the training thread.

At its stop the window's Chrome trace is exported to
``<run_dir>/torch-r{rank}-{run_id}.trace.json.gz`` on the dedicated thread, and
rewritten so that ``otel-rl convert`` puts it on otel_rl's timeline: timestamps
become Unix-epoch microseconds (Kineto writes them relative to
``baseTimeNanoseconds``), host events keep the process's pid (the rank's spans
use it too) on thread ids moved out of the range otel_rl's tracks use, device
processes are named after the rank, and a top-level ``otel_rl`` object names the
rank's trace file so the converter gives both one process. torch is imported
only when a window starts; a profiler that cannot start is logged once and
everything else goes on.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import os
import queue
import re
import sys
import threading
from typing import Any, Callable

import orjson

from .. import diagnostics, files, guard, keys
from ..encode.kineto_clock import kineto_shift_us
from ..state import STATE

#: Options a ``config`` object of ``/start_profile`` may set, with their settings.
OPTIONS = {
    "record_shapes": "torch_record_shapes",
    "profile_memory": "torch_profile_memory",
    "with_stack": "torch_with_stack",
    "with_flops": "torch_with_flops",
}
# Host threads of the torch trace move to ``_TID_BASE + tid``: above every track id
# otel_rl's encoder uses (< 2**31), below Perfetto's limit (2**32).
_TID_BASE = 1 << 31
# The track showing the profiling window itself (Kineto's "PyTorch Profiler" span).
_WINDOW_TID = _TID_BASE - 1
_KINETO_PROCESS_META = ("process_name", "process_labels", "process_sort_index")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _file_part(text: str) -> str:
    return _SAFE_NAME.sub("_", str(text)).strip("._") or "_"


class _Owner:
    """One daemon thread that runs every live start and stop and every export.

    Not a ThreadPoolExecutor: those refuse work once the interpreter starts
    exiting, and the profiler is stopped and exported at exit.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="otel_rl-torch-profiler",
                                                daemon=True)
                self._thread.start()
        self._queue.put((future, fn, args))
        return future

    def _run(self) -> None:
        while True:
            future, fn, args = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)

    def after_fork(self) -> None:
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._lock = threading.Lock()


class _Window:
    __slots__ = ("run_id", "live", "prof", "thread", "path", "meta")

    def __init__(self, run_id: str, live: bool, prof: Any, path: str, meta: dict[str, Any]) -> None:
        self.run_id = run_id
        self.live = live
        self.prof = prof
        self.thread = threading.get_ident()
        self.path = path
        self.meta = meta


class TorchProfiler:
    """The process's torch profiler: at most one window at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window: _Window | None = None
        self._owner = _Owner()
        self._exports: list[concurrent.futures.Future] = []
        #: Traces written, in order (final paths).
        self.written: list[str] = []
        self.last_error: str | None = None

    # --- state ---------------------------------------------------------------------------
    def is_active(self) -> bool:
        return self._window is not None

    def active_run_id(self) -> str | None:
        window = self._window
        return window.run_id if window is not None else None

    def status(self) -> dict[str, Any]:
        window = self._window
        return {"active": window is not None, "run_id": window.run_id if window else None,
                "kind": ("live" if window.live else "step") if window else None,
                "trace": window.path if window else None, "written": list(self.written),
                "error": self.last_error}

    # --- live windows (control surface) -----------------------------------------------------
    def start_live(self, run_id: str, trace_dir: str | None = None,
                   options: dict[str, bool] | None = None, timeout_s: float = 60.0) -> bool:
        """Starts a live window on the profiler thread; ``False`` (logged once,
        reason in ``last_error``) when it cannot start."""
        window = self._window
        if window is not None:
            if window.run_id == run_id and window.live:
                return True
            return self._refuse(f"a torch profiler window (run_id {window.run_id!r}) is already running")
        try:
            return self._owner.submit(self._start_here, run_id, True, trace_dir, options).result(timeout_s)
        except Exception as exc:  # noqa: BLE001 - a timeout or a bug: serving goes on
            return self._refuse(f"torch profiler did not start: {exc!r}")

    def stop_live(self, run_id: str | None = None, timeout_s: float = 60.0) -> str | None:
        """Stops the live window (``run_id`` ``None`` = whichever runs); returns the
        trace path it will be exported to, or ``None`` when nothing was stopped.
        The export continues on the profiler thread (see :meth:`wait_exports`)."""
        window = self._window
        if window is None or not window.live:
            return None
        if run_id is not None and run_id != window.run_id:
            guard.report(diagnostics.PROFILE_RUN_ID_MISMATCH,
                         "torch profiler stop for run_id %r ignored: the window is run_id %r",
                         run_id, window.run_id)
            return None
        try:
            return self._owner.submit(self._stop_here, window).result(timeout_s)
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.TORCH_PROFILER_ERROR, "torch profiler stop failed: %r", exc)
            return None

    # --- step windows (step_scope) ------------------------------------------------------------
    def start_step(self, step: int) -> bool:
        if self._window is not None:
            guard.report(diagnostics.TORCH_PROFILER_BUSY, "torch profiler window for step %s skipped: "
                         "window %r is running", step, self._window.run_id)
            return False
        return self._start_here(f"step{step}", False, None, None)

    def start_scope(self, run_id: str, options: dict[str, bool] | None = None) -> bool:
        """A window around one scope (AReaL's ``enable_profiler``), stopped with
        :meth:`stop_step` on the same thread. Skipped without a report while another
        window runs: nested profiled scopes are normal, as in AReaL."""
        if self._window is not None:
            return False
        return self._start_here(run_id, False, None, options)

    def stop_step(self) -> str | None:
        window = self._window
        if window is None or window.live or window.thread != threading.get_ident():
            return None
        return self._stop_here(window)

    # --- on the thread that owns the window ------------------------------------------------------
    def _start_here(self, run_id: str, live: bool, trace_dir: str | None,
                    options: dict[str, bool] | None) -> bool:
        with self._lock:
            if self._window is not None:
                return self._refuse(f"a torch profiler window (run_id {self._window.run_id!r}) "
                                    "is already running")
            try:
                import torch
                from torch.profiler import ProfilerActivity, profile
            except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install
                return self._refuse(f"torch profiler unavailable: {exc!r}", diagnostics.TORCH_PROFILER_UNAVAILABLE)
            try:
                path, meta = _trace_path(run_id, trace_dir)
                activities = [ProfilerActivity.CPU]
                if torch.cuda.is_available():
                    activities.append(ProfilerActivity.CUDA)
                kwargs: dict[str, Any] = dict(activities=activities, **_options(options))
                experimental = _all_threads_config()
                if experimental is not None:
                    kwargs["experimental_config"] = experimental
                prof = profile(**kwargs)
                prof.start()
            except Exception as exc:  # noqa: BLE001 - another profiler running, CUPTI, ...
                return self._refuse(f"torch profiler failed to start: {exc!r}")
            meta["activities"] = [str(a).rsplit(".", 1)[-1] for a in activities]
            self._window = _Window(run_id, live, prof, path, meta)
            self.last_error = None
            return True

    def _stop_here(self, window: _Window) -> str | None:
        with self._lock:
            if self._window is not window:
                return None
            self._window = None
            try:
                window.prof.stop()
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.TORCH_PROFILER_ERROR, "torch profiler stop failed: %r", exc)
                return None
        future = self._owner.submit(_export, window.prof, window.path, window.meta)
        future.add_done_callback(self._exported)
        with self._lock:
            self._exports = [f for f in self._exports if not f.done()] + [future]
        return window.path

    def _exported(self, future: concurrent.futures.Future) -> None:
        exc = future.exception()
        if exc is not None:
            guard.report(diagnostics.TORCH_TRACE_WRITE_ERROR, "torch profiler trace not written: %r", exc)
        else:
            self.written.append(future.result())

    def _refuse(self, message: str, kind: str = diagnostics.TORCH_PROFILER_START_FAILED) -> bool:
        self.last_error = message
        guard.report(kind, "%s", message)
        return False

    def wait_exports(self, timeout_s: float | None = None) -> bool:
        """Waits for the traces of stopped windows to be written; ``False`` on timeout."""
        with self._lock:
            pending = list(self._exports)
        done, not_done = concurrent.futures.wait(pending, timeout=timeout_s)
        return not not_done

    def shutdown(self, timeout_s: float) -> None:
        """Stops a running window (a step window only from its own thread) and
        waits, up to ``timeout_s``, for every trace to be written."""
        window = self._window
        if window is not None:
            if window.live:
                self.stop_live(None, timeout_s)
            elif window.thread == threading.get_ident():
                self.stop_step()
        if not self.wait_exports(timeout_s):
            guard.report(diagnostics.TORCH_TRACE_WRITE_ERROR, "torch profiler traces still being written "
                         "after %.1f s at shutdown", timeout_s)

    def after_fork(self) -> None:
        # The child has no profiler session: it cannot stop the parent's.
        self._lock = threading.Lock()
        self._window = None
        self._exports = []
        self._owner.after_fork()


def _options(overrides: dict[str, bool] | None) -> dict[str, bool]:
    settings = STATE.settings
    out = {}
    for option, setting in OPTIONS.items():
        value = bool(getattr(settings, setting, False)) if settings is not None else _env_flag(setting)
        if overrides and option in overrides:
            value = bool(overrides[option])
        out[option] = value
    return out


def _env_flag(setting: str) -> bool:
    from ..config import PARAMS_BY_NAME, parse_bool

    value = os.environ.get(PARAMS_BY_NAME[setting].env)
    try:
        return parse_bool(value) if value is not None else False
    except ValueError:
        return False


def _all_threads_config() -> Any:
    """Kineto's ``profile_all_threads`` (recent torch): a window opened on the
    profiler thread records the ops of every thread. ``None`` where unsupported."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True)
    except Exception:  # noqa: BLE001 - older torch: the starting thread only
        return None


def _trace_path(run_id: str, trace_dir: str | None) -> tuple[str, dict[str, Any]]:
    """Where a window's trace goes, and what the converter needs to place it."""
    settings = STATE.settings
    pid = os.getpid()
    meta: dict[str, Any] = {"pid": pid, "run_id": run_id}
    name = keys.TORCH_TRACE_FILE.replace("{run_id}", _file_part(run_id))
    if settings is not None and trace_dir is None:
        path = settings.file_path(name)
        meta["traces_file"] = os.path.basename(settings.file_path(keys.TRACES_FILE))
        meta["rank"] = settings.rank
        meta["role"] = settings.role
    else:
        if trace_dir is None:
            raise ValueError("no trace directory: otel_rl is not configured")
        rank = settings.rank if settings is not None else int(os.environ.get("RANK", "0") or 0)
        meta["rank"] = rank
        meta["role"] = settings.role if settings is not None else ""
        path = os.path.join(trace_dir, name.replace("r{rank}", f"r{rank}"))
    path = os.path.abspath(path)
    files.makedirs(os.path.dirname(path))
    stem = path[: -len(".trace.json.gz")]
    n = 2
    while os.path.exists(path):
        path = f"{stem}-{n}.trace.json.gz"
        n += 1
    return path, meta


def _export(prof: Any, path: str, meta: dict[str, Any]) -> str:
    """Exports the window's trace and rewrites it onto otel_rl's timeline (see the module doc)."""
    raw = f"{path}.tmp-{os.getpid()}.json"
    try:
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as f:
            doc = orjson.loads(f.read())
    finally:
        try:
            os.unlink(raw)
        except OSError:
            pass
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    doc["traceEvents"] = align_events(doc.get("traceEvents") or [], doc.pop("baseTimeNanoseconds", None),
                                      meta)
    doc[keys.TRACE_JOIN_KEY] = dict(meta, clock="unix_epoch_us")
    doc["traceName"] = os.path.basename(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with files.open_private(tmp, "wb") as raw_file:
        with gzip.GzipFile(filename=os.path.basename(path)[:-3], mode="wb", fileobj=raw_file,
                           compresslevel=3) as f:
            f.write(orjson.dumps(doc))
    os.replace(tmp, path)
    return path


def align_events(events: list[Any], base_ns: Any, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Kineto events moved onto otel_rl's clock and into the rank's process.

    Args:
        events: The document's ``traceEvents``.
        base_ns: Its ``baseTimeNanoseconds``: timestamps far below it are relative to it.
        meta: ``pid``, ``rank``, ``role`` and ``run_id`` of the window.
    """
    pid = meta["pid"]
    label = f"rank {meta.get('rank', 0)}" + (f" · {meta['role']}" if meta.get("role") else "")
    shift = kineto_shift_us(events, base_ns)
    out: list[dict[str, Any]] = []
    for event in events:
        if not isinstance(event, dict):
            continue
        ts = event.get("ts")
        if shift and isinstance(ts, (int, float)):
            event["ts"] = ts + shift
        event_pid = event.get("pid")
        meta_name = event.get("name") if event.get("ph") == "M" else None
        if event_pid == pid:
            if meta_name in _KINETO_PROCESS_META:
                continue  # the rank's own trace file names this process
            tid = event.get("tid")
            if type(tid) is int and 0 < tid < _TID_BASE:
                event["tid"] = _TID_BASE + tid
            if meta_name == "thread_name":
                args = event.get("args") or {}
                event["args"] = {**args, "name": f"torch · {args.get('name', event.get('tid'))}"}
        elif type(event_pid) is not int:
            # Kineto's pseudo-processes ("Spans", "Traces"): the window itself, shown
            # on a track of the rank's process.
            if meta_name is not None:
                continue
            event["pid"] = pid
            event["tid"] = _WINDOW_TID
        elif meta_name == "process_name":
            # A device (GPU) process: grouped with its rank by name.
            args = event.get("args") or {}
            event["args"] = {**args, "name": f"{label} · {args.get('name', event_pid)}"}
        out.append(event)
    out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": _WINDOW_TID,
                "args": {"name": f"torch.profiler · {meta.get('run_id')}"}})
    return out


PROFILER = TorchProfiler()


def after_fork_in_child() -> None:
    """A forked child has no profiler window: it cannot stop the parent's."""
    PROFILER.after_fork()


# --- CUDA-synchronised timing ---------------------------------------------------------------------
def cuda_available() -> bool:
    """Whether CUDA can be used (imports torch; call at configuration time only)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, or a broken driver
        return False


def cuda_mark() -> Any:
    """Records a timing event on the current CUDA stream and waits until the GPU
    reaches it: the stream's queued work is done when this returns. A stream
    wait (``Event.synchronize``), not a device-wide ``torch.cuda.synchronize()``."""
    event = sys.modules["torch"].cuda.Event(enable_timing=True)
    event.record()
    event.synchronize()
    return event


def cuda_elapsed_ms(start: Any) -> float:
    """Marks the end (waiting as :func:`cuda_mark`) and returns the GPU time since ``start``."""
    return float(start.elapsed_time(cuda_mark()))


class CudaSyncedScope:
    """A scope whose timestamps are taken after the GPU caught up (``OTEL_RL_CUDA_SYNC``).

    The span starts after the current stream has drained, and ends after the
    work queued inside the scope has finished; ``rl.cuda.elapsed_ms`` is the GPU
    time between the two CUDA events.
    """

    __slots__ = ("_make", "_span", "_start")

    def __init__(self, make_span: Callable[[], Any]) -> None:
        self._make = make_span
        self._span: Any = None
        self._start: Any = None

    def __enter__(self) -> Any:
        try:
            self._start = cuda_mark()
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.CUDA_SYNC_ERROR, "CUDA-synchronised timing failed: %r", exc)
        self._span = self._make()
        return self._span.__enter__()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        span = self._span
        if self._start is not None:
            try:
                span.set_attribute(keys.CUDA_ELAPSED_MS, cuda_elapsed_ms(self._start))
            except Exception as err:  # noqa: BLE001
                guard.report(diagnostics.CUDA_SYNC_ERROR, "CUDA-synchronised timing failed: %r", err)
        return span.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        return self.__exit__(exc_type, exc, tb)
