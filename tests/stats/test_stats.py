"""otel_rl.stats: AReaL stats_tracker semantics, bad input, scopes under concurrency, and outputs.

Expected values are computed in the tests from the raw inputs with plain
Python loops, never with the code under test.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading

import pytest
import torch
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from support import clean_env, export_to, read_jsonl

import otel_rl
from otel_rl import stats
from otel_rl.stats import ReduceType
from support.paths import ROOT


@pytest.fixture(autouse=True)
def _empty_trackers():
    """Trackers are process-wide, as in AReaL: each test starts and ends with none recorded."""
    stats.export_all(log=False)
    yield
    stats.export_all(log=False)


def _configure(tmp_path, **overrides):
    overrides.setdefault("rank", 0)
    otel_rl.configure(fileroot=str(tmp_path), experiment_name="exp", trial_name="t1",
                      tracer_provider=TracerProvider(shutdown_on_exit=False), **overrides)
    return otel_rl.settings()


# --------------------------------------------------------------------------- hand computations


def _masked(values, mask):
    """The elements a mask selects, from nested lists."""
    flat_v = torch.as_tensor(values).flatten().tolist()
    flat_m = torch.as_tensor(mask).flatten().tolist()
    return [v for v, m in zip(flat_v, flat_m) if m]


def _batch(gen, shape, p_mask=0.6):
    values = torch.randn(shape, generator=gen) * 3 + 1
    mask = torch.rand(shape, generator=gen) < p_mask
    return values, mask


# --------------------------------------------------------------------------- recording and export


def test_masked_token_and_sequence_stats_match_hand_computation():
    gen = torch.Generator().manual_seed(7)
    selected_tokens, selected_seq, token_sums, rewards = [], [], [], []
    n_seqs = n_tokens = 0
    for _ in range(3):  # three micro-batches, as PPO updates log them
        adv, loss_mask = _batch(gen, (4, 6))
        reward = torch.randn(4, generator=gen)
        seq_mask = torch.ones(4, dtype=torch.bool)
        stats.denominator(n_seqs=seq_mask, n_valid_tokens=loss_mask)
        stats.stat(advantages=adv, denominator="n_valid_tokens")
        stats.stat(adv_sum=adv, denominator="n_valid_tokens", reduce_type=ReduceType.SUM)
        stats.stat(adv_min=adv, denominator="n_valid_tokens", reduce_type=ReduceType.MIN)
        stats.stat(adv_max=adv, denominator="n_valid_tokens", reduce_type=ReduceType.MAX)
        stats.stat(task_reward=reward, denominator="n_seqs", reduce_type=ReduceType.AVG)
        selected_tokens += _masked(adv.tolist(), loss_mask.tolist())
        selected_seq += reward.tolist()
        token_sums.append(sum(_masked(adv.tolist(), loss_mask.tolist())))
        rewards += reward.tolist()
        n_seqs += 4
        n_tokens += sum(1 for m in loss_mask.flatten().tolist() if m)

    out = stats.export()

    assert out["n_seqs"] == n_seqs
    assert out["n_valid_tokens"] == n_tokens
    assert out["advantages/avg"] == pytest.approx(sum(selected_tokens) / len(selected_tokens), rel=1e-6)
    assert out["advantages/min"] == pytest.approx(min(selected_tokens), rel=1e-6)
    assert out["advantages/max"] == pytest.approx(max(selected_tokens), rel=1e-6)
    assert out["adv_sum"] == pytest.approx(sum(token_sums), rel=1e-6)
    assert out["adv_min"] == pytest.approx(min(selected_tokens), rel=1e-6)
    assert out["adv_max"] == pytest.approx(max(selected_tokens), rel=1e-6)
    assert out["task_reward"] == pytest.approx(sum(rewards) / len(rewards), rel=1e-6)
    assert set(out) == {"n_seqs", "n_valid_tokens", "advantages/avg", "advantages/min", "advantages/max",
                        "adv_sum", "adv_min", "adv_max", "task_reward"}
    assert all(type(v) in (float, int) for v in out.values())
    assert stats.export() == {}  # reset


def test_all_false_mask_leaves_out_values_that_have_nothing_behind_them():
    stats.denominator(none=torch.zeros(3, dtype=torch.bool))
    stats.stat(x=torch.tensor([1.0, 2.0, 3.0]), denominator="none")
    stats.stat(total=torch.tensor([1.0, 2.0, 3.0]), denominator="none", reduce_type=ReduceType.SUM)
    assert stats.export() == {"none": 0.0, "total": 0.0}


def test_integer_and_bool_tensors_are_averaged_as_numbers():
    mask = torch.tensor([True, True, False, True])
    lengths = torch.tensor([10, 20, 30, 41])
    correct = torch.tensor([True, False, True, True])
    stats.denominator(n=mask)
    stats.stat(seq_len=lengths, correct=correct, denominator="n")
    out = stats.export()
    assert out["seq_len/avg"] == pytest.approx((10 + 20 + 41) / 3)
    assert out["correct/avg"] == pytest.approx((1 + 0 + 1) / 3)
    assert (out["seq_len/min"], out["seq_len/max"]) == (10, 41)


def test_scalars_export_mean_and_count_and_named_trackers_prefix_their_keys():
    stats.scalar(grad_norm=1.5)
    stats.scalar(grad_norm=2.5, lr=1e-3)
    rollout_rewards = [0.5, 1.0, 0.0, 0.25]
    for r in rollout_rewards:
        stats.get("rollout").scalar(reward=r)
    stats.get("eval-rollout").scalar(reward=0.9)
    assert stats.get("rollout") is stats.get("rollout")

    only_rollout = stats.get("rollout").export(reset=False)
    assert only_rollout == {"rollout/reward": sum(rollout_rewards) / 4, "rollout/reward__count": 4}

    out = stats.export_all()
    assert out == {
        "grad_norm": (1.5 + 2.5) / 2, "grad_norm__count": 2, "lr": 1e-3, "lr__count": 1,
        "rollout/reward": sum(rollout_rewards) / 4, "rollout/reward__count": 4,
        "eval-rollout/reward": 0.9, "eval-rollout/reward__count": 1,
    }
    assert stats.export_all() == {}


def test_reset_false_keeps_accumulating():
    stats.scalar(x=1.0)
    assert stats.export(reset=False) == {"x": 1.0, "x__count": 1}
    stats.scalar(x=3.0)
    assert stats.export() == {"x": 2.0, "x__count": 2}


def test_export_of_one_key_resolves_scopes_and_never_raises_for_missing_keys():
    with stats.scope("actor"):
        stats.scalar(loss=2.0)
        stats.scalar(kl=0.5)
        assert stats.export(key="missing") == {}
        assert stats.export(key="loss") == {"actor/loss": 2.0, "actor/loss__count": 1}
        assert stats.export(key="loss") == {}  # AReaL raises KeyError here
    assert stats.export() == {"actor/kl": 0.5, "actor/kl__count": 1}


def test_exporting_a_denominator_alone_restarts_its_pairing():
    stats.denominator(n=torch.tensor([True, False]))
    stats.stat(x=torch.tensor([1.0, 2.0]), denominator="n")
    assert stats.export(key="n") == {"n": 1.0}
    stats.denominator(n=torch.tensor([False, True, True]))
    stats.stat(x=torch.tensor([5.0, 6.0, 8.0]), denominator="n")
    assert stats.export()["x/avg"] == pytest.approx((1.0 + 6.0 + 8.0) / 3)


def test_scopes_nest_and_disable_scope_and_scope_func_wrapper():
    @stats.scope_func_wrapper("update")
    def update():
        stats.scalar(loss=1.0)

    @stats.get("rollout").scope_func_wrapper("workflow")
    async def workflow():
        stats.get("rollout").scalar(turns=3)

    with stats.scope("ppo_actor"):
        update()
        with stats.disable_scope():
            stats.scalar(raw=1)
        with stats.scope("/a/b/"):
            stats.scalar(deep=2)
    asyncio.run(workflow())
    with stats.get("rollout").disable_scope():
        stats.get("rollout").scalar(unprefixed=4)
    keys = {k for k in stats.export_all() if not k.endswith("__count")}
    assert keys == {"ppo_actor/update/loss", "raw", "ppo_actor/a/b/deep", "rollout/workflow/turns", "unprefixed"}


def test_record_timing_is_a_timeperf_scalar_and_a_span(traced):
    with stats.scope("ignored"):
        with stats.record_timing("rollout"):
            sum(range(10000))

    async def main():
        async with stats.get("rollout").record_timing("generate"):
            await asyncio.sleep(0.01)

    asyncio.run(main())
    out = stats.export_all(log=False)
    spans = {s["name"]: s for s in traced.spans()}
    assert set(out) == {"timeperf/rollout", "timeperf/rollout__count", "timeperf/generate",
                        "timeperf/generate__count"}
    for key in ("timeperf/rollout", "timeperf/generate"):
        span_s = (spans[key]["end_ns"] - spans[key]["start_ns"]) / 1e9
        assert 0 < out[key] <= span_s
    assert out["timeperf/generate"] >= 0.009


def test_record_timing_works_and_records_no_span_without_tracing():
    with pytest.raises(RuntimeError):
        with stats.record_timing("failing"):
            raise RuntimeError("the timed code's own error passes through")
    assert stats.export()["timeperf/failing__count"] == 1


# --------------------------------------------------------------------------- bad input


def _mask(*shape):
    return torch.ones(shape, dtype=torch.bool)


@pytest.mark.parametrize("call, key, words", [
    (lambda: stats.denominator(n=torch.ones(3)), "n", "torch.bool"),
    (lambda: stats.denominator(n=[True, False]), "n", "torch.bool"),
    (lambda: stats.denominator(n=torch.zeros(0, dtype=torch.bool)), "n", "empty"),
    (lambda: (stats.denominator(n=_mask(2, 3)), stats.stat(x=torch.ones(3, 2), denominator="n")), "x", "shape"),
    (lambda: stats.stat(x=torch.ones(3), denominator="nope"), "nope", "does not exist"),
    (lambda: (stats.denominator(n=_mask(3)), stats.stat(x=torch.ones(3), denominator="n",
                                                           reduce_type=ReduceType.SCALAR)), "x", "SCALAR"),
    (lambda: (stats.denominator(n=_mask(3)), stats.stat(x=[1.0, 2.0, 3.0], denominator="n")), "x", "tensor"),
    (lambda: (stats.denominator(n=_mask(3)), stats.stat(x=torch.ones(0), denominator="n")), "x", "empty"),
    (lambda: (stats.denominator(n=_mask(3)), stats.stat(x=torch.ones(3), denominator="n"),
              stats.denominator(m=_mask(3)), stats.stat(x=torch.ones(3), denominator="m")), "x", "`n`"),
    (lambda: stats.scalar(x="half"), "x", "number"),
    (lambda: stats.scalar(x=torch.ones(4)), "x", "stat()"),
    (lambda: (stats.scalar(x=1.0), stats.denominator(x=_mask(2))), "x", "scalar"),
])
def test_misuse_raises_value_error_naming_the_key(call, key, words):
    with pytest.raises(ValueError) as info:
        call()
    assert f"`{key}`" in str(info.value) and words in str(info.value), str(info.value)


def test_a_failing_call_records_nothing():
    stats.denominator(n=_mask(3))
    with pytest.raises(ValueError, match="`bad`"):
        stats.stat(good=torch.ones(3), bad=torch.ones(4), denominator="n")
    with pytest.raises(ValueError, match="`y`"):
        stats.scalar(x=1.0, y=None)
    assert stats.export() == {"n": 3.0}


def test_nan_and_inf_propagate_as_in_areal_and_are_counted_and_reported(caplog):
    values = torch.tensor([1.0, float("nan"), 4.0, float("inf"), -2.0, float("nan")])
    mask = torch.tensor([True, True, True, True, True, False])  # the masked-out NaN is not counted
    finite = torch.tensor([1.0, 5.0, -2.0, float("inf")])
    before = otel_rl.diagnostics().get("stats_nonfinite_values", 0)
    stats.denominator(n=mask, four=torch.ones(4, dtype=torch.bool))
    with caplog.at_level(logging.WARNING, logger="otel_rl"):
        stats.stat(nan_loss=values, denominator="n")
        stats.stat(inf_ratio=finite, denominator="four")
        stats.scalar(nan_reward=1.0)
        stats.scalar(nan_reward=float("nan"))
        stats.scalar(nan_reward=3.0)
        out = stats.export()
    nan = float("nan")
    assert set(out) == {"n", "four", "nan_loss/avg", "nan_loss/min", "nan_loss/max", "inf_ratio/avg", "inf_ratio/min",
                        "nan_reward", "nan_reward__count"}
    assert [out["nan_loss/avg"], out["nan_loss/min"], out["nan_loss/max"]] == pytest.approx([nan] * 3, nan_ok=True)
    # An infinite max is left out (AReaL's isinf check); the average is inf.
    assert (out["inf_ratio/avg"], out["inf_ratio/min"]) == (float("inf"), -2.0)
    assert out["nan_reward"] != out["nan_reward"] and out["nan_reward__count"] == 3
    assert out["n"] == 5
    assert otel_rl.diagnostics()["stats_nonfinite_values"] - before == 4
    assert "`nan_loss`" in caplog.text and "`nan_reward`" in caplog.text and "`inf_ratio`" in caplog.text


def test_scalars_work_without_torch_and_tensor_stats_say_what_is_missing(tmp_path):
    code = """
