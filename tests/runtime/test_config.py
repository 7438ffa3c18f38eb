"""Configuration: precedence, AReaL config objects, clear errors, documentation."""

from __future__ import annotations

import getpass
import glob
import json
import os
import subprocess
import sys
import threading
import types

import pytest

import otel_rl
from otel_rl import ConfigError
from otel_rl._internal import keys
from otel_rl._internal.config import MAX_TIMEOUT_MS, PARAMS, resolve
from support import clean_env
from support.paths import ROOT as REPO_ROOT

ROOT = str(REPO_ROOT)
#: The README and the manual in docs/ (the configuration table is docs/reference.md).
DOC_PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def test_defaults_apply_with_nothing_set():
    settings = resolve(None, None, {})
    assert (settings.rank, settings.flush_threshold, settings.file_export) == (0, 100, True)


def test_an_areal_config_object_is_read_including_nested_session_tracer():
    config = types.SimpleNamespace(
        enabled=True, experiment_name="gsm8k", trial_name="t7", fileroot="/data/logs",
        save_interval=5, profile_steps=[1, 2],
        session_tracer=types.SimpleNamespace(enabled=False, flush_threshold=7))
    settings = resolve(config, None, {})
    assert (settings.experiment_name, settings.trial_name, settings.save_interval) == ("gsm8k", "t7", 5)
    assert (settings.session_tracer, settings.flush_threshold) == (False, 7)
    assert settings.profile_steps == (1, 2)
    assert settings.run_dir == os.path.join("/data/logs", "logs", getpass.getuser(), "gsm8k", "t7")


def test_an_areal_config_object_writes_where_areal_tools_look():
    config = types.SimpleNamespace(enabled=True, experiment_name="e", trial_name="t", fileroot="/r")
    settings = resolve(config, {"rank": 2, "role": "actor"}, {})
    base = os.path.join("/r", "logs", getpass.getuser(), "e", "t")
    assert (settings.layout, settings.file_path("traces-r{rank}.jsonl"),
            settings.file_path("sessions-r{rank}.jsonl"), settings.file_path("stats-r{rank}.jsonl")) == (
        "areal", os.path.join(base, "perf_tracer", "actor", "traces-r2.jsonl"),
        os.path.join(base, "session_tracer", "actor", "sessions-r2.jsonl"),
        os.path.join(base, "stats-actor-r2.jsonl"))


def test_the_layout_setting_beats_the_areal_default():
    config = types.SimpleNamespace(enabled=True, experiment_name="e", trial_name="t", fileroot="/r")
    assert resolve(config, None, {"OTEL_RL_LAYOUT": "otel_rl"}).run_dir == os.path.join("/r", "e", "t")
    assert resolve({"fileroot": "/r"}, {"layout": "areal"}, {}).run_dir.startswith(os.path.join("/r", "logs"))


def test_a_dict_config_keeps_the_otel_rl_layout():
    assert resolve({"fileroot": "/r", "experiment_name": "e", "trial_name": "t"}, None, {}).run_dir == \
        os.path.join("/r", "e", "t")


def test_ranks_accept_areal_ranges_and_disable_other_ranks():
    assert resolve(None, {"rank": 3}, {"AREAL_PERF_TRACER_RANKS": "0,2-4"}).ranks == frozenset({0, 2, 3, 4})
    assert resolve(None, {"rank": 1}, {"AREAL_PERF_TRACER_RANKS": "0,2-4"}).enabled is False
    assert resolve(None, {"rank": 1}, {"OTEL_RL_RANKS": "1", "AREAL_PERF_TRACER_RANKS": "0"}).enabled is True


def test_a_bad_rank_range_names_the_variable():
    with pytest.raises(ConfigError, match="AREAL_PERF_TRACER_RANKS"):
        resolve(None, None, {"AREAL_PERF_TRACER_RANKS": "4-2"})


def test_overrides_beat_config_which_beats_environment():
    env = {"OTEL_RL_FLUSH_THRESHOLD": "9", "OTEL_RL_EXPERIMENT": "from-env", "OTEL_RL_TRIAL": "env-trial"}
    settings = resolve({"experiment_name": "from-config"}, {"trial_name": "from-arg"}, env)
    assert (settings.flush_threshold, settings.experiment_name, settings.trial_name) == (
        9, "from-config", "from-arg")


def test_rank_falls_back_to_the_torchrun_rank_variable():
    assert resolve(None, None, {"RANK": "5"}).rank == 5
    assert resolve(None, None, {"RANK": "5", "OTEL_RL_RANK": "2"}).rank == 2


def test_rank_falls_back_to_local_rank_when_no_global_rank_is_known():
    assert resolve(None, None, {"LOCAL_RANK": "3"}).rank == 3
    assert resolve(None, None, {"LOCAL_RANK": "3", "RANK": "7"}).rank == 7


def test_a_bad_local_rank_names_the_variable():
    with pytest.raises(ConfigError, match="LOCAL_RANK"):
        resolve(None, None, {"LOCAL_RANK": "first"})


def test_role_prefixes_the_rank_in_file_names():
    settings = resolve(None, {"role": "rollout", "rank": 3}, {})
    assert settings.file_path(keys.TRACES_FILE).endswith("traces-rollout-r3.jsonl")


