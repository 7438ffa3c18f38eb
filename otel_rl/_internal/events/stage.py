"""The active stage: which stage an event emitted without one belongs to.

sglang-omni binds a stage with ``set_active_stage`` in two slots: a context
variable (followed by asyncio tasks, ``asyncio.to_thread`` and
``loop.run_in_executor``, which copy the context) and a thread-local (for code a
stage's own thread runs in another context). The recorder reads both.
"""

from __future__ import annotations

import contextvars
import threading

from .. import diagnostics, guard

#: The stage of an event that names none, when no stage is bound and the
#: recorder was started without one (sglang-omni's last resort).
UNKNOWN_STAGE = "unknown"

#: The context's slot (``otel_rl.events._active_stage_cv``, sglang-omni's name).
STAGE_VAR: contextvars.ContextVar[str | None] = contextvars.ContextVar("otel_rl_active_stage",
                                                                        default=None)
#: The thread's slot, its ``stage`` attribute (``otel_rl.events._thread_active_stage``).
STAGE_LOCAL = threading.local()


class StageToken:
    """What :func:`set_active_stage` returns; give it back to :func:`reset_active_stage`."""

    __slots__ = ("_var_token", "_previous", "_thread")

    def __init__(self, var_token: contextvars.Token, previous: str | None, thread: int) -> None:
        self._var_token = var_token
        self._previous = previous
        self._thread = thread


def set_active_stage(stage: str | None) -> StageToken:
    """Binds ``stage`` as the stage of events emitted from here without one.

    The binding holds for this thread and for everything that copies this
    context (asyncio tasks, ``asyncio.to_thread``, ``loop.run_in_executor``,
    ``contextvars.copy_context().run``)::

        token = set_active_stage("thinker")
        try:
            ...
        finally:
            reset_active_stage(token)

    Args:
        stage: The stage name (``None`` unbinds).

    Returns:
        A token for :func:`reset_active_stage`.
    """
    previous = getattr(STAGE_LOCAL, "stage", None)
    STAGE_LOCAL.stage = stage
    return StageToken(STAGE_VAR.set(stage), previous, threading.get_ident())


def reset_active_stage(token: StageToken | contextvars.Token | None) -> None:
    """Restores the stage bound before :func:`set_active_stage` returned ``token``.

    ``reset_active_stage(None)`` scrubs both slots (the thread-local and the
    context variable) of the calling thread, as sglang-omni's test fixtures do.
    A bare ``contextvars.Token`` of the context variable is accepted too (the
    thread-local slot is then cleared, as sglang-omni does). Never raises: a
    token from another context or thread is applied as far as it can be.
    """
    if token is None:
        STAGE_LOCAL.stage = None
        STAGE_VAR.set(None)
        return
    if isinstance(token, StageToken):
        var_token, previous, same_thread = (token._var_token, token._previous,  # noqa: SLF001
                                            token._thread == threading.get_ident())  # noqa: SLF001
    elif isinstance(token, contextvars.Token):
        var_token, previous, same_thread = token, None, True
    else:
        guard.report(diagnostics.BAD_STAGE_TOKEN, "reset_active_stage(): not a token: %r", token)
        return
    try:
        STAGE_VAR.reset(var_token)
    except (ValueError, RuntimeError):
        # Created in another context, or already used: restore the value it replaced.
        old = var_token.old_value
        STAGE_VAR.set(None if old is contextvars.Token.MISSING else old)
    if same_thread:
        STAGE_LOCAL.stage = previous


def get_active_stage() -> str | None:
    """The stage bound by :func:`set_active_stage` here: the context's first, then the thread's."""
    stage = STAGE_VAR.get()
    if stage is None:
        stage = getattr(STAGE_LOCAL, "stage", None)
    return stage

