"""Where the repository and the test suite are, for tests that read files or run scripts."""

from __future__ import annotations

from pathlib import Path

#: The ``tests/`` folder (the suite's import root: ``support``, ``receivers``, ``waiting``).
TESTS = Path(__file__).resolve().parent.parent
#: The repository root (``otel_rl/``, ``docs/``, ``bench/``, ``README.md``).
ROOT = TESTS.parent
