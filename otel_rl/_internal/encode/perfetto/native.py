"""The compiled twin of :class:`~.encoder.PerfettoEncoder`, when it was built.

``_native`` (``_native.c``, an optional extension: a machine without a C
compiler installs otel_rl without it) reads Chrome trace JSON text and writes
the same packet bytes as the Python encoder given the same events in the same
calls, many times faster. Input it does not mirror exactly (an integer beyond
64 bits, a repeated key, a list where a name should be) raises
:class:`Unsupported`; the converter then encodes everything again with the
Python encoder (:meth:`~otel_rl.convert.perfetto_output.PerfettoOutput.restart`).
"""

from __future__ import annotations

from typing import Any

try:
    from . import _native
except ImportError:  # built without a C compiler: the Python encoder does it all
    _native = None  # type: ignore[assignment]

__all__ = ["Unsupported", "compiled_encoder"]


class _NeverRaised(Exception):
    """Stands for ``_native.Unsupported`` where the extension is missing."""


#: Raised by the compiled encoder for input it does not mirror exactly.
Unsupported: type[Exception] = getattr(_native, "Unsupported", _NeverRaised)


def compiled_encoder(sequence_id: int, uuid_salt: int) -> Any:
    """A compiled encoder of the packet sequence ``sequence_id``, or ``None`` without the extension."""
    if _native is None:
        return None
    return _native.NativeEncoder(sequence_id=sequence_id, uuid_salt=uuid_salt)
