"""A small asynchronous GRPO run on the CPU, traced with otel_rl: ``python -m otel_rl.demo``.

A GRU policy (a few layers, made in code, warmed up on a second of
supervised data) learns arithmetic with a calculator tool. The trainer's
rollout controller submits generated tasks (``23+45=``) to rollout worker
processes; each worker rolls out ``--samples`` sessions per task
concurrently with asyncio, through a batching inference engine: generate,
maybe call the calculator and generate the answer, get a rule-based reward.
The trainer rejects stale, truncated and zero-advantage samples, takes a
PPO-clipped policy-gradient step on the rest and sends the new weights to
the workers. Every process writes its own trace and session files; at the end
the merged Perfetto trace (``trace.json``, and ``trace.pftrace`` in Perfetto's
native format beside it) and the report (``report.html``, or
``report.txt`` without plotly) are written to the run directory, and a summary
is printed.

Needs torch (``pip install torch==2.13.0`` for the CPU build, or
``pip install 'otel_rl[demo]'``); ``import otel_rl`` never imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any

import otel_rl

_LIMITS = {"tasks": (1, 512), "samples": (1, 64), "steps": (1, 1000), "workers": (1, 16),
           "ahead": (0, 16), "max_staleness": (0, 16)}


def _bounded(name: str) -> Any:
    low, high = _LIMITS[name]

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    parse.__name__ = name  # argparse names the type in its messages
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The demo's command-line flags."""
    parser = argparse.ArgumentParser(
        prog="otel-rl demo",
        description="A small asynchronous GRPO run on the CPU, traced with otel_rl: a trainer process "
                    "and rollout worker processes, sessions with tool calls, files for Perfetto.")
    parser.add_argument("--tasks", type=_bounded("tasks"), default=8,
                        help="tasks (GRPO groups) per training step (default %(default)s)")
    parser.add_argument("--samples", type=_bounded("samples"), default=4,
                        help="sessions sampled per task (default %(default)s)")
    parser.add_argument("--steps", type=_bounded("steps"), default=5, help="training steps (default %(default)s)")
    parser.add_argument("--workers", type=_bounded("workers"), default=2,
                        help="rollout worker processes (default %(default)s)")
    parser.add_argument("--ahead", type=_bounded("ahead"), default=1,
                        help="steps the rollout controller may run ahead of training (default %(default)s)")
    parser.add_argument("--max-staleness", type=_bounded("max_staleness"), default=1,
                        help="policy versions a sample may lag the trained policy before it is "
                             "rejected (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the dataset, the model and sampling (default %(default)s)")
    parser.add_argument("--dir", default=os.environ.get("OTEL_RL_DIR") or "otel_rl_runs",
                        help="root directory of runs; files go to DIR/demo/TRIAL (default OTEL_RL_DIR, "
                             "else otel_rl_runs)")
    parser.add_argument("--trial", default=None,
                        help="trial name (default run-YYYYmmdd-HHMMSS, so runs never mix)")
    return parser


def _fresh_trial(fileroot: str) -> str:
    base = time.strftime("run-%Y%m%d-%H%M%S")
    trial, n = base, 1
    while os.path.exists(os.path.join(fileroot, "demo", trial)):
        n += 1
        trial = f"{base}-{n}"
    return trial


def _writable_run_dir(path: str) -> str | None:
    """Creates ``path``; returns why it cannot be written, or ``None``."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    """Runs the demo (see ``--help``); returns the process exit code.

    Args:
        argv: Command-line arguments without the program name; ``sys.argv[1:]`` when omitted.

    Returns:
        0 on success, 1 when the run failed, 2 for bad usage (flags, output directory),
        130 when interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        sys.stderr.write(
            f"otel-rl demo: the demo needs torch and numpy ({exc.name} is missing).\n"
            "  install the CPU build:  pip install torch==2.13.0 numpy\n"
            "  or the extra:           pip install 'otel_rl[demo]'\n")
        return 1
    from rich.console import Console

    from .summary import otlp_endpoint, print_summary, write_views
    from .trainer import DemoConfig, DemoError

    err = Console(stderr=True, highlight=False)
    fileroot = os.path.abspath(args.dir)
    trial = args.trial or _fresh_trial(fileroot)
    run_dir = os.path.join(fileroot, "demo", trial)
    problem = _writable_run_dir(run_dir)
    if problem:
        err.print(f"otel-rl demo: cannot write run files to {run_dir}: {problem} (pick another --dir)",
                  markup=False, soft_wrap=True)
        return 2
    config = DemoConfig(tasks=args.tasks, samples=args.samples, steps=args.steps, workers=args.workers,
                        seed=args.seed, ahead=args.ahead, max_staleness=args.max_staleness,
                        fileroot=fileroot, trial=trial)
    started = time.perf_counter()
    # Worker processes are spawned with this environment, so an OTLP endpoint set
    # here reaches every rank.
    try:
        otel_rl.configure(fileroot=fileroot, experiment_name="demo", trial_name=trial, rank=0, role="trainer")
    except otel_rl.ConfigError as exc:  # a bad OTEL_RL_* / OTEL_* variable: the message names it
        err.print(f"otel-rl demo: {exc}", markup=False, soft_wrap=True)
        with contextlib.suppress(OSError):
            os.rmdir(run_dir)  # only if still empty: nothing ran
        return 2
    if otlp_endpoint():
        err.print(f"exporting over OTLP to {otlp_endpoint()} as well as to files", markup=False, soft_wrap=True)
    try:
        result = _run_with_progress(err, config)
    except DemoError as exc:
        err.print(f"otel-rl demo: {exc}", markup=False, soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        err.print("otel-rl demo: interrupted; files written so far are in " + run_dir, markup=False, soft_wrap=True)
        return 130
    finally:
        otel_rl.shutdown()
    diagnostics = otel_rl.diagnostics()
    with err.status("merging the trace and writing the report"):
        views = write_views(run_dir)
        native = _write_native_trace(run_dir, views)
    out = Console(highlight=False)
    print_summary(out, run_dir, result, time.perf_counter() - started, diagnostics, views)
    if native:
        out.print(f"the same trace in Perfetto's native format (a row per session, counter tracks, "
                  f"several times smaller): {native}", markup=False, soft_wrap=True)
    return 0


def _write_native_trace(run_dir: str, views: dict[str, Any]) -> str | None:
    """Leaves ``trace.pftrace`` beside ``trace.json``; returns its path (``None`` if not written)."""
    from .._internal import keys
    from ..convert import convert

    path = os.path.join(run_dir, keys.MERGED_PERFETTO_FILE)
    try:
        convert([run_dir], path, fmt="perfetto")
    except Exception as exc:  # noqa: BLE001 - the run's own files are there regardless
        views["problems"].append(f"the native Perfetto trace was not written: {exc}")
        return None
    return path


def _run_with_progress(console: Any, config: Any) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .trainer import Trainer

    columns = (TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[info]}"), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        sessions = progress.add_task("rollout sessions", total=config.steps * config.tasks * config.samples,
                                     info=f"{config.workers} workers")
        steps = progress.add_task("training steps", total=config.steps, info="warm-up, starting workers")

        def on_progress(kind: str, n: int, info: str) -> None:
            task = sessions if kind == "sessions" else steps
            progress.update(task, advance=n, **({"info": info} if info else {}))

        return Trainer(config, on_progress).run()

