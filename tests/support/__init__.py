"""Helpers shared by the test modules: fresh processes with a clean environment,
readers of the files a run writes, a factory of SDK spans, OTLP receiver wiring
and the deterministic ``capture`` fixture (:mod:`support.capture`).

Import what you need from here (``from support import clean_env, read_trace``);
the submodules are small and named for what they hold.
"""

from .files import read_json, read_jsonl, read_sessions, read_trace, slices, slice_names
from .otlp import PROTOCOLS, export_to, receiver_for, unreachable_endpoint
from .processes import clean_env, run_python, scrub_environ, start_python
from .spans import T0_NS, SpanFactory, as_dict, by_name, make_span, one, without_thread

__all__ = [
    "PROTOCOLS", "SpanFactory", "T0_NS", "as_dict", "by_name", "clean_env", "export_to", "make_span",
    "one", "read_json", "read_jsonl", "read_sessions", "read_trace", "receiver_for", "run_python",
    "scrub_environ", "slice_names", "slices", "start_python", "unreachable_endpoint", "without_thread",
]
