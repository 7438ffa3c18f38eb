"""The ``otel-rl`` command itself: version, usage, mistyped subcommands."""

from __future__ import annotations

import subprocess
import sys

from support import clean_env

import otel_rl


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_rl", *args], capture_output=True, text=True,
                          timeout=60, env=clean_env())


def test_version_prints_the_package_version():
    result = _run("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"otel-rl {otel_rl.__version__}")


def test_a_mistyped_subcommand_is_named_with_a_suggestion_and_the_list():
    result = _run("conver", "run")
    assert result.returncode == 2
    assert "unknown command 'conver' (did you mean 'convert'?)" in result.stderr
    assert all(name in result.stderr for name in ("convert", "report", "demo"))


def test_help_lists_the_subcommands_and_exits_zero():
    result = _run("--help")
    assert result.returncode == 0 and "unknown command" not in result.stderr
    assert all(name in result.stderr for name in ("convert", "report", "demo"))
