"""Entry point for ``opentelemetry-instrument python train.py``.

Loaded as an ``opentelemetry_instrumentor`` after the distro's configurator
has installed its TracerProvider, so otel_rl adds its processors to that
provider instead of fighting it for the global slot.
"""

from __future__ import annotations

import os
from typing import Any

from .environment_variables import OTEL_RL_ENABLED
from ._internal.config import parse_bool


class OtelRLInstrumentor:
    """Duck-types ``BaseInstrumentor``: ``instrument()`` configures otel_rl from the environment."""

    def instrument(self, **kwargs: Any) -> None:
        import otel_rl

        value = os.environ.get(OTEL_RL_ENABLED)
        if value is not None and not parse_bool(value):
            return
        if not otel_rl.is_configured():
            otel_rl.configure(tracer_provider=kwargs.get("tracer_provider"))

    def uninstrument(self, **kwargs: Any) -> None:
        import otel_rl

        otel_rl.shutdown()