import sys
sys.modules["torch"] = None  # as if torch were not installed
from otel_rl import stats
stats.scalar(reward=1.0); stats.get("rollout").scalar(reward=0.5)
print(stats.export_all())
try:
    stats.denominator(n=[True])
except ImportError as exc:
    print("ImportError:", exc)
"""
    root = str(ROOT)
    env = clean_env(PYTHONPATH=root)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=str(tmp_path), timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert eval(lines[0]) == {"reward": 1.0, "reward__count": 1, "rollout/reward": 0.5,  # noqa: S307
                              "rollout/reward__count": 1}
    assert lines[1].startswith("ImportError:") and "`n`" in lines[1] and "otel_rl[torch]" in lines[1]


# --------------------------------------------------------------------------- concurrency


def test_scopes_are_isolated_between_asyncio_tasks_and_threads():
    tracker = stats.get("rollout")

    async def workflow(i):
        with tracker.scope(f"task{i}"):
            await asyncio.sleep(0)
            async with tracker.scope("turn"):
                await asyncio.sleep(0.001 * (i % 3))
                tracker.scalar(reward=i)
            await asyncio.sleep(0)
            tracker.scalar(done=1)

    async def main():
        await asyncio.gather(*(workflow(i) for i in range(20)))

    barrier = threading.Barrier(4)

    def worker(t):
        with stats.scope(f"thread{t}"):
            barrier.wait()
            for _ in range(200):
                stats.scalar(x=t)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    asyncio.run(main())
    for thread in threads:
        thread.join()

    out = stats.export_all()
    expected = {}
    for i in range(20):
        expected[f"rollout/task{i}/turn/reward"] = float(i)
        expected[f"rollout/task{i}/turn/reward__count"] = 1
        expected[f"rollout/task{i}/done"] = 1.0
        expected[f"rollout/task{i}/done__count"] = 1
    for t in range(4):
        expected[f"thread{t}/x"] = float(t)
        expected[f"thread{t}/x__count"] = 200
    assert out == expected


# --------------------------------------------------------------------------- merging workers


def test_merge_worker_stats_weights_by_count_like_the_rollout_controller():
    workers = []
    raw = [[0.5, 1.0], [0.0, 0.0, 1.0], [1.0]]
    for rewards in raw:
        for r in rewards:
            stats.get("rollout").scalar(reward=r)
        stats.get("rollout").scalar(turns=len(rewards))
        workers.append(stats.export_all(log=False))
    workers[0]["rollout/len/min"], workers[1]["rollout/len/min"] = 3.0, 2.0
    workers[0]["rollout/len/avg"] = 5.0  # no count to weight it by: left out
    merged = stats.merge_worker_stats(workers)
    every = [r for rewards in raw for r in rewards]
    assert merged == {
        "rollout/reward": pytest.approx(sum(every) / len(every)),
        "rollout/turns": pytest.approx(sum(len(r) for r in raw) / len(raw)),
        "rollout/len/min": 2.0,
    }
    with_counts = stats.merge_worker_stats(workers, keep_counts=True)
    assert with_counts["rollout/reward__count"] == len(every)


# --------------------------------------------------------------------------- logging backends


def test_jsonl_file_has_one_line_per_tracker_export_with_step_and_no_counts(tmp_path):
    settings = _configure(tmp_path)
    stats.scalar(loss=1.0)
    stats.get("rollout").scalar(reward=0.25)
    first = stats.export_all(step=3)
    with otel_rl.step_scope(4):
        stats.scalar(loss=3.0)
        second = stats.export()
    path = os.path.join(settings.run_dir, "stats-r0.jsonl")
    lines = read_jsonl(path)
    assert [(line["step"], line["tracker"], line["rank"], line["values"]) for line in lines] == [
        (3, "", 0, {"loss": first["loss"]}),
        (3, "rollout", 0, {"rollout/reward": first["rollout/reward"]}),
        (4, "", 0, {"loss": second["loss"]}),
    ]
    assert all(isinstance(line["time"], float) for line in lines)


def test_only_rank_zero_logs_unless_asked(tmp_path):
    settings = _configure(tmp_path, rank=1)
    stats.scalar(x=1.0)
    assert stats.export() == {"x": 1.0, "x__count": 1}
    path = os.path.join(settings.run_dir, "stats-r1.jsonl")
    assert not os.path.exists(path)
    stats.scalar(x=2.0)
    stats.export(log=True)
    stats.commit({"merged": 5.0, "merged__count": 2}, step=1, tracker="rollout", log=True)
    assert [(line["tracker"], line["values"]) for line in read_jsonl(path)] == [
        ("", {"x": 2.0}), ("rollout", {"merged": 5.0})]


def test_nothing_is_logged_when_otel_rl_is_not_configured(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stats.scalar(x=1.0)
    assert stats.export() == {"x": 1.0, "x__count": 1}
    assert os.listdir(tmp_path) == []


def test_registered_backends_receive_records_and_their_failures_never_raise(tmp_path):
    received = []

    class Broken:
        def log(self, record):
            raise OSError("backend down")

    got = stats.register_backend(received.append)
    broken = stats.register_backend(Broken())
    try:
        stats.scalar(acc=0.5)
        out = stats.export(step=9)
        assert out == {"acc": 0.5, "acc__count": 1}
        assert len(received) == 1
        record = received[0]
        assert (record.tracker, record.step, dict(record.values), record.rank) == ("", 9, {"acc": 0.5}, 0)
        assert otel_rl.diagnostics()["stats_backend_error"] >= 1
    finally:
        stats.unregister_backend(got)
        stats.unregister_backend(broken)
    stats.scalar(acc=1.0)
    stats.export()
    assert len(received) == 1


def test_meter_provider_given_to_configure_receives_gauges_with_attributes(tmp_path):
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    _configure(tmp_path, rank=0, role="trainer", meter_provider=provider)
    stats.get("rollout").scalar(reward=0.5)
    stats.get("rollout").scalar(reward=1.0)
    out = stats.export_all(step=12)
    points = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    points[metric.name] = (point.value, dict(point.attributes))
    assert points == {"rl.stats.rollout/reward": (out["rollout/reward"], {
        "rl.experiment.name": "exp", "rl.trial.name": "t1", "rl.rank": 0, "rl.role": "trainer",
        "rl.stats.tracker": "rollout", "rl.step": 12})}


def test_stats_reach_a_real_otlp_metrics_receiver(otlp_receiver, monkeypatch, tmp_path):
    receiver = otlp_receiver
    export_to(monkeypatch, receiver)
    _configure(tmp_path, rank=0, session_tracer=False)
    gen = torch.Generator().manual_seed(3)
    values, mask = _batch(gen, (5, 7))
    with stats.scope("ppo_actor"):
        stats.denominator(n_valid_tokens=mask)
        stats.stat(loss=values, denominator="n_valid_tokens")
    with stats.record_timing("train_step"):
        pass
    stats.get("rollout").scalar(reward=0.75)
    out = stats.export_all(step=2)
    otel_rl.save(force=True)
    names = {"rl.stats.ppo_actor/loss/avg", "rl.stats.ppo_actor/loss/min", "rl.stats.ppo_actor/loss/max",
             "rl.stats.ppo_actor/n_valid_tokens", "rl.stats.timeperf/train_step", "rl.stats.rollout/reward"}
    points = [p for p in receiver.wait_for_metrics(names) if p["name"].startswith("rl.stats.")]
    got = {p["name"]: p for p in points}
    assert set(got) == names  # no __count gauges
    selected = _masked(values.tolist(), mask.tolist())
    assert got["rl.stats.ppo_actor/loss/avg"]["value"] == pytest.approx(sum(selected) / len(selected), rel=1e-6)
    assert got["rl.stats.ppo_actor/loss/min"]["value"] == pytest.approx(min(selected), rel=1e-6)
    assert got["rl.stats.ppo_actor/n_valid_tokens"]["value"] == len(selected)
    for name, point in got.items():
        assert point["type"] == "gauge"
        assert point["value"] == out[name[len("rl.stats."):]]
        tracker = "rollout" if "rollout" in name else ""
        assert point["attributes"] == {"rl.experiment.name": "exp", "rl.trial.name": "t1", "rl.rank": 0,
                                       "rl.stats.tracker": tracker, "rl.step": 2}
        assert point["resource"]["rl.rank"] == 0
    assert got["rl.stats.timeperf/train_step"]["unit"] == "s"
    otel_rl.shutdown()  # before the receiver stops


def test_step_attribute_can_be_turned_off(tmp_path):
    reader = InMemoryMetricReader()
    _configure(tmp_path, meter_provider=MeterProvider(metric_readers=[reader]), stats_step_attribute=False)
    stats.scalar(x=1.0)
    stats.export(step=5)
    point = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics[0].data.data_points[0]
    assert "rl.step" not in point.attributes


def test_tensorboard_event_files_when_tensorboard_is_installed(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    settings = _configure(tmp_path)
    stats.scalar(loss=2.0)
    stats.export(step=1)
    stats.scalar(loss=4.0)
    stats.export(step=2)
    otel_rl.save(force=True)
    log_dir = os.path.join(settings.run_dir, "tensorboard-r0")
    events = EventAccumulator(log_dir)
    events.Reload()
    assert events.Tags()["tensors"] == ["loss"]
    assert [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors("loss")] == [(1, 2.0), (2, 4.0)]


def test_tensorboard_missing_is_skipped_cleanly(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tensorboard.summary", None)  # as if not installed
    settings = _configure(tmp_path)
    with caplog.at_level(logging.WARNING, logger="otel_rl"):
        stats.scalar(loss=2.0)
        stats.export(step=1)
        otel_rl.save(force=True)
    files = os.listdir(settings.run_dir)
    assert "stats-r0.jsonl" in files and not any(name.startswith("tensorboard") for name in files)
    assert caplog.text == ""
    assert "stats_backend_error" not in otel_rl.diagnostics()


def test_tensorboard_can_be_turned_off(tmp_path):
    settings = _configure(tmp_path, stats_tensorboard=False)
    stats.scalar(loss=2.0)
    stats.export(step=1)
    assert "tensorboard-r0" not in os.listdir(settings.run_dir)


# --------------------------------------------------------------------------- inputs export could not read


def _meta(*shape, dtype=torch.float32):
    return torch.ones(shape, dtype=dtype, device="meta")


def _sparse(*shape, dtype=torch.float32):
    return torch.ones(shape, dtype=dtype).to_sparse()


@pytest.mark.parametrize("call, key, words", [
    (lambda: stats.denominator(n=_meta(3, dtype=torch.bool)), "n", "meta"),
    (lambda: (stats.denominator(n=_mask(3)), stats.stat(x=_meta(3), denominator="n")), "x", "meta"),
    (lambda: stats.stat_compact(_mask(3), x=_meta(3)), "x", "meta"),
    (lambda: stats.stat_compact(_meta(3, dtype=torch.bool), x=torch.ones(3)), "x", "meta"),
    (lambda: stats.weighted_mean("w", _meta(), torch.tensor(1.0)), "w", "meta"),
    (lambda: stats.weighted_mean("w", torch.tensor(1.0), _meta()), "w", "meta"),
    (lambda: stats.denominator(n=_sparse(3, dtype=torch.bool)), "n", "sparse"),
    (lambda: (stats.denominator(n=_mask(3)), stats.stat(x=_sparse(3), denominator="n")), "x", "sparse"),
    (lambda: stats.stat_compact(_mask(3), x=_sparse(3)), "x", "sparse"),
    (lambda: stats.weighted_mean("w", _sparse(), torch.tensor(1.0)), "w", "sparse"),
    (lambda: stats.scalar(x=10**400), "x", "number"),
])
def test_a_value_export_could_not_read_is_rejected_at_the_call_with_value_error(call, key, words):
    stats.scalar(kept=1.0)
    with pytest.raises(ValueError) as info:
        call()
    assert f"`{key}`" in str(info.value) and words in str(info.value), str(info.value)
    # Nothing of the failed call was recorded, and the tracker still exports.
    exported = stats.export_all(log=False)
    assert exported["kept"] == 1.0 and not any(k.startswith(("x", "w")) for k in exported), exported


@pytest.mark.parametrize("name", [None, 3, b"bytes", ["a"]])
def test_a_scope_name_that_is_not_a_string_raises_a_documented_error(name):
    for make in (stats.scope, stats.scope_func_wrapper):
        with pytest.raises(TypeError, match="scope") as info:
            make(name)
        assert isinstance(info.value, ValueError)  # the documented misuse type, too


class _Untransferable(torch.Tensor):
    """A tensor subclass whose values cannot be gathered to the host (a sharded or
    remote tensor whose backend failed): every operation works until export."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.stack, torch.Tensor.cpu, torch.Tensor.tolist):
            raise RuntimeError("the device holding this tensor is gone")
        return super().__torch_function__(func, types, args, kwargs or {})


def test_export_never_fails_on_recorded_data_and_counts_what_it_leaves_out():
    other = stats.get("other_tracker")
    other.scalar(reward=2.0)
    stats.denominator(n=_mask(3))
    stats.stat(good=torch.tensor([1.0, 2.0, 3.0]), denominator="n")
    stats.stat_compact(_mask(2), bad=torch.tensor([1.0, 5.0]).as_subclass(_Untransferable))
    before = otel_rl.diagnostics().get("stats_export_error", 0)
    exported = stats.export_all(log=False)
    assert exported["other_tracker/reward"] == 2.0 and exported["good/avg"] == 2.0
    assert not any(k.startswith("bad") for k in exported), exported
    assert otel_rl.diagnostics()["stats_export_error"] == before + 1
    assert stats.export_all(log=False) == {}  # exported (or counted as lost) once
