"""Which files a list of inputs (files, directories, glob patterns) names."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from typing import Any

from ..keys import MERGED_TRACE_FILE

__all__ = ["TRACE_SUFFIXES", "discover_inputs", "natural_key"]

#: Names a directory search reads: JSON lines and JSON documents, optionally gzipped.
TRACE_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")
# The demo's merged trace repeats every rank's events: read it only when named.
_MERGED_NAMES = (MERGED_TRACE_FILE, MERGED_TRACE_FILE + ".gz")


def natural_key(path: str) -> list[Any]:
    """Sorts ``traces-r2`` before ``traces-r10``: the first file to use a pid keeps it."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def discover_inputs(inputs: Sequence[str], exclude: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """Expands files, directories (recursively) and glob patterns into input files.

    Args:
        inputs: Paths, directories or glob patterns.
        exclude: Paths never to read (the output being written).

    Returns:
        ``(files, missing)``: the files found, naturally sorted and without
        duplicates, and the inputs that matched nothing.
    """
    skip = {os.path.realpath(p) for p in exclude}
    found: list[str] = []
    seen: set[str] = set()
    missing: list[str] = []

    def add(path: str) -> None:
        real = os.path.realpath(path)
        if real not in seen and real not in skip:
            seen.add(real)
            found.append(path)

    def add_dir(directory: str) -> None:
        names = []
        for root, dirs, files in os.walk(directory):
            dirs.sort()
            names.extend(os.path.join(root, n) for n in files
                         if n.endswith(TRACE_SUFFIXES) and n not in _MERGED_NAMES)
        for name in sorted(names, key=natural_key):
            add(name)

    for item in inputs:
        if os.path.isdir(item):
            add_dir(item)
        elif os.path.isfile(item):
            add(item)
        elif glob.has_magic(item):
            matches = sorted(glob.glob(item, recursive=True), key=natural_key)
            if not matches:
                missing.append(item)
            for match in matches:
                if os.path.isdir(match):
                    add_dir(match)
                elif os.path.isfile(match):
                    add(match)
        else:
            missing.append(item)
    return found, missing
