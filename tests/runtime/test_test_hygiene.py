"""The suite's own guard: a test that leaves an unexpected ``internal_error`` or ``unknown_*``
diagnostic fails, unless it declares the kind it provokes."""

from __future__ import annotations

import os

from support.paths import TESTS

pytest_plugins = ["pytester"]

INNER = '''
import pytest

import otel_rl


def provoke(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), export_process=False)
    otel_rl.trace_session_event("mark_finalized", session_id=424242, status="accepted")
    otel_rl.reset()  # clears otel_rl.diagnostics(): the guard must still see the count


def test_undeclared(tmp_path):
    provoke(tmp_path)


@pytest.mark.expect_diagnostics("unknown_session")
def test_declared(tmp_path):
    provoke(tmp_path)


@pytest.mark.expect_diagnostics("unknown_status")
def test_declared_another_kind(tmp_path):
    provoke(tmp_path)


def test_quiet(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), export_process=False)
    with otel_rl.trace_scope("fine"):
        pass
'''


def test_an_undeclared_unknown_kind_fails_the_test_and_a_declared_one_does_not(pytester, monkeypatch):
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    # The conftest imports the receivers and span helpers.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(test_inner=INNER)

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")

    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_undeclared*",
                                 "*unexpected otel_rl diagnostics*", "*unknown_session: *424242*",
                                 "*ERROR at teardown of test_declared_another_kind*"])
