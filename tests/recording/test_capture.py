"""The ``capture`` fixture itself: it patches every id and clock source of the
recording path, so the whole-span comparisons of the suite stay deterministic."""

from __future__ import annotations

import importlib
import pkgutil
import random
import time

import otel_rl
from support.capture import CLOCKS, ID_SOURCES, S, span_hex

#: Module-level bindings of ``time.time_ns`` / ``random.getrandbits`` that are
#: read off the test's thread, or never for a span: not the fixture's business.
NOT_RECORDING: set[str] = set()


def _modules():
    yield otel_rl
    for info in pkgutil.walk_packages(otel_rl.__path__, "otel_rl."):
        if ".demo" in info.name or info.name.endswith("__main__"):
            continue
        yield importlib.import_module(info.name)


def test_every_id_and_clock_source_bound_in_a_module_is_patched():
    # A module that binds the function (``from time import time_ns``) reads it
    # through its own attribute: that attribute is what the fixture must replace.
    found = {f"{module.__name__}.{name}" for module in _modules() for name, value in vars(module).items()
             if value is time.time_ns or value is random.getrandbits}
    assert found - NOT_RECORDING == set(ID_SOURCES) | set(CLOCKS)


def test_the_trace_file_is_deterministic_too(capture):
    with otel_rl.trace_scope("outer", args={"step": 1}):
        with otel_rl.trace_scope("inner"):
            pass
    common = {"pid": 1, "tid": 1}
    assert capture.records() == [  # in the order the spans end; a root's trace id is its span id
        {"ph": "X", "name": "inner", "ts": 2e6, "dur": 1e6, **common,
         "args": {"trace": span_hex(1), "id": span_hex(2), "parent": span_hex(1)}},
        {"ph": "X", "name": "outer", "ts": 1e6, "dur": 3e6, **common,
         "args": {"step": 1, "id": span_hex(1)}},
    ]
    assert capture.clock() == 5 * S  # four reads so far
