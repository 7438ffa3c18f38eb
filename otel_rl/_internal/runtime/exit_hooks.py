"""How a process's end reaches the runtime: ``atexit``, multiprocessing's exit
hook and SIGTERM, each running the runtime's one exit callback (a bounded shutdown)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

try:
    from . import _signals
except ImportError:  # built without a C compiler: the Python handler alone
    _signals = None

logger = logging.getLogger("otel_rl")


class ExitHooks:
    """The process's exit hooks, installed once, all running ``on_exit``.

    Args:
        on_exit: The bounded shutdown to run (any failure is logged, never raised).
        timeout_s: The current shutdown bound, for how long SIGTERM waits on ``on_exit``.
    """

    def __init__(self, on_exit: Callable[[], None], timeout_s: Callable[[], float]) -> None:
        self._on_exit = on_exit
        self._timeout_s = timeout_s
        self._atexit_registered = False
        self._sigterm_installed = False
        #: The process multiprocessing's exit hook was registered in (see :meth:`_register_multiprocessing`).
        self._mp_exit_pid: int | None = None
        #: How deep the main thread is in configure(), save(), shutdown() or the exit
        #: hook: a SIGTERM handled meanwhile must not wait on the locks it holds there.
        self._main_depth = 0
        self._sigterm_deferred = False
        self._terminating = False
        #: Guards the three above and ``_exited``: the SIGTERM watcher thread reads them beside
        #: the main thread (reentrant: the Python handler may interrupt the main thread holding it).
        self._signal_lock = threading.RLock()
        #: The pipe the compiled handler writes to and the watcher reads (``None``: none watched).
        self._watched_pipe: tuple[int, int] | None = None
        #: The exit callback ran: multiprocessing's hook and ``atexit`` both run in
        #: the main process, and the second has nothing left to do.
        self._exited = False
        #: Set when the exit callback's run has ended.
        self._exit_done = threading.Event()

    # --- installing ---------------------------------------------------------------------
    def install(self, *, sigterm: bool) -> None:
        """Registers the exit hooks (once per process); with ``sigterm``, the SIGTERM handler too."""
        if not self._atexit_registered:
            atexit.register(self.run_exit)
            self._atexit_registered = True
        self._register_multiprocessing()
        if sigterm:
            self._install_sigterm_handler()

    def _register_multiprocessing(self, again: bool = False) -> None:
        """Workers that ``multiprocessing`` starts with fork or forkserver end with
        ``os._exit``, so ``atexit`` never runs there; its own exit hook does (run
        before ``os._exit``, and also in the main process, before ``atexit``).
        Registered once per process, and ``again`` in each worker multiprocessing
        starts: it clears the hooks before running the worker's target (including
        one registered while the target was being unpickled, which configures a
        spawn or forkserver worker from its environment)."""
        if self._mp_exit_pid == os.getpid() and not again:
            return
        try:
            from multiprocessing import util
        except ImportError:  # pragma: no cover - a stripped-down interpreter
            return
        if self._mp_exit_pid is None:
            # This object lives as long as the process: multiprocessing keeps it weakly.
            util.register_after_fork(self, ExitHooks._in_multiprocessing_child)
        self._mp_exit_pid = os.getpid()
        util.Finalize(None, self.run_exit, exitpriority=0)

    def _in_multiprocessing_child(self) -> None:
        self._register_multiprocessing(again=True)

    def _install_sigterm_handler(self) -> None:
        """On SIGTERM, flush and close (bounded) before dying of it as before.

        Installed only when nothing else handles SIGTERM (the default action) and
        only from the main thread; a handler the application installs later
        replaces it. After shutdown the default action is restored and the signal
        raised again, so the exit status stays "killed by SIGTERM".

        The Python handler is what ``signal.getsignal`` reports (a handler that
        chains to the previous one calls it); where the compiled module is built,
        the process's handler is its C one, which wakes a watcher thread: a Python
        handler runs only on the main thread between bytecodes, and a signal that
        arrives as the main thread blocks in C is never acted on (see ``_signals.c``).
        """
        if self._sigterm_installed or threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return
            signal.signal(signal.SIGTERM, self._on_sigterm)
            self._sigterm_installed = True
        except (ValueError, OSError, AttributeError):
            return
        self._watch_sigterm()

    def _watch_sigterm(self) -> None:
        """The compiled handler and its watcher thread, for this process."""
        if _signals is None:
            return
        read_fd, write_fd = os.pipe()
        try:
            os.set_blocking(write_fd, False)  # the handler never waits on a full pipe
            _signals.install(signal.SIGTERM, write_fd)
            threading.Thread(target=self._watch, args=(read_fd,), name="otel_rl-sigterm-watch",
                             daemon=True).start()
        except (OSError, RuntimeError) as exc:  # the Python handler stays
            logger.debug("otel_rl: SIGTERM watcher not started: %r", exc)
            if _signals.installed(signal.SIGTERM):
                signal.signal(signal.SIGTERM, self._on_sigterm)
            os.close(read_fd)
            os.close(write_fd)
            return
        self._watched_pipe = (read_fd, write_fd)

    def _watch(self, read_fd: int) -> None:
        while os.read(read_fd, 64):  # the pipe is closed only in a forked child, where no watcher runs
            self._on_sigterm(signal.SIGTERM, None)

    # --- running ------------------------------------------------------------------------
    def run_exit(self) -> None:
        """The exit callback, as the exit hooks run it (once): a failure is logged, not raised.

        Called while another thread runs it (SIGTERM's, from the watcher), it waits for that
        run within the bound and then dies of the signal as that run would: an interpreter
        that went on to finalize would stop the shutdown's daemon thread halfway."""
        with self._signal_lock:
            running = self._exited
            self._exited = True
        if running:
            self._exit_done.wait(self._timeout_s() + 0.5)
            if self._terminating:
                self._die()
            return
        with self.main_section():
            try:
                self._on_exit()
            except Exception as exc:  # noqa: BLE001 - exit must not fail because of telemetry
                logger.warning("otel_rl: shutdown at exit failed: %r", exc)
            finally:
                self._exit_done.set()  # before main_section acts on a deferred signal, which waits on it

    @contextlib.contextmanager
    def main_section(self) -> Iterator[None]:
        """Marks the main thread as inside otel_rl's own locks (see :meth:`_on_sigterm`);
        at the outermost exit, a SIGTERM that came meanwhile is acted on."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        with self._signal_lock:
            self._main_depth += 1
        try:
            yield
        finally:
            with self._signal_lock:
                self._main_depth -= 1
                act = self._main_depth == 0 and self._sigterm_deferred
                if act:
                    self._sigterm_deferred = False
                    self._terminating = True
            if act:
                self._terminate()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """The SIGTERM handler: the Python one on the main thread, or the watcher thread's call."""
        with self._signal_lock:
            if self._terminating:
                return  # already on its way out
            if self._main_depth:
                # The main thread is inside save(), shutdown() or the exit hook (a
                # multiprocessing worker ending as its pool is terminated), holding
                # locks a shutdown needs: that call is bounded, so let it finish, then
                # act (main_section).
                self._sigterm_deferred = True
                return
            self._terminating = True
        self._terminate()

    def _terminate(self) -> None:
        """Shuts down within the bound, then dies of SIGTERM."""
        # On a thread of its own, waited for within the bound: the signal may have
        # interrupted this thread while it held some other lock shutdown needs.
        worker = threading.Thread(target=self.run_exit, name="otel_rl-sigterm", daemon=True)
        worker.start()
        worker.join(self._timeout_s() + 0.5)
        self._die()

    @staticmethod
    def _die() -> None:
        """The default action restored and SIGTERM raised again."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        elif _signals is not None:  # the watcher thread, where signal.signal() is refused
            _signals.restore_default(signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)

    # --- fork -----------------------------------------------------------------------------
    def after_fork_in_child(self) -> None:
        """The forking thread is the child's only one: it is in no section of the
        parent's other threads, and no SIGTERM of the parent's is pending here.
        The registrations stay: ``atexit`` and the SIGTERM handler are inherited."""
        self._signal_lock = threading.RLock()
        self._exit_done = threading.Event()
        self._main_depth = 0
        self._sigterm_deferred = self._terminating = self._exited = False
        if self._watched_pipe is not None:
            # The parent's watcher did not survive the fork, and its pipe is the parent's.
            for fd in self._watched_pipe:
                os.close(fd)
            self._watched_pipe = None
            if _signals is not None and _signals.installed(signal.SIGTERM):
                self._watch_sigterm()