def test_a_negative_rank_is_rejected_naming_the_argument():
    with pytest.raises(ConfigError, match="rank"):
        otel_rl.configure(rank=-1)


def test_a_bad_environment_value_is_rejected_naming_the_variable():
    with pytest.raises(ConfigError, match="OTEL_RL_MAX_QUEUE_SIZE"):
        resolve(None, None, {"OTEL_RL_MAX_QUEUE_SIZE": "-3"})


def test_an_unknown_override_is_rejected_listing_known_settings():
    with pytest.raises(ConfigError, match="flush_treshold"):
        otel_rl.configure(flush_treshold=3)


def test_a_bad_otlp_protocol_is_rejected_naming_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        otel_rl.configure(fileroot=str(tmp_path))


def test_disabled_configuration_records_nothing_and_costs_a_flag_check(tmp_path):
    otel_rl.configure({"enabled": False}, fileroot=str(tmp_path))
    assert otel_rl.is_configured() and not otel_rl.is_enabled()
    scope = otel_rl.trace_scope("x")
    assert scope is otel_rl.trace_scope("y")  # one shared no-op object, nothing allocated
    assert otel_rl.register_session() is None


def test_otel_sdk_disabled_turns_otel_rl_off(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    otel_rl.configure(fileroot=str(tmp_path))
    assert not otel_rl.is_enabled()


def test_every_setting_and_key_is_documented_in_the_readme_or_docs():
    readme = ""
    for page in DOC_PAGES:
        with open(page, encoding="utf-8") as f:
            readme += f.read()
    for param in PARAMS:
        assert f"`{param.env}`" in readme, param.env
    for name in dir(keys):
        value = getattr(keys, name)
        if isinstance(value, str) and value.startswith(("rl.", "gen_ai.")) and not value.endswith("."):
            assert value in readme, value


# --- values that would fail later, or far from the setting that caused them (issue 16, item 18)
@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                      "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"])
@pytest.mark.parametrize("endpoint", ["http://h:99999", "http://[::1", "http://h:port", "http://",
                                      "collector:70000"])
def test_an_unusable_otlp_endpoint_is_rejected_naming_the_variable(variable, endpoint):
    with pytest.raises(ConfigError, match=variable):
        resolve(None, None, {variable: endpoint})


@pytest.mark.parametrize("endpoint", ["http://collector:4318", "https://[::1]:4317", "localhost:4317",
                                      "unix:///run/otel.sock", "http://collector"])
def test_a_usable_otlp_endpoint_is_accepted(endpoint):
    assert resolve(None, None, {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}).enabled


def test_a_bad_endpoint_fails_import_under_otel_rl_enabled_with_a_config_error(tmp_path):
    env = clean_env(OTEL_RL_ENABLED="1", OTEL_RL_DIR=str(tmp_path),
                    OTEL_EXPORTER_OTLP_ENDPOINT="http://h:99999")
    result = subprocess.run([sys.executable, "-c", "import otel_rl"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("otel_rl._internal.config.ConfigError:") and "OTEL_EXPORTER_OTLP_ENDPOINT" in last


@pytest.mark.parametrize("name", ["shutdown_timeout_ms", "export_interval_ms", "control_poll_ms",
                                  "control_ack_wait_ms"])
def test_a_timeout_past_what_waits_accept_is_rejected_naming_the_setting(name):
    param = next(p for p in PARAMS if p.name == name)
    for too_long in (str(int(threading.TIMEOUT_MAX * 1000) + 1), str(MAX_TIMEOUT_MS + 1)):
        with pytest.raises(ConfigError, match=param.env):
            resolve(None, None, {param.env: too_long})
    with pytest.raises(ConfigError, match=name):
        otel_rl.configure(**{name: too_long})
    assert not otel_rl.is_configured()


def test_the_longest_accepted_shutdown_timeout_still_saves_and_shuts_down(tmp_path):
    limit = next(p for p in PARAMS if p.name == "shutdown_timeout_ms").parse
    with pytest.raises(ValueError, match="at most"):
        limit(str(2**63))
    longest = MAX_TIMEOUT_MS
    env = clean_env(OTEL_RL_DIR=str(tmp_path), OTEL_RL_SHUTDOWN_TIMEOUT_MS=str(longest),
                    OTEL_RL_EXPORT_INTERVAL_MS=str(longest), OTEL_RL_CONTROL_POLL_MS=str(longest))
    code = ("import otel_rl, json\n"
            "otel_rl.configure()\n"
            "with otel_rl.trace_scope('work'):\n"
            "    pass\n"
            "otel_rl.save(0)\n"
            "otel_rl.save(force=True)\n"
            "otel_rl.shutdown()\n"
            "s = otel_rl.run_summary()\n"
            "print(json.dumps({'complete': s['complete'], 'file': s['spans']['exported_file'],"
            " 'problems': s['problems']}))\n")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary == {"complete": True, "file": 1, "problems": {}}, result.stderr


def test_a_rejected_endpoint_keeps_its_credentials_out_of_the_message():
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_ENDPOINT") as info:
        resolve(None, None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://bot:hunter2@collector:99999"})
    assert "hunter2" not in str(info.value) and "collector:99999" in str(info.value)
