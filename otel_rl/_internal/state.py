"""The process-wide state the public API reads on its fast path.

:data:`STATE` is the runtime's fast-path view: plain attributes, set by
``runtime`` when it configures and shuts down, read with one attribute lookup
by every scope and session call. It sits on the base floor and knows the
objects it points to only by the methods the callers use (``Any`` here):
importing them would tie the base to the floors above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Settings


class State:
    """One instance, :data:`STATE`. ``scopes_on`` is the only flag a disabled
    scope reads before returning."""

    __slots__ = (
        "configured", "enabled", "scopes_on", "sessions_on", "settings", "pipeline",
        "tracer", "registry", "components", "last_summary", "areal_configured", "policy_version",
    )

    def __init__(self) -> None:
        self.configured = False
        self.enabled = False
        self.scopes_on = False
        self.sessions_on = False
        self.settings: Settings | None = None
        #: The span pipeline (``export.pipeline.Pipeline``) of the current configuration.
        self.pipeline: Any = None
        #: Its tracer (``recording.spans.LeanTracer``).
        self.tracer: Any = None
        #: Its task and session registry (``recording.tracking.Registry``).
        self.registry: Any = None
        #: Everything else the configuration built (``runtime.Components``).
        self.components: Any = None
        #: The final run summary of the last configuration (after shutdown).
        self.last_summary: dict[str, Any] | None = None
        #: The configuration came from ``configure(<AReaL config object>)``: a second
        #: such call raises, as AReaL's does, instead of reconfiguring.
        self.areal_configured = False
        #: The process's current policy version (``set_policy_version``): kept across
        #: configurations, read when a session or phase starts.
        self.policy_version: Any = None


STATE = State()

