"""The process-wide state the public API reads on its fast path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Settings
    from .export.pipeline import Pipeline
    from .recording.spans import LeanTracer
    from .recording.tracking import Registry


class State:
    """One instance, :data:`STATE`. ``scopes_on`` is the only flag a disabled
    scope reads before returning."""

    __slots__ = (
        "configured", "enabled", "scopes_on", "sessions_on", "settings", "pipeline",
        "tracer", "registry", "components", "last_summary", "areal_configured",
    )

    def __init__(self) -> None:
        self.configured = False
        self.enabled = False
        self.scopes_on = False
        self.sessions_on = False
        self.settings: Settings | None = None
        self.pipeline: Pipeline | None = None
        self.tracer: LeanTracer | None = None
        self.registry: Registry | None = None
        self.components: Any = None
        #: The final run summary of the last configuration (after shutdown).
        self.last_summary: dict[str, Any] | None = None
        #: The configuration came from ``configure(<AReaL config object>)``: a second
        #: such call raises, as AReaL's does, instead of reconfiguring.
        self.areal_configured = False


STATE = State()
