"""Building and tearing down one process's tracing: providers, processors, exporters."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
import time
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.environment_variables import (
    OTEL_RESOURCE_ATTRIBUTES,
    OTEL_SDK_DISABLED,
    OTEL_SERVICE_NAME,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from . import files, guard, keys
from .recording import privacy
from .export import summary
from .config import Settings, resolve
from .export.chain import ExportChain, otlp_protocol, traces_endpoint
from .export.process import ExporterProcess
from .export.pipeline import Pipeline
from .recording.record import id_value
from .recording.spans import LeanTracer
from .state import STATE
from .recording.tracking import Registry
from . import diagnostics

logger = logging.getLogger("otel_rl")

DEFAULT_SERVICE_NAME = "otel-rl"
_lock = threading.RLock()


class BaggageSpanProcessor(SpanProcessor):
    """Copies otel_rl's baggage ids onto spans other instrumentation starts
    (an HTTP client span made inside a session carries the session id)."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        from opentelemetry.baggage import get_all

        bag = get_all(parent_context)
        if not bag:
            return
        for key in keys.BAGGAGE_KEYS:
            value = bag.get(key)
            if value is not None:
                span.set_attribute(key, id_value(value))


class ProviderHook(SpanProcessor):
    """The one processor otel_rl adds to a TracerProvider. Its delegates are
    swapped on configure/reset because the SDK cannot remove a processor."""

    def __init__(self) -> None:
        self.delegates: tuple[SpanProcessor, ...] = ()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        for processor in self.delegates:
            try:
                processor.on_start(span, parent_context=parent_context)
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.PROCESSOR_ERROR, "span processor failed on start: %r", exc)

    def on_end(self, span: Any) -> None:
        for processor in self.delegates:
            try:
                processor.on_end(span)
            except Exception as exc:  # noqa: BLE001
                guard.report(diagnostics.PROCESSOR_ERROR, "span processor failed on end: %r", exc)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(p.force_flush(timeout_millis) for p in self.delegates)


class Components:
    """Everything one ``configure()`` built, so ``shutdown()`` can undo it."""

    def __init__(self) -> None:
        self.provider: TracerProvider | None = None
        self.hook: ProviderHook | None = None
        self.chain: ExportChain | None = None
        self.pipeline: Pipeline | None = None
        #: The ``meter_provider=`` given to configure(), reused by otel_rl.stats.
        self.meter_provider: MeterProvider | None = None


class ForwardingProcessor(SpanProcessor):
    """In process mode, ships spans made by other instrumentation to the
    exporter process along with otel_rl's own."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    def on_end(self, span: Any) -> None:
        self._pipeline.enqueue(span)


def _resource(settings: Settings, environ: Any) -> Resource:
    attrs: dict[str, Any] = {
        keys.RANK: settings.rank,
        keys.EXPERIMENT: settings.experiment_name,
        keys.TRIAL: settings.trial_name,
        keys.PROCESS_PID: os.getpid(),
    }
    if settings.role:
        attrs[keys.ROLE] = settings.role
    named = environ.get(OTEL_SERVICE_NAME) or "service.name=" in environ.get(OTEL_RESOURCE_ATTRIBUTES, "")
    if not named:
        attrs[keys.SERVICE_NAME] = DEFAULT_SERVICE_NAME
    return Resource.create(attrs)


def _exporters_of(provider: TracerProvider) -> list[Any]:
    """Exporters behind the provider's processors, as far as the SDK lets us see."""
    found = []
    for processor in _processors_of(provider):
        inner = getattr(processor, "_batch_processor", processor)
        exporter = getattr(inner, "_exporter", None) or getattr(inner, "span_exporter", None)
        if exporter is not None:
            found.append(exporter)
    return found


def _processors_of(provider: TracerProvider) -> tuple[Any, ...]:
    return getattr(provider._active_span_processor, "_span_processors", ())  # noqa: SLF001


def _has_otlp_exporter(provider: TracerProvider) -> bool:
    # Under opentelemetry-instrument (or an app that set up its own OTLP export)
    # a second OTLP exporter would send every span twice.
    return any(type(e).__module__.startswith("opentelemetry.exporter.otlp") for e in _exporters_of(provider))


