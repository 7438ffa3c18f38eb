"""``python -m otel_rl._internal.export.child``: the exporter process's entry point.

Kept apart from :mod:`.exporter_process`, which the package imports, so that
running it with ``-m`` does not import the module twice.
"""

import sys

from .process import main

if __name__ == "__main__":
    sys.exit(main())
