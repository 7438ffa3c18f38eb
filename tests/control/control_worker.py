"""One process of a job, for tests/test_control.py: configures otel_rl from the
environment (live control on by default), says ``ready``, then emits a request
event every 20 ms - a no-op until a broadcast starts the recorder - until its
standard input is closed.

Usage: ``python control_worker.py STAGE``.
"""

import sys
import threading

import otel_rl
from otel_rl import events


def main() -> int:
    stage = sys.argv[1]
    otel_rl.configure(export_process=False)
    print("ready", flush=True)
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    n = 0
    while not closed.wait(0.02):
        events.emit("worker_tick", request_id=f"{stage}-{n}", stage=stage)
        n += 1
    otel_rl.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
