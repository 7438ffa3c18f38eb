"""Spans over bodies that run in pieces: generators and async generators.

A generator's span stays open from its first item to its end, but must be the
current span only while the generator's own body runs: between items the
consumer runs, and a span left current there would adopt the consumer's work.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as context_api
from opentelemetry.trace.propagation import _SPAN_KEY

from .spans import LeanSpan, attach, detach, get_current, record_error

_Context = context_api.Context


class ResumedSpan:
    """``with ResumedSpan(span):`` around each resumption of a generator body.

    Makes ``span`` current only while the body runs, so a suspended generator
    never leaks its span into the consumer's context.
    """

    __slots__ = ("span", "token")

    def __init__(self, span: LeanSpan) -> None:
        self.span = span

    def __enter__(self) -> None:
        values = dict(get_current())
        values[_SPAN_KEY] = self.span
        self.token = attach(_Context(values))

    def __exit__(self, *exc: Any) -> None:
        detach(self.token)


def record_failure(span: LeanSpan, exc: BaseException) -> None:
    """Records ``exc`` on ``span``, unless it is the ``GeneratorExit`` of a generator closed early.

    Args:
        span: The generator's span.
        exc: What ended the generator.
    """
    if isinstance(exc, GeneratorExit):
        return
    record_error(span, exc)