def configure(config: Any = None, *, rank: int | None = None, role: str | None = None,
              tracer_provider: TracerProvider | None = None,
              meter_provider: MeterProvider | None = None, **overrides: Any) -> None:
    environ = os.environ
    overrides = dict(overrides)
    if rank is not None:
        overrides["rank"] = rank
    if role is not None:
        overrides["role"] = role
    settings = resolve(config, overrides, environ)
    # Export-side policies: how new files are created, what payload values may
    # become attributes (the exporter process applies the same settings).
    files.set_mode(settings.file_mode)
    privacy.configure(settings)
    with _main_section(), _lock:
        if STATE.configured:
            shutdown()
        STATE.settings = settings
        STATE.configured = True
        STATE.last_summary = None
        if not settings.enabled or environ.get(OTEL_SDK_DISABLED, "").strip().lower() == "true":
            return
        if traces_endpoint(environ):
            otlp_protocol(environ, traces_endpoint(environ))  # fail now on a bad protocol
        comps = Components()
        comps.meter_provider = meter_provider
        provider = tracer_provider
        owns_provider = False
        if provider is None:
            current = trace_api.get_tracer_provider()
            if isinstance(current, TracerProvider):
                provider = current
                owns_provider = getattr(current, "_otel_rl_owned", False)
        if provider is None:
            provider = TracerProvider(resource=_resource(settings, environ), shutdown_on_exit=False)
            provider._otel_rl_owned = True  # type: ignore[attr-defined]
            owns_provider = True
            trace_api.set_tracer_provider(provider)
        comps.provider = provider
        own_resource = _resource(settings, environ)
        resource = own_resource if owns_provider else provider.resource.merge(
            Resource({k: v for k, v in own_resource.attributes.items() if k != keys.SERVICE_NAME}))

        hook = getattr(provider, "_otel_rl_hook", None)
        if hook is None:
            hook = ProviderHook()
            provider.add_span_processor(hook)
            provider._otel_rl_hook = hook  # type: ignore[attr-defined]
        comps.hook = hook
        foreign = [p for p in _processors_of(provider) if p is not hook]
        with_otlp = not _has_otlp_exporter(provider)

        def build_chain(downstream: SpanProcessor | None,
                        chain_resource: Resource | None = None) -> tuple[SpanProcessor, Any, Any]:
            chain = comps.chain = ExportChain(settings, chain_resource or resource, environ,
                                              with_otlp=with_otlp, meter_provider=meter_provider)
            timeout_s = settings.shutdown_timeout_ms / 1000.0
            return chain.sink(downstream), chain.after_batch, lambda: chain.flush(timeout_s)

        if settings.export_process and not foreign and meter_provider is None:
            # Nothing else needs the spans in this process: encode and export
            # in the exporter process, off the training loop's GIL.
            # The backlog waits as bytes (~200 B a span); a quarter of the
            # queue bound keeps it near 13 MB by default, a 50k burst included.
            shipper = ExporterProcess(settings, dict(resource.attributes),
                                      max_pending_spans=max(1, settings.max_queue_size // 4))

            def fallback(chain_resource: Resource) -> tuple[SpanProcessor, Any, Any]:
                return build_chain(None, chain_resource)

            pipeline = Pipeline(None, resource, provider.sampler,
                                max_queue_size=settings.max_queue_size,
                                export_interval_ms=settings.export_interval_ms,
                                shipper=shipper, fallback=fallback)
            hook.delegates = (BaggageSpanProcessor(), ForwardingProcessor(pipeline))
        else:
            # The provider has processors of its own (the application's):
            # they must see otel_rl's spans, so everything runs in this process.
            sink, after_batch, on_save = build_chain(provider._active_span_processor)  # noqa: SLF001
            pipeline = Pipeline(sink, resource, provider.sampler,
                                max_queue_size=settings.max_queue_size,
                                export_interval_ms=settings.export_interval_ms,
                                after_batch=after_batch, on_save=on_save)
            hook.delegates = (BaggageSpanProcessor(), *comps.chain.exporting)
        comps.pipeline = pipeline
        STATE.components = comps
        STATE.pipeline = pipeline
        STATE.tracer = LeanTracer(pipeline)
        STATE.registry = Registry(pipeline, settings.max_pending_sessions)
        from ..sessions import _PHASES

        STATE.registry.phase_options.update(_PHASES)
        STATE.enabled = True
        STATE.sessions_on = settings.session_tracer
        STATE.scopes_on = True
        summary.Baseline.mark()
        _register_atexit()
        if settings.handle_sigterm:
            _install_sigterm_handler()
        _profiling_configure(settings)
    _attach_parent_from_env(environ)


def _attach_parent_from_env(environ: Any) -> None:
    """A process spawned with the environment carrier (``TRACEPARENT``, ``BAGGAGE``)
    continues its parent's trace: the carried context becomes this thread's
    context, unless the application attached one of its own."""
    from ..propagation import ENV_CARRIER_KEYS, extract_env

    if not any(environ.get(name) for name in ENV_CARRIER_KEYS.values()):
        return
    if trace_api.get_current_span().get_span_context().is_valid:
        return
    context_api.attach(extract_env(environ))


def save(step: int | None = None, force: bool = False) -> None:
    settings = STATE.settings
    if STATE.components is None or settings is None:
        return
    # AReaL's rule: the last step of each interval (0-indexed), e.g. 2, 5, 8 for 3.
    if not force and step is not None and (step + 1) % settings.save_interval != 0:
        return
    with _main_section():
        if STATE.registry is not None:
            STATE.registry.end_idle_tasks()
        # A step's save with save_interval 1 hands off to the export thread and
        # returns: the files are written continuously anyway. AReaL's writing
        # saves wait, within the bound: forced ones, those without a step, and
        # the steps of a save_interval above 1 (the trace file waits for them).
        wait = force or step is None or settings.save_interval > 1
        flush(settings.shutdown_timeout_ms / 1000.0, wait=wait)


#: Outputs kept beside the span pipeline (otel_rl.stats' loggers): objects with
#: ``flush(timeout_s) -> bool`` and ``shutdown(timeout_s)``, run by save() and shutdown().
EXTRA_OUTPUTS: list[Any] = []


def _run_extra(method: str, timeout_s: float) -> bool:
    ok = True
    for output in list(EXTRA_OUTPUTS):
        try:
            ok = getattr(output, method)(timeout_s) is not False and ok
        except Exception as exc:  # noqa: BLE001
            guard.report(diagnostics.EXPORT_ERROR, "an output failed to %s: %r", method, exc)
    return ok


def flush(timeout_s: float, wait: bool = True) -> bool:
    """Writes the files and starts the network sends of everything recorded so
    far; with ``wait``, returns once done or after ``timeout_s`` (``False``)."""
    extra_ok = _run_extra("flush", timeout_s)
    comps: Components | None = STATE.components
    if comps is None:
        return extra_ok
    return comps.pipeline.save(timeout_s, wait) and extra_ok


def shutdown() -> None:
    """Ends sessions, flushes and closes everything within one deadline of
    ``shutdown_timeout_ms`` (every step gets what the previous ones left), then
    logs and writes the run summary."""
    with _main_section(), _lock:
        comps: Components | None = STATE.components
        settings = STATE.settings
        STATE.enabled = STATE.scopes_on = STATE.sessions_on = False
        STATE.configured = False
        timeout_s = settings.shutdown_timeout_ms / 1000.0 if settings else 5.0
        end = time.monotonic() + timeout_s

        def left() -> float:
            return max(0.0, end - time.monotonic())

        _profiling_shutdown(settings, left())
        # The stats outputs (their own metrics provider) close beside the span
        # pipeline, sharing the deadline instead of spending it first.
        extras = _in_background(lambda: _run_extra("shutdown", left()), "otel_rl-shutdown-stats")
        if comps is not None:
            if STATE.registry is not None:
                STATE.registry.close_all()
            comps.pipeline.shutdown(left())
            if comps.hook is not None:
                comps.hook.delegates = ()
            if comps.chain is not None:
                comps.chain.shutdown(left())
        if extras is not None:
            extras.join(left())
        if comps is None:
            return
        _final_summary(settings, comps)
        STATE.components = STATE.pipeline = STATE.tracer = STATE.registry = None


def _in_background(fn: Any, name: str) -> threading.Thread | None:
    """Runs ``fn`` on a daemon thread (``None``: it ran here, no thread could start)."""
    thread = threading.Thread(target=fn, name=name, daemon=True)
    try:
        thread.start()
    except RuntimeError:  # an interpreter too far into its exit to start threads
        fn()
        return None
    return thread


def _final_summary(settings: Settings | None, comps: Components) -> None:
    if settings is None:
        return
    try:
        result = summary.build(settings, comps.pipeline, comps.chain, final=True)
        path = summary.write(settings, result)
        summary.log(result, path)
        STATE.last_summary = result
    except Exception as exc:  # noqa: BLE001 - the summary must not fail shutdown
        guard.report(diagnostics.INTERNAL_ERROR, "the run summary failed: %r", exc)


def run_summary() -> dict[str, Any] | None:
    """The run summary: live numbers while configured (the exporter process's as
    of its latest report, after each batch it processes), the final one after
    ``shutdown()``, else ``None``."""
    comps: Components | None = STATE.components
    settings = STATE.settings
    if comps is not None and settings is not None:
        return summary.build(settings, comps.pipeline, comps.chain, final=False)
    return STATE.last_summary


_sigterm_installed = False
#: How deep the main thread is in configure(), save(), shutdown() or the exit
#: hook: a SIGTERM handled meanwhile must not wait on the locks it holds there.
_main_depth = 0
_sigterm_deferred = False
_terminating = False


@contextlib.contextmanager
def _main_section() -> Any:
    """Marks the main thread as inside otel_rl's own locks (see :func:`_on_sigterm`);
    at the outermost exit, a SIGTERM that came meanwhile is acted on."""
    global _main_depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _main_depth += 1
    try:
        yield
    finally:
        _main_depth -= 1
        if _main_depth == 0 and _sigterm_deferred:
            _terminate()


def _install_sigterm_handler() -> None:
    """On SIGTERM, flush and close (bounded) before dying of it as before.

    Installed only when nothing else handles SIGTERM (the default action) and
    only from the main thread; a handler the application installs later
    replaces it. After shutdown the default action is restored and the signal
    raised again, so the exit status stays "killed by SIGTERM".
    """
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
        _sigterm_installed = True
    except (ValueError, OSError, AttributeError):
        pass


def _on_sigterm(signum: int, frame: Any) -> None:
    global _sigterm_deferred
    if _terminating:
        return  # already on its way out
    if _main_depth:
        # The signal interrupted the main thread inside save(), shutdown() or
        # the exit hook (a multiprocessing worker ending as its pool is
        # terminated), holding locks a shutdown needs: that call is bounded,
        # so let it finish, then act (_main_section).
        _sigterm_deferred = True
        return
    _terminate()


def _terminate() -> None:
    """Shuts down within the bound, then dies of SIGTERM."""
    global _terminating, _sigterm_deferred
    _terminating = True
    _sigterm_deferred = False
    settings = STATE.settings
    timeout_s = settings.shutdown_timeout_ms / 1000.0 if settings else 5.0
    # On a thread of its own, waited for within the bound: the signal may have
    # interrupted this thread while it held some other lock shutdown needs.
    worker = threading.Thread(target=_atexit_shutdown, name="otel_rl-sigterm", daemon=True)
    worker.start()
    worker.join(timeout_s + 0.5)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _profiling_configure(settings: Settings) -> None:
    """Live control (watcher, HTTP server from the environment) and CUDA-synchronised timing."""
    from .control import operations as control

    try:
        control.on_configure(settings)
    except Exception as exc:  # noqa: BLE001 - profiling must not stop training from starting
        guard.report(diagnostics.CONTROL_ERROR, "live profiling control not started: %r", exc)


def _profiling_shutdown(settings: Settings | None, timeout_s: float) -> None:
    """Stops the control watcher and server, request events and torch windows (traces written)."""
    from .control import operations as control

    try:
        control.on_shutdown(timeout_s)
    except Exception as exc:  # noqa: BLE001
        guard.report(diagnostics.CONTROL_ERROR, "live profiling control did not stop cleanly: %r", exc)


_atexit_registered = False


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_atexit_shutdown)
        _atexit_registered = True
    _register_multiprocessing_exit()


class _AfterFork:
    """A long-lived object for ``multiprocessing.util.register_after_fork``."""


_AFTER_FORK = _AfterFork()
_mp_exit_pid: int | None = None


def _register_multiprocessing_exit(again: bool = False) -> None:
    """Workers that ``multiprocessing`` starts with fork or forkserver end with
    ``os._exit``, so ``atexit`` never runs there; its own exit hook does (run
    before ``os._exit``, and also in the main process, before ``atexit``).
    Registered once per process, and ``again`` in each worker multiprocessing
    starts: it clears the hooks before running the worker's target (including
    one registered while the target was being unpickled, which configures a
    spawn or forkserver worker from its environment)."""
    global _mp_exit_pid
    if _mp_exit_pid == os.getpid() and not again:
        return
    try:
        from multiprocessing import util
    except ImportError:  # pragma: no cover - a stripped-down interpreter
        return
    if _mp_exit_pid is None:
        util.register_after_fork(_AFTER_FORK, lambda _obj: _register_multiprocessing_exit(True))
    _mp_exit_pid = os.getpid()
    util.Finalize(None, _atexit_shutdown, exitpriority=0)


def _atexit_shutdown() -> None:
    with _main_section():
        try:
            shutdown()
        except Exception as exc:  # noqa: BLE001 - exit must not fail because of telemetry
            logger.warning("otel_rl: shutdown at exit failed: %r", exc)


def _after_fork_in_child() -> None:
    # The forking thread is the child's only one: locks other threads of the
    # parent held at the fork would never be released here.
    global _lock, _main_depth, _sigterm_deferred, _terminating
    _lock = threading.RLock()
    _main_depth = 0
    _sigterm_deferred = _terminating = False
    registry = STATE.registry
    if registry is not None and hasattr(registry, "_lock"):
        registry._lock = threading.Lock()  # noqa: SLF001 - its sessions are the child's to end


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def get_tracer() -> Any:
    if STATE.tracer is not None:
        return STATE.tracer
    return trace_api.get_tracer(keys.INSTRUMENTATION_NAME)
