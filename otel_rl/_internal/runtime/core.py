"""The process's runtime: what ``configure()`` builds, and the walks over it
(flush, shutdown, fork, exit) in the orders the package docstring gives."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.environment_variables import OTEL_SDK_DISABLED
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from .. import control, diagnostics, events, files, guard, keys
from ..config import Settings, resolve
from ..control import torch_profiler
from ..export import chain as export_chain
from ..export import jsonl, summary
from ..export.chain import ExportChain, otlp_protocol, traces_endpoint
from ..export.jsonl import JsonlAppender
from ..export.pipeline import Pipeline
from ..export.process import ExporterProcess
from ..propagate import carriers
from ..recording import counters, privacy
from ..recording.spans import LeanTracer
from ..recording.tracking import PHASES, Registry
from ..resource import process_resource
from ..state import STATE
from ..stats import backends as stats_backends
from .exit_hooks import ExitHooks
from .providers import BaggageSpanProcessor, ForwardingProcessor, ProviderHook, has_otlp_exporter, processors_of

logger = logging.getLogger("otel_rl")

#: Only imported once a trace file is written (by the export chain): before that
#: it has no objects a forked child must renew.
_FILE_EXPORTER = "otel_rl._internal.export.file_exporter"


class Components:
    """Everything one ``configure()`` built, so ``shutdown()`` can undo it
    (the fast-path ones, pipeline, tracer and registry, are also on ``STATE``)."""

    def __init__(self) -> None:
        self.provider: TracerProvider | None = None
        self.hook: ProviderHook | None = None
        self.chain: ExportChain | None = None
        self.pipeline: Pipeline | None = None
        #: The ``meter_provider=`` given to configure(), reused by otel_rl.stats.
        self.meter_provider: MeterProvider | None = None
        #: ``annotations-r{rank}.jsonl`` (``otel_rl.annotate`` / ``consume``), opened on the first line.
        self.annotations: JsonlAppender | None = None


class Runtime:
    """One per process (:data:`RUNTIME`): builds the components of a
    configuration into :data:`~..state.STATE` and walks them."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.exit_hooks = ExitHooks(self.shutdown, self._shutdown_timeout_s)
        #: Steps the public modules add to the fork walk (ML-Agents' timer stacks,
        #: whose module globals must stay where ML-Agents' code patches them).
        self._public_fork_steps: list[tuple[str, Callable[[], Any]]] = []

    def add_fork_step(self, name: str, step: Callable[[], Any]) -> None:
        """Adds ``step`` to the fork walk, after the floors and before the runtime itself."""
        self._public_fork_steps.append((name, step))

    # --- configure ------------------------------------------------------------------------
    def configure(self, config: Any = None, *, rank: int | None = None, role: str | None = None,
                  tracer_provider: TracerProvider | None = None,
                  meter_provider: MeterProvider | None = None, **overrides: Any) -> None:
        """Resolves the settings and builds this configuration's components (a
        configured process is shut down first)."""
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
        with self.exit_hooks.main_section(), self._lock:
            if STATE.configured:
                self.shutdown()
            STATE.settings = settings
            STATE.configured = True
            STATE.last_summary = None
            if not settings.enabled or environ.get(OTEL_SDK_DISABLED, "").strip().lower() == "true":
                return
            if traces_endpoint(environ):
                otlp_protocol(environ, traces_endpoint(environ))  # fail now on a bad protocol
            comps = self._build(settings, environ, tracer_provider, meter_provider)
            STATE.components = comps
            STATE.pipeline = comps.pipeline
            STATE.tracer = LeanTracer(comps.pipeline)
            STATE.registry = Registry(comps.pipeline, settings.max_pending_sessions)
            STATE.registry.phase_options.update(PHASES)
            if settings.session_tracer:
                comps.pipeline.samplers.append(counters.InFlightSampler(comps.pipeline))
            STATE.enabled = True
            STATE.sessions_on = settings.session_tracer
            STATE.scopes_on = True
            summary.Baseline.mark()
            self.exit_hooks.install(sigterm=settings.handle_sigterm)
            _control_configure(settings)
        # A process spawned with the environment carrier continues its parent's
        # trace, unless the application attached a context of its own.
        if carriers.env_carried(environ) and not trace_api.get_current_span().get_span_context().is_valid:
            context_api.attach(carriers.extract_env(environ))

    @staticmethod
    def _build(settings: Settings, environ: Any, tracer_provider: TracerProvider | None,
               meter_provider: MeterProvider | None) -> Components:
        """The provider hook, the export chain or exporter process, and the pipeline."""
        comps = Components()
        comps.meter_provider = meter_provider
        # Written on the caller's thread, a whole call's lines at once (they are few).
        comps.annotations = JsonlAppender(settings.file_path(keys.ANNOTATIONS_FILE), 1 << 30, kind="annotations")
        provider = tracer_provider
        owns_provider = False
        if provider is None:
            current = trace_api.get_tracer_provider()
            if isinstance(current, TracerProvider):
                provider = current
                owns_provider = getattr(current, "_otel_rl_owned", False)
        if provider is None:
            provider = TracerProvider(resource=process_resource(settings, environ), shutdown_on_exit=False)
            provider._otel_rl_owned = True  # type: ignore[attr-defined]
            owns_provider = True
            trace_api.set_tracer_provider(provider)
        comps.provider = provider
        own_resource = process_resource(settings, environ)
        resource = own_resource if owns_provider else provider.resource.merge(
            Resource({k: v for k, v in own_resource.attributes.items() if k != keys.SERVICE_NAME}))
        hook = comps.hook = ProviderHook.of(provider)
        foreign = [p for p in processors_of(provider) if p is not hook]
        with_otlp = not has_otlp_exporter(provider)

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
        return comps

    # --- flush ------------------------------------------------------------------------------
    def save(self, step: int | None = None, force: bool = False) -> None:
        """``otel_rl.save()``: ends idle tasks, then flushes (waiting, by AReaL's rules)."""
        settings = STATE.settings
        if STATE.components is None or settings is None:
            return
        # AReaL's rule: the last step of each interval (0-indexed), e.g. 2, 5, 8 for 3.
        if not force and step is not None and (step + 1) % settings.save_interval != 0:
            return
        with self.exit_hooks.main_section():
            if STATE.registry is not None:
                STATE.registry.end_idle_tasks()
            # A step's save with save_interval 1 hands off to the export thread and
            # returns: the files are written continuously anyway. AReaL's writing
            # saves wait, within the bound: forced ones, those without a step, and
            # the steps of a save_interval above 1 (the trace file waits for them).
            wait = force or step is None or settings.save_interval > 1
            self.flush(settings.shutdown_timeout_ms / 1000.0, wait=wait)

    def flush(self, timeout_s: float, wait: bool = True) -> bool:
        """Writes the files and starts the network sends of everything recorded so
        far; with ``wait``, returns once done or after ``timeout_s`` (``False``)."""
        stats_ok = _stats("flush", timeout_s)
        comps: Components | None = STATE.components
        if comps is None:
            return stats_ok
        return comps.pipeline.save(timeout_s, wait) and stats_ok

    # --- shutdown ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Ends sessions, flushes and closes everything within one deadline of
        ``shutdown_timeout_ms`` (every step gets what the previous ones left), then
        logs and writes the run summary."""
        with self.exit_hooks.main_section(), self._lock:
            comps: Components | None = STATE.components
            settings = STATE.settings
            STATE.enabled = STATE.scopes_on = STATE.sessions_on = False
            STATE.configured = False
            end = time.monotonic() + self._shutdown_timeout_s()

            def left() -> float:
                return max(0.0, end - time.monotonic())

            _control_shutdown(left())
            # The stats outputs (their own metrics provider) close beside the span
            # pipeline, sharing the deadline instead of spending it first.
            stats = _in_background(lambda: _stats("shutdown", left()), "otel_rl-shutdown-stats")
            if comps is not None:
                if STATE.registry is not None:
                    STATE.registry.close_all()
                comps.pipeline.shutdown(left())
                if comps.hook is not None:
                    comps.hook.delegates = ()
                if comps.chain is not None:
                    comps.chain.shutdown(left())
                if comps.annotations is not None:
                    comps.annotations.close()
            if stats is not None:
                stats.join(left())
            if comps is None:
                return
            _final_summary(settings, comps)
            STATE.components = STATE.pipeline = STATE.tracer = STATE.registry = None

    @staticmethod
    def _shutdown_timeout_s() -> float:
        settings = STATE.settings
        return settings.shutdown_timeout_ms / 1000.0 if settings else 5.0

    # --- fork -------------------------------------------------------------------------------
    def fork_walk(self) -> list[tuple[str, Callable[[], Any]]]:
        """What a forked child renews, in order: the floors from the bottom up (a
        step may use what the steps before it renewed: the summary's baseline
        reads guard's and jsonl's counters), then the runtime itself, then this
        configuration's pipeline, last because it starts the child's export thread.

        Each step is looked up when the walk runs, so the walk is always the
        modules' current ``after_fork_in_child``.
        """
        comps: Components | None = STATE.components
        file_exporter = sys.modules.get(_FILE_EXPORTER)
        walk: list[tuple[str, Any]] = [
            ("guard", guard.after_fork_in_child),
            ("jsonl", jsonl.after_fork_in_child),
            ("file_exporter", getattr(file_exporter, "after_fork_in_child", None)),
            ("export_chain", export_chain.after_fork_in_child),
            ("summary", summary.after_fork_in_child),
            ("stats", stats_backends.after_fork_in_child),
            ("request_events", events.after_fork_in_child),
            ("torch_profiler", torch_profiler.after_fork_in_child),
            ("control", control.after_fork_in_child),
            *self._public_fork_steps,
            ("runtime", self._after_fork_in_child),
            ("pipeline", comps.pipeline.after_fork_in_child if comps is not None else None),
        ]
        return [(name, step) for name, step in walk if step is not None]

    def after_fork_in_child(self) -> None:
        """The one ``os.register_at_fork`` hook: runs :meth:`fork_walk` in the child."""
        for name, step in self.fork_walk():
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - one component never costs the others theirs
                guard.report(diagnostics.INTERNAL_ERROR, "renewing %s in a forked child failed: %r", name, exc)

    def _after_fork_in_child(self) -> None:
        # The forking thread is the child's only one: locks other threads of the
        # parent held at the fork would never be released here.
        self._lock = threading.RLock()
        self.exit_hooks.after_fork_in_child()
        registry = STATE.registry
        if registry is not None and hasattr(registry, "_lock"):
            registry._lock = threading.Lock()  # noqa: SLF001 - its sessions are the child's to end

    # --- reading ----------------------------------------------------------------------------
    @staticmethod
    def run_summary() -> dict[str, Any] | None:
        """The run summary: live numbers while configured (the exporter process's as
        of its latest report, after each batch it processes), the final one after
        ``shutdown()``, else ``None``."""
        comps: Components | None = STATE.components
        settings = STATE.settings
        if comps is not None and settings is not None:
            return summary.build(settings, comps.pipeline, comps.chain, final=False)
        return STATE.last_summary

    @staticmethod
    def get_tracer() -> Any:
        """otel_rl's tracer while configured, else the global provider's."""
        if STATE.tracer is not None:
            return STATE.tracer
        return trace_api.get_tracer(keys.INSTRUMENTATION_NAME)


def _stats(method: str, timeout_s: float) -> bool:
    """Flushes or shuts down otel_rl.stats' backends (their own outputs, beside the spans)."""
    try:
        return getattr(stats_backends.BUILT_INS, method)(timeout_s) is not False
    except Exception as exc:  # noqa: BLE001 - reported; the spans' flush still decides
        guard.report(diagnostics.EXPORT_ERROR, "an output failed to %s: %r", method, exc)
        return True


def _control_configure(settings: Settings) -> None:
    """Live control (watcher, HTTP server from the environment) and CUDA-synchronised timing."""
    try:
        control.on_configure(settings)
    except Exception as exc:  # noqa: BLE001 - profiling must not stop training from starting
        guard.report(diagnostics.CONTROL_ERROR, "live profiling control not started: %r", exc)


def _control_shutdown(timeout_s: float) -> None:
    """Stops the control watcher and server, request events and torch windows (traces written)."""
    try:
        control.on_shutdown(timeout_s)
    except Exception as exc:  # noqa: BLE001
        guard.report(diagnostics.CONTROL_ERROR, "live profiling control did not stop cleanly: %r", exc)


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


RUNTIME = Runtime()

if hasattr(os, "register_at_fork"):
    # The process's only fork hook: every component is renewed by RUNTIME's walk.
    os.register_at_fork(after_in_child=RUNTIME.after_fork_in_child)
