"""``python -m otel_rl convert | report | demo``: the ``otel-rl`` command without the venv on PATH."""

import sys

from .cli import main

sys.exit(main())
