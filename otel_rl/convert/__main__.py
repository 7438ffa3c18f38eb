"""``python -m otel_rl.convert``: see :mod:`otel_rl.convert.cli`."""

import sys

from .cli import main

sys.exit(main())
