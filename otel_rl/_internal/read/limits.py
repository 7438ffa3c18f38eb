"""What one input file may cost to read (:class:`InputLimits`), and the options that set it.

Both ``otel-rl convert`` and ``otel-rl report`` read through these bounds:
a JSON line over ``--max-line-mb`` is skipped, a ``.gz`` input is read only
until it expands past ``--max-gzip-ratio`` times its size; both are reported.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["DEFAULT_LIMITS", "DEFAULT_MAX_GZIP_RATIO", "DEFAULT_MAX_LINE_BYTES", "DEFAULT_MIN_GZIP_BYTES",
           "InputLimitError", "InputLimits", "add_limit_options", "limits_from_args", "long_line_message", "mib"]

#: A line longer than this is skipped and reported (``--max-line-mb``): a JSON
#: line is parsed whole, so its length is what reading it costs in memory.
DEFAULT_MAX_LINE_BYTES = 64 << 20
#: A ``.gz`` input stops being read once it has expanded past this many times its
#: compressed size (``--max-gzip-ratio``). Trace JSON compresses 5-20 times; a
#: run of one repeated byte compresses about 1,000 times.
DEFAULT_MAX_GZIP_RATIO = 100.0
#: ... but never before this many bytes: small archives of repetitive text stay readable.
DEFAULT_MIN_GZIP_BYTES = 64 << 20


@dataclass(frozen=True)
class InputLimits:
    """What one input file may cost to read: bounds against damaged or hostile files.

    What goes past a bound is skipped and reported, never read into memory:
    a line longer than ``max_line_bytes`` is skipped (the lines after it are
    read); a gzipped input is read only until it has expanded past
    ``max_gzip_ratio`` times its compressed size (and at least
    ``min_gzip_bytes``), the rest of it left unread - a gzipped JSON document,
    parsed whole, is then skipped.

    Attributes:
        max_line_bytes: The longest JSON line read (``--max-line-mb``).
        max_gzip_ratio: Decompressed bytes per compressed byte a ``.gz`` input
            may reach (``--max-gzip-ratio``); 0 for no bound.
        min_gzip_bytes: Decompressed bytes every ``.gz`` input may reach, whatever its ratio.
    """

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_gzip_ratio: float = DEFAULT_MAX_GZIP_RATIO
    min_gzip_bytes: int = DEFAULT_MIN_GZIP_BYTES

    def __post_init__(self) -> None:
        if self.max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be at least 1, not {self.max_line_bytes}")
        if not self.max_gzip_ratio >= 0:
            raise ValueError(f"max_gzip_ratio must be 0 (no bound) or more, not {self.max_gzip_ratio}")

    def gzip_bound(self, compressed_bytes: int) -> int | None:
        """Decompressed bytes a ``.gz`` file of ``compressed_bytes`` may yield (``None``: no bound)."""
        if not self.max_gzip_ratio:
            return None
        return max(self.min_gzip_bytes, int(self.max_gzip_ratio * compressed_bytes))


#: The bounds used when a reader is given none.
DEFAULT_LIMITS = InputLimits()


class InputLimitError(ValueError):
    """An input needs to be read whole (a JSON document) but is over a bound of :class:`InputLimits`."""


def mib(n: float) -> str:
    """A size for a message: ``"64 MiB"``, or ``"900 bytes"`` below one MiB."""
    return f"{n / (1 << 20):,.0f} MiB" if n >= 1 << 20 else f"{n:,.0f} bytes"


def long_line_message(length: int, limits: InputLimits) -> str:
    """Why a line of ``length`` bytes was skipped."""
    return f"line of {length:,} bytes, over the bound of {mib(limits.max_line_bytes)} (--max-line-mb)"


def _mib_arg(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value * (1 << 20) > 1 << 62:
        raise argparse.ArgumentTypeError(f"not a positive size in MiB: {text!r}")
    return max(1, int(value * (1 << 20)))


def _ratio_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"not a ratio of 0 (no bound) or more: {text!r}")
    return value


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """Adds ``--max-line-mb`` and ``--max-gzip-ratio`` (:class:`InputLimits`) to a command line."""
    parser.add_argument("--max-line-mb", type=_mib_arg, default=DEFAULT_MAX_LINE_BYTES, metavar="MB",
                        dest="max_line_bytes",
                        help="skip (and report) JSON lines longer than this many MiB "
                             f"(default {DEFAULT_MAX_LINE_BYTES >> 20})")
    parser.add_argument("--max-gzip-ratio", type=_ratio_arg, default=DEFAULT_MAX_GZIP_RATIO, metavar="X",
                        help="stop reading a .gz input (and report it) once it has expanded past X times "
                             f"its compressed size and {DEFAULT_MIN_GZIP_BYTES >> 20} MiB: a decompression "
                             f"bomb; 0 for no bound (default {DEFAULT_MAX_GZIP_RATIO:g})")


def limits_from_args(args: argparse.Namespace) -> InputLimits:
    """The :class:`InputLimits` of options added by :func:`add_limit_options`."""
    return InputLimits(max_line_bytes=args.max_line_bytes, max_gzip_ratio=args.max_gzip_ratio)
