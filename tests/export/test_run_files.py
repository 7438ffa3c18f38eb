"""Run files that change under a running job: a run directory deleted or a file rotated
while it is written (detected, re-created, what was lost counted), and run files or
directories planted by someone else (symlinks, foreign owners: refused, with a message
naming the problem). Every check reads back what is on disk."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from opentelemetry.sdk.trace import TracerProvider
from support import read_trace, slices

import otel_rl
from otel_rl._internal import files, guard, keys
from otel_rl._internal.export.jsonl import JsonlAppender

FOREIGN_UID = 54321
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="making a directory owned by another user needs root")


@pytest.fixture(autouse=True)
def _fresh_counters():
    guard.clear()
    yield
    guard.clear()


def _configure(tmp_path, **kw):
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="e", trial_name="t",
                      tracer_provider=TracerProvider(shutdown_on_exit=False), **kw)
    return otel_rl.settings()


def _scopes(n, name):
    for i in range(n):
        with otel_rl.trace_scope(name, args={"i": i}):
            pass


# --- a run directory deleted, a file rotated, while the job writes -----------------------------
@pytest.mark.parametrize("export_process", [True, False])
def test_a_deleted_run_directory_is_recreated_and_what_it_held_is_counted_as_lost(tmp_path,
                                                                               export_process):
    settings = _configure(tmp_path, export_process=export_process)
    _scopes(20, "before")
    otel_rl.save(force=True)
    traces = settings.file_path(keys.TRACES_FILE)
    assert len(slices(read_trace(traces), "before")) == 20
    shutil.rmtree(settings.run_dir)
    _scopes(30, "after")
    otel_rl.shutdown()
    summary = otel_rl.run_summary()
    # The later spans are on disk, in a file re-created where the old one was ...
    assert len(slices(read_trace(traces), "after")) == 30
    assert slices(read_trace(traces), "before") == []
    with open(settings.file_path(keys.SUMMARY_FILE)) as f:
        assert json.load(f)["complete"] is False
    # ... and the lines that went with the deleted file are counted, not reported complete.
    assert summary["complete"] is False
    assert summary["problems"]["run_file_deleted"] >= 1
    assert summary["records_lost"] >= 20


def test_a_run_directory_deleted_after_the_last_write_is_counted_at_shutdown(tmp_path):
    settings = _configure(tmp_path, export_process=False, session_tracer=False)
    _scopes(5, "before")
    otel_rl.save(force=True)
    shutil.rmtree(settings.run_dir)
    otel_rl.shutdown()
    summary = otel_rl.run_summary()
    assert summary["complete"] is False and summary["records_lost"] >= 5
    assert summary["problems"]["run_file_deleted"] >= 1


@pytest.mark.parametrize("export_process", [True, False])
def test_a_rotated_trace_file_keeps_its_lines_and_later_lines_go_to_a_new_file(tmp_path, export_process):
    settings = _configure(tmp_path, export_process=export_process)
    _scopes(10, "before")
    otel_rl.save(force=True)
    traces = settings.file_path(keys.TRACES_FILE)
    os.rename(traces, traces + ".1")
    _scopes(15, "after")
    otel_rl.shutdown()
    summary = otel_rl.run_summary()
    assert len(slices(read_trace(traces + ".1"), "before")) == 10
    assert len(slices(read_trace(traces), "after")) == 15 and slices(read_trace(traces), "before") == []
    # Nothing was lost: rotation is reported once, not counted as a loss.
    assert summary["problems"]["run_file_moved"] >= 1
    assert summary["records_lost"] == 0 and summary["complete"] is True


def test_a_jsonl_file_deleted_between_writes_is_recreated_and_its_lines_counted(tmp_path):
    path = str(tmp_path / "run" / "stats-r0.jsonl")
    out = JsonlAppender(path, kind="stats")
    for i in range(3):
        out.add({"i": i})
    os.unlink(path)
    out.add({"i": 3})
    out.close()
    with open(path) as f:
        assert [json.loads(line)["i"] for line in f] == [3]
    problems = otel_rl.diagnostics()
    assert problems["deleted_file_lines_lost"] == 3 and problems["run_file_deleted"] == 1


# --- files and directories planted by someone else ---------------------------------------------
def test_a_symlink_planted_at_a_run_file_is_refused_and_its_target_left_alone(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run_dir = tmp_path / "e" / "t"
    os.makedirs(run_dir, mode=0o700)
    os.symlink(victim, run_dir / "traces-r0.jsonl")
    os.symlink(victim, run_dir / "summary-r0.json")
    settings = _configure(tmp_path, export_process=False)
    _scopes(3, "x")
    otel_rl.shutdown()
    assert victim.read_text() == "precious\n"
    summary = otel_rl.run_summary()
    assert summary["complete"] is False
    assert summary["problems"]["trace_file_error"] >= 1
    assert os.path.islink(settings.file_path(keys.TRACES_FILE))


def test_opening_through_a_planted_symlink_says_why(tmp_path):
    target = tmp_path / "target"
    target.write_text("")
    os.symlink(target, tmp_path / "link.jsonl")
    with pytest.raises(OSError, match="symbolic link"):
        files.open_fd(str(tmp_path / "link.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    with pytest.raises(OSError, match="symbolic link"):
        files.open_private(str(tmp_path / "link.jsonl"), "w")
    assert target.read_text() == ""


def test_a_temporary_file_is_created_new_even_where_a_symlink_waits_for_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.symlink(victim, tmp_path / "summary.json.tmp")
    with pytest.raises(OSError):
        files.open_private(str(tmp_path / "summary.json.tmp"), "w")
    assert victim.read_text() == "precious\n"


@needs_root
def test_a_run_directory_owned_by_another_user_is_refused_at_configure(tmp_path):
    run_dir = tmp_path / "e" / "t"
    os.makedirs(run_dir)
    os.chown(run_dir, FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(otel_rl.ConfigError, match=rf"owned by uid {FOREIGN_UID}.*OTEL_RL_DIR"):
        _configure(tmp_path)
    assert not otel_rl.is_configured()


@needs_root
def test_a_run_directory_that_is_another_users_symlink_is_refused_at_configure(tmp_path):
    real = tmp_path / "elsewhere"
    os.makedirs(real)
    os.makedirs(tmp_path / "e")
    os.symlink(real, tmp_path / "e" / "t")
    os.lchown(tmp_path / "e" / "t", FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(otel_rl.ConfigError, match="symbolic link"):
        _configure(tmp_path)


@needs_root
def test_a_file_owned_by_another_user_in_the_run_directory_is_refused(tmp_path):
    run_dir = tmp_path / "e" / "t"
    os.makedirs(run_dir, mode=0o777)
    planted = run_dir / "traces-r0.jsonl"
    planted.write_text("")
    os.chown(planted, FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(OSError, match=f"owned by uid {FOREIGN_UID}"):
        files.open_fd(str(planted), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    assert planted.read_text() == ""


@needs_root
def test_a_directory_owned_by_another_user_is_not_written_into(tmp_path):
    foreign = tmp_path / "foreign"
    os.makedirs(foreign, mode=0o777)
    os.chown(foreign, FOREIGN_UID, FOREIGN_UID)
    with pytest.raises(OSError, match=f"owned by uid {FOREIGN_UID}"):
        files.open_fd(str(foreign / "stats-r0.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    assert os.listdir(foreign) == []


def test_a_planted_fifo_does_not_block_the_writer(tmp_path):
    os.mkfifo(tmp_path / "traces-r0.jsonl")
    with pytest.raises(OSError, match="not a regular file"):
        files.open_fd(str(tmp_path / "traces-r0.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def test_a_run_directory_others_may_write_to_is_refused_at_configure(tmp_path):
    run_dir = tmp_path / "e" / "t"
    os.makedirs(run_dir)
    os.chmod(run_dir, 0o777)
    with pytest.raises(otel_rl.ConfigError, match="writable by other users"):
        _configure(tmp_path)
    os.chmod(run_dir, 0o1777)  # the sticky bit keeps each file to its owner, as in /tmp
    _configure(tmp_path)
    otel_rl.shutdown()


def test_a_group_writable_run_directory_of_this_user_is_accepted(tmp_path):
    # umask 002 with a user-private group: a directory the user made is group-writable.
    run_dir = tmp_path / "e" / "t"
    os.makedirs(run_dir)
    os.chmod(run_dir, 0o770)
    settings = _configure(tmp_path)
    _scopes(2, "x")
    otel_rl.shutdown()
    assert len(slices(read_trace(settings.file_path(keys.TRACES_FILE)), "x")) == 2