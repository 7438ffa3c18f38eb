"""Optional compiled accelerators; every one has a pure-Python twin that gives the same bytes.

``optional=True``: a machine without a C compiler still installs otel_rl and runs the
Python paths (the modules' importers fall back when the extension is missing).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # Floats combined exactly as Python combines them (no fused multiply-add), in every one.
        Extension(
            "otel_rl._internal.encode.perfetto._native",
            sources=["otel_rl/_internal/encode/perfetto/_native.c"],
            extra_compile_args=["-ffp-contract=off"],
            optional=True,
        ),
        Extension(
            "otel_rl._internal.read._facts_native",
            sources=["otel_rl/_internal/read/_facts_native.c"],
            depends=["otel_rl/_internal/read/_facts_scan.h"],
            extra_compile_args=["-ffp-contract=off"],
            optional=True,
        ),
        Extension(
            "otel_rl._internal.encode._chrome_lines",
            sources=["otel_rl/_internal/encode/_chrome_lines.c"],
            depends=["otel_rl/_internal/_cext.h"],
            extra_compile_args=["-ffp-contract=off"],
            optional=True,
        ),
        Extension(
            "otel_rl._internal.export._record_sink",
            sources=["otel_rl/_internal/export/_record_sink.c"],
            depends=["otel_rl/_internal/_cext.h"],
            optional=True,
        ),
        Extension(
            "otel_rl._internal.export._session_processor",
            sources=["otel_rl/_internal/export/_session_processor.c"],
            depends=["otel_rl/_internal/_cext.h"],
            optional=True,
        ),
        Extension(
            "otel_rl._internal.export._wire",
            sources=["otel_rl/_internal/export/_wire.c"],
            depends=["otel_rl/_internal/_cext.h"],
            optional=True,
        ),
        Extension(
            "otel_rl._internal.encode._otlp",
            sources=["otel_rl/_internal/encode/_otlp.c"],
            depends=["otel_rl/_internal/_cext.h"],
            optional=True,
        ),
        Extension(
            "otel_rl._internal.encode._chrome_place",
            sources=["otel_rl/_internal/encode/_chrome_place.c"],
            depends=["otel_rl/_internal/_cext.h"],
            extra_compile_args=["-ffp-contract=off"],
            optional=True,
        ),
    ],
)
