"""Optional compiled accelerators; every one has a pure-Python twin that gives the same bytes.

``optional=True``: a machine without a C compiler still installs otel_rl and runs the
Python paths (the modules' importers fall back when the extension is missing).
"""

from setuptools import Extension, setup

_SHARED = "otel_rl/_internal/_cext.h"  # the byte buffer and configure() readers most of them share
_JSON = "otel_rl/_internal/_json.h"  # JSON values as orjson writes them
_LINES = "otel_rl/_internal/encode/_chrome_lines.h"  # the line writer the placement module calls


def twin(module: str, *headers: str) -> Extension:
    """The compiled twin ``otel_rl.<module>``, built from ``otel_rl/<module as a path>.c``."""
    return Extension(
        f"otel_rl.{module}",
        sources=[f"otel_rl/{module.replace('.', '/')}.c"],
        depends=list(headers),
        # Floats combined exactly as Python combines them (no fused multiply-add).
        extra_compile_args=["-ffp-contract=off"],
        optional=True,
    )


setup(
    ext_modules=[
        twin("_internal.encode.perfetto._native"),
        twin("_internal.read._facts_native", "otel_rl/_internal/read/_facts_scan.h"),
        twin("_internal.encode._chrome_lines", _SHARED, _JSON, _LINES),
        twin("_internal.encode._chrome_place", _SHARED, _LINES),
        twin("_internal.encode._otlp", _SHARED),
        twin("_internal.export._record_sink", _SHARED),
        twin("_internal.export._session_processor", _SHARED, _JSON),
        twin("_internal.export._wire", _SHARED),
        twin("_internal.recording._tracking", _SHARED),
        # Not a twin: without it, SIGTERM is handled by a Python handler (see exit_hooks.py).
        twin("_internal.runtime._signals"),
    ],
)
