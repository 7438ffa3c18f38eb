"""Python snippets in fresh processes, with the environment of whoever runs the
tests scrubbed: an ``OTEL_*`` or ``RANK`` variable of the developer's shell, or a
``TRACEPARENT`` of a CI job, must not change what a test sees."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence

import pytest

#: Variables otel_rl (or the OpenTelemetry SDK, or the demo's console output)
#: reads, by prefix. The suite sets the ones a test needs explicitly.
SCRUBBED_PREFIXES = ("OTEL_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "AREAL_PERF_TRACER_",
                     "TRACEPARENT", "TRACESTATE", "BAGGAGE", "FORCE_COLOR")


def clean_env(extra: Mapping[str, str | None] | None = None, *, drop: Sequence[str] = (),
              **variables: str | None) -> dict[str, str]:
    """A copy of ``os.environ`` without the scrubbed variables, plus the given ones.

    Args:
        extra: Variables to set, as a mapping (for names that are not identifiers).
        drop: More prefixes to scrub, for this call only.
        **variables: Variables to set; ``None`` removes one (even an unscrubbed one).

    Returns:
        The environment for ``subprocess``.
    """
    prefixes = SCRUBBED_PREFIXES + tuple(drop)
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    for name, value in {**(extra or {}), **variables}.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
    return env


def scrub_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same scrubbing, of this process's environment, undone after the test."""
    for name in list(os.environ):
        if name.startswith(SCRUBBED_PREFIXES):
            monkeypatch.delenv(name, raising=False)


def _command(code: str, args: Sequence[str]) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), *map(str, args)]


def run_python(code: str, env: Mapping[str, str | None] | None = None, *args: str, timeout: float = 60,
               **kwargs) -> subprocess.CompletedProcess:
    """Runs ``code`` (dedented) in a fresh interpreter and waits for it.

    Args:
        code: The program (``python -c``).
        env: Variables on top of :func:`clean_env` (``None`` removes one).
        *args: Its ``sys.argv[1:]``.
        timeout: Seconds; generous, only a hang reaches it.
        **kwargs: More ``subprocess.run`` arguments (``cwd``, ``check``, ...).

    Returns:
        The finished process, its output captured as text.
    """
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(_command(code, args), env=clean_env(env), timeout=timeout, **kwargs)


def start_python(code: str, env: Mapping[str, str | None] | None = None, *args: str,
                 **kwargs) -> subprocess.Popen:
    """Starts ``code`` (dedented) like :func:`run_python` without waiting: pipes for
    stdout and stderr, text mode, its own session (a signal to it reaches no one else)."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("text", True)
    kwargs.setdefault("start_new_session", True)
    return subprocess.Popen(_command(code, args), env=clean_env(env), **kwargs)
