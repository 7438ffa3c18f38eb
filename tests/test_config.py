"""Configuration: precedence, AReaL config objects, clear errors, documentation."""

from __future__ import annotations

import getpass
import os
import types

import pytest

import otel_rl
from otel_rl import ConfigError
from otel_rl._internal import keys
from otel_rl._internal.config import PARAMS, resolve

README = os.path.join(os.path.dirname(__file__), "..", "README.md")


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


def test_every_setting_and_key_is_documented_in_the_readme():
    with open(README) as f:
        readme = f.read()
    for param in PARAMS:
        assert f"`{param.env}`" in readme, param.env
    for name in dir(keys):
        value = getattr(keys, name)
        if isinstance(value, str) and value.startswith(("rl.", "gen_ai.")) and not value.endswith("."):
            assert value in readme, value
