"""``python -m otel_rl.report``: the same as ``otel-rl report``."""

import sys

from .cli import main

sys.exit(main())
