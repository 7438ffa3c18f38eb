"""The ``otel-rl`` command: ``convert`` (to Perfetto), ``report`` (analysis) and ``demo``."""

from __future__ import annotations

import difflib
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``otel-rl``; dispatches to a subcommand."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {
        "convert": "merge trace files (per-rank JSONL, OTLP/JSON, Chrome JSON) into one Perfetto JSON",
        "report": "timelines, phase / stage / hop breakdowns, timer trees, long tail (table, json, html)",
        "demo": "run a small traced asynchronous GRPO training (trainer + rollout workers) and leave its files on disk",
    }
    if argv and argv[0] in ("-V", "--version"):
        from . import __version__

        sys.stdout.write(f"otel-rl {__version__}\n")
        return 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        if argv and argv[0] not in ("-h", "--help"):
            close = difflib.get_close_matches(argv[0], commands, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            sys.stderr.write(f"otel-rl: unknown command {argv[0]!r}{hint}\n")
        sys.stderr.write("usage: otel-rl [--version] {" + ",".join(commands) + "} ...\n\n")
        for name, text in commands.items():
            sys.stderr.write(f"  {name:<8} {text}\n")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    command, rest = argv[0], argv[1:]
    if command == "convert":
        from .convert import main as convert_main

        return convert_main(rest)
    if command == "report":
        from .report.cli import main as report_main

        return report_main(rest)
    from .demo import main as demo_main

    return demo_main(rest)


if __name__ == "__main__":
    sys.exit(main())
