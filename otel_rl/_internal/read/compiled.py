"""The compiled twin of the session-facts loop (``_facts_native.c``), where otel_rl was built with a C compiler.

``facts_native`` is ``None`` where the extension was not built (setup.py builds it as
optional): every caller then takes the Python path, which gives the same facts to the last digit.
"""

from __future__ import annotations

from array import array

try:
    from . import _facts_native as facts_native
except ImportError:  # built without a C compiler
    facts_native = None

__all__ = ["facts_native", "merged_runs", "powers_of_five"]


def merged_runs(runs: list[bytes]) -> array:
    """Sorted runs of floats (packed as ``array("d")`` bytes, as :meth:`FactsBuilder.result`
    keeps them) merged into one sorted ``array("d")``: the order ``list.sort`` gives them laid
    end to end."""
    out = array("d")
    if facts_native is not None:
        out.frombytes(facts_native.merge_runs(runs))
        return out
    values: list[float] = []
    for raw in runs:
        out.frombytes(raw)
        values += out
        del out[:]
    values.sort()  # sorted runs: a merge
    out.extend(values)
    return out


def powers_of_five(low: int = -342, high: int = 308) -> bytes:
    """5^q for q in [low, high] as 128 bits each (high then low 64-bit word, native order): the
    table of the Eisel-Lemire float parsing algorithm (Lemire, "Number Parsing at a Gigabyte per
    Second", 2021) that the compiled loop reads JSON floats with, computed here exactly with
    Python's ints rather than written out: truncated to 128 bits for q >= 0, for q < 0 the
    reciprocal 2^b / 5^-q rounded up (b chosen so it has 128 bits; past 5^27, computed wider
    then truncated)."""
    out = array("Q")
    for q in range(low, high + 1):
        if q >= 0:
            c = 5**q
            while c < 1 << 127:
                c <<= 1
            while c >= 1 << 128:
                c >>= 1
        else:
            p = 5**-q
            z = p.bit_length()
            c = (1 << (z + 127 if q >= -27 else 2 * z + 128)) // p + 1
            while c >= 1 << 128:
                c >>= 1
        out.append(c >> 64)
        out.append(c & 0xFFFF_FFFF_FFFF_FFFF)
    return out.tobytes()
