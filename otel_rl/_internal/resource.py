"""The OpenTelemetry resource that names one otel_rl process (rank, role, run)."""

from __future__ import annotations

import os
from typing import Any

from opentelemetry.sdk.environment_variables import OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
from opentelemetry.sdk.resources import Resource

from . import keys

DEFAULT_SERVICE_NAME = "otel-rl"


def process_resource(settings: Any, environ: Any) -> Resource:
    """The resource of this process's spans and metrics.

    Args:
        settings: The resolved settings (rank, role, experiment and trial names).
        environ: The environment; ``OTEL_SERVICE_NAME`` or a ``service.name`` in
            ``OTEL_RESOURCE_ATTRIBUTES`` replaces the default service name.
    """
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
