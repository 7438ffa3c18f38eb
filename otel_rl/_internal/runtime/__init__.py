"""The top floor: one runtime object per process (:data:`RUNTIME`) that
``configure()`` builds the components into, and that walks them.

Everything below this floor exposes plain functions and methods
(``after_fork_in_child()``, ``flush()``, ``shutdown()``); only the runtime
registers process hooks: one ``os.register_at_fork`` and one set of exit hooks
(``atexit``, multiprocessing's exit hook, SIGTERM, :mod:`.exit_hooks`). The
fast-path view of what it built is :data:`~..state.STATE`.

The walks, in order:

configure
    settings resolved, file mode and privacy policy set; a configured process
    is shut down first; the TracerProvider's hook (:mod:`.providers`); the
    export chain in this process, or the exporter process; the pipeline; its
    tracer and the session registry (with the phases registered so far); the
    fast-path flags on; the run summary's baseline; exit hooks installed; live
    control (watcher, HTTP server, CUDA sync); the parent's context from the
    environment carrier attached.

flush (``save()``)
    idle tasks ended; the stats backends flushed; the pipeline saved (files
    written, network sends started; waited for within the bound when asked).

shutdown (and exit: ``atexit``, multiprocessing's exit, SIGTERM)
    one deadline of ``shutdown_timeout_ms`` shared by every step: fast-path
    flags off; live control stopped (watcher, server, request events, torch
    profiler windows written); the stats backends closed on a thread beside
    the spans; sessions and tasks ended; the pipeline drained and closed; the
    provider hook emptied; the export chain closed; the stats thread joined;
    the run summary built, logged and written; the fast-path view cleared.

fork (in the child; :meth:`.core.Runtime.fork_walk`)
    the floors from the bottom up: guard's counters, jsonl's byte counts and
    open files, the trace-file exporters, the chain's background flushers, the
    summary's baseline (the child reports its own numbers), the stats
    backends, the request-event recorder, the torch profiler, live control;
    the steps public modules added (``add_fork_step``: ML-Agents' timer
    stacks); then the runtime's own lock and exit state (the child's own SIGTERM
    pipe and watcher thread) and the registry's lock; last
    the pipeline (the parent's queued spans dropped, its own export thread).
"""

from ..state import STATE
from .core import RUNTIME, Components, Runtime

configure = RUNTIME.configure
save = RUNTIME.save
flush = RUNTIME.flush
shutdown = RUNTIME.shutdown
run_summary = RUNTIME.run_summary
get_tracer = RUNTIME.get_tracer

__all__ = ["RUNTIME", "STATE", "Components", "Runtime", "configure", "flush", "get_tracer", "run_summary",
           "save", "shutdown"]
