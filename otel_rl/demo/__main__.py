"""``python -m otel_rl.demo``."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
