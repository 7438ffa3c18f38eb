"""Hostile input files for the converter and the report: built fast, measured in a fresh process."""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson


def gzip_bomb(path: Path, line_mib: int = 256, before: Sequence[dict] = (), after: Sequence[dict] = ()) -> Path:
    """A .gz of about ``line_mib`` KiB holding one line of ``line_mib`` MiB between good events.

    Built from gzip members (a gzip file may be several, concatenated), each one
    MiB of the line compressed once: a quarter-megabyte file in milliseconds.
    """
    member = gzip.compress(b"a" * (1 << 20), compresslevel=9)
    parts = [gzip.compress(b"".join(orjson.dumps(e) + b"\n" for e in before) + b'{"ph":"X","name":"')]
    parts += [member] * line_mib
    parts.append(gzip.compress(b'","ts":1,"dur":1,"pid":1,"tid":1}\n'
                               + b"".join(orjson.dumps(e) + b"\n" for e in after)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(parts))
    return path


def run_measured(module: str, args: list[str]) -> tuple[int, float, str]:
    """Runs ``module``'s ``main(args)`` in a fresh interpreter: (exit status, peak RSS in MiB, stderr)."""
    # VmHWM is this process image's own peak: ru_maxrss can carry the peak of the
    # (large, after many tests) process it was forked from across exec.
    code = ("import resource, sys\n"
            f"from {module} import main\n"
            "rc = main(sys.argv[1:])\n"
            "try:\n"
            "    peak = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
            "except (OSError, StopIteration):\n"
            "    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "sys.stderr.write('peak_kib=%d\\n' % peak)\n"
            "sys.exit(rc)\n")
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    peak = [line for line in result.stderr.splitlines() if line.startswith("peak_kib=")]
    assert peak, result.stderr
    return result.returncode, int(peak[0].split("=")[1]) / 1024, result.stderr
