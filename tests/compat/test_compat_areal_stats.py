"""otel_rl.stats as a drop-in for AReaL's ``areal.utils.stats_tracker``.

Each test states one behaviour of AReaL's stats tracker (its source, its
tests and its call sites in the engines and trainers) in its own words and
checks otel_rl against it, with real torch tensors. Expected values are
worked out by hand or with plain Python from the inputs.
"""

from __future__ import annotations

import math

import pytest
import torch

import otel_rl
from otel_rl import stats as stats_tracker
from otel_rl.stats import DistributedStatsTracker, ReduceType


@pytest.fixture(autouse=True)
def _empty_trackers():
    """Trackers are process-wide, as in AReaL: each test starts and ends with none recorded."""
    stats_tracker.export_all(log=False)
    yield
    stats_tracker.export_all(log=False)


def _diagnostic(kind):
    return otel_rl.diagnostics().get(kind, 0)


# --------------------------------------------------------------------------- names and call forms


def test_module_has_every_name_areal_code_uses():
    for name in ("DEFAULT_TRACKER", "DistributedStatsTracker", "ReduceType", "TRACKERS", "LOCK",
                 "MOE_AUX_LOSSES", "get", "export_all", "export", "scope", "scope_func_wrapper",
                 "scalar", "stat", "denominator", "record_timing", "stat_compact", "weighted_mean"):
        assert hasattr(stats_tracker, name), name
    assert [member.name for member in ReduceType][:6] == ["AVG_MIN_MAX", "AVG", "SUM", "MIN", "MAX", "SCALAR"]
    assert ReduceType.WEIGHTED_AVG in ReduceType


def test_module_functions_act_on_the_default_tracker():
    assert stats_tracker.get() is stats_tracker.DEFAULT_TRACKER
    assert stats_tracker.TRACKERS[""] is stats_tracker.DEFAULT_TRACKER
    stats_tracker.scalar(lr=0.5)
    assert stats_tracker.DEFAULT_TRACKER.export() == {"lr": 0.5, "lr__count": 1}


def test_get_registers_named_trackers_in_trackers():
    tracker = stats_tracker.get("eval-rollout")
    assert stats_tracker.TRACKERS["eval-rollout"] is tracker
    assert isinstance(tracker, DistributedStatsTracker)


def test_clearing_trackers_keeps_the_default_tracker_exported():
    stats_tracker.get("rollout").scalar(reward=1.0)
    stats_tracker.export_all(reset=True)
    stats_tracker.TRACKERS.clear()  # an idiom of AReaL test suites
    stats_tracker.scalar(global_step=2)
    assert stats_tracker.export_all() == {"global_step": 2.0, "global_step__count": 1}
    assert stats_tracker.get() is stats_tracker.DEFAULT_TRACKER


def test_export_accepts_key_sync_group_in_one_process():
    stats_tracker.scalar(loss=2.0)
    assert stats_tracker.export(reduce_group=None, key_sync_group=None) == {"loss": 2.0, "loss__count": 1}


def test_export_all_accepts_key_sync_group_as_the_megatron_engine_passes_it():
    stats_tracker.scalar(loss=2.0)
    stats_tracker.get("rollout").scalar(reward=1.0)
    out = stats_tracker.export_all(reduce_group=None, key_sync_group=None)
    assert out == {"loss": 2.0, "loss__count": 1, "rollout/reward": 1.0, "rollout/reward__count": 1}


def test_export_positional_arguments_follow_current_areal_order():
    stats_tracker.scalar(x=1.0)
    # export(key, reduce_group, key_sync_group, reset)
    assert stats_tracker.export(None, None, None, False) == {"x": 1.0, "x__count": 1}
    assert stats_tracker.export() == {"x": 1.0, "x__count": 1}


def test_export_all_positional_arguments_follow_current_areal_order():
    stats_tracker.scalar(x=1.0)
    # export_all(reduce_group, key_sync_group, reset)
    assert stats_tracker.export_all(None, None, False) == {"x": 1.0, "x__count": 1}
    assert stats_tracker.export_all() == {"x": 1.0, "x__count": 1}


def test_older_areal_positional_reset_still_means_reset():
    stats_tracker.scalar(x=1.0)
    # Older AReaL: export(key, reduce_group, reset, gloo_group), export_all(reduce_group, reset, gloo_group).
    assert stats_tracker.export(None, None, False) == {"x": 1.0, "x__count": 1}
    assert stats_tracker.export_all(None, False, None) == {"x": 1.0, "x__count": 1}
    assert stats_tracker.export_all() == {"x": 1.0, "x__count": 1}


def test_older_areal_gloo_group_keyword_is_accepted():
    stats_tracker.scalar(x=1.0)
    assert stats_tracker.export_all(reduce_group=None, gloo_group=None) == {"x": 1.0, "x__count": 1}


def test_unknown_export_keywords_are_ignored_and_counted():
    before = _diagnostic("ignored_argument")
    stats_tracker.scalar(x=1.0)
    assert stats_tracker.export(future_option=True) == {"x": 1.0, "x__count": 1}
    assert stats_tracker.export_all(another_future_option=3) == {}
    assert _diagnostic("ignored_argument") - before == 2


def test_reduce_group_keyword_is_accepted_by_every_recording_call():
    mask = torch.tensor([True, False, True])
    stats_tracker.denominator(n=mask, reduce_group=None)
    stats_tracker.stat(x=torch.tensor([1.0, 5.0, 3.0]), denominator="n", reduce_group=None)
    stats_tracker.scalar(lr=0.1, reduce_group=None)
    stats_tracker.stat_compact(mask, ReduceType.AVG, y=torch.tensor([2.0, 9.0, 4.0]), reduce_group=None)
    stats_tracker.weighted_mean("loss", torch.tensor(2.0), torch.tensor(1.0), reduce_group=None)
    assert stats_tracker.export() == {"n": 2.0, "x/avg": 2.0, "x/min": 1.0, "x/max": 3.0, "lr": 0.1,
                                      "lr__count": 1, "y": 3.0, "loss": 2.0}


def test_scope_func_wrapper_and_nested_scopes_build_the_key():
    @stats_tracker.scope_func_wrapper("update")
    def update():
        stats_tracker.scalar(loss=1.0)

    with stats_tracker.scope("ppo_actor"):
        update()
    assert stats_tracker.export() == {"ppo_actor/update/loss": 1.0, "ppo_actor/update/loss__count": 1}


def test_named_tracker_prefixes_keys_and_disable_scope_drops_the_prefix():
    tracker = DistributedStatsTracker("train")
    with tracker.scope("actor"):
        with tracker.disable_scope():
            tracker.scalar(global_step=7)
        tracker.scalar(lr=0.1)
    assert set(tracker.export()) == {"global_step", "global_step__count", "train/actor/lr", "train/actor/lr__count"}


def test_record_timing_key_ignores_scopes_and_tracker_name():
    tracker = stats_tracker.get("rollout")
    with tracker.scope("workflow"):
        with tracker.record_timing("generate"):
            pass
    out = tracker.export()
    assert set(out) == {"timeperf/generate", "timeperf/generate__count"}
    assert out["timeperf/generate"] >= 0.0


def test_export_of_one_key_takes_only_that_key():
    with stats_tracker.scope("actor"):
        stats_tracker.scalar(loss=2.0, kl=0.5)
        assert stats_tracker.export(key="loss") == {"actor/loss": 2.0, "actor/loss__count": 1}
    assert stats_tracker.export() == {"actor/kl": 0.5, "actor/kl__count": 1}


# --------------------------------------------------------------------------- values


def test_scalar_mean_and_count():
    for value in (1.0, 2.0, 6.0):
        stats_tracker.scalar(reward=value)
    assert stats_tracker.export() == {"reward": 3.0, "reward__count": 3}


def test_scalar_reads_one_element_tensors_and_bools():
    stats_tracker.scalar(grad_norm=torch.tensor(3.5), use_dual_clip=True)
    assert stats_tracker.export() == {"grad_norm": 3.5, "grad_norm__count": 1, "use_dual_clip": 1.0,
                                      "use_dual_clip__count": 1}


def test_scalar_converts_like_float_so_numeric_strings_are_numbers():
    stats_tracker.scalar(eps_clip="0.2")
    assert stats_tracker.export() == {"eps_clip": 0.2, "eps_clip__count": 1}


def test_denominator_exports_number_of_true_elements_as_float():
    stats_tracker.denominator(n_tokens=torch.tensor([[True, False], [True, True]]))
    out = stats_tracker.export()
    assert out == {"n_tokens": 3.0} and isinstance(out["n_tokens"], float)


def test_stat_default_reduce_is_avg_min_max_over_the_mask():
    stats_tracker.denominator(n=torch.tensor([True, True, False, True]))
    stats_tracker.stat(adv=torch.tensor([1.0, -2.0, 100.0, 4.0]), denominator="n")
    assert stats_tracker.export() == {"n": 3.0, "adv/avg": 1.0, "adv/min": -2.0, "adv/max": 4.0}


def test_stat_pairs_the_nth_value_with_the_nth_denominator_mask():
    stats_tracker.denominator(n=torch.tensor([True, False]))
    stats_tracker.denominator(n=torch.tensor([False, True, True]))
    stats_tracker.stat(x=torch.tensor([1.0, 50.0]), denominator="n", reduce_type=ReduceType.SUM)
    stats_tracker.stat(x=torch.tensor([60.0, 2.0, 3.0]), denominator="n", reduce_type=ReduceType.SUM)
    assert stats_tracker.export() == {"n": 3.0, "x": 6.0}


def test_all_false_mask_omits_avg_min_max_but_keeps_sum_zero():
    stats_tracker.denominator(none=torch.zeros(2, dtype=torch.bool))
    stats_tracker.stat(x=torch.ones(2), denominator="none")
    stats_tracker.stat(total=torch.ones(2), denominator="none", reduce_type=ReduceType.SUM)
    assert stats_tracker.export() == {"none": 0.0, "total": 0.0}


def test_last_reduce_type_given_for_a_key_wins():
    stats_tracker.denominator(n=torch.tensor([True, True]))
    stats_tracker.stat(x=torch.tensor([1.0, 2.0]), denominator="n")
    stats_tracker.denominator(n=torch.tensor([True, True]))
    stats_tracker.stat(x=torch.tensor([3.0, 4.0]), denominator="n", reduce_type=ReduceType.SUM)
    assert stats_tracker.export() == {"n": 4.0, "x": 10.0}


def test_stat_call_beyond_the_recorded_masks_is_dropped_and_counted():
    before = _diagnostic("stats_unpaired_value")
    stats_tracker.denominator(n=torch.tensor([True, True]))
    stats_tracker.stat(x=torch.tensor([1.0, 3.0]), denominator="n")
    stats_tracker.stat(x=torch.tensor([100.0, 100.0]), denominator="n")  # AReaL's zip leaves it out
    assert stats_tracker.export() == {"n": 2.0, "x/avg": 2.0, "x/min": 1.0, "x/max": 3.0}
    assert _diagnostic("stats_unpaired_value") - before == 1


# --------------------------------------------------------------------------- NaN and inf


def test_scalar_nan_is_exported_as_nan_with_its_count():
    stats_tracker.scalar(loss=float("nan"))
    out = stats_tracker.export()
    assert set(out) == {"loss", "loss__count"}
    assert math.isnan(out["loss"]) and out["loss__count"] == 1


def test_scalar_nan_makes_the_mean_of_all_values_nan():
    for value in (1.0, float("nan"), 3.0):
        stats_tracker.scalar(reward=value)
    out = stats_tracker.export()
    assert math.isnan(out["reward"]) and out["reward__count"] == 3


def test_scalar_inf_is_exported_as_inf():
    stats_tracker.scalar(ratio=1.0)
    stats_tracker.scalar(ratio=float("inf"))
    assert stats_tracker.export() == {"ratio": float("inf"), "ratio__count": 2}


def test_stat_nan_inside_the_mask_makes_avg_min_and_max_nan():
    stats_tracker.denominator(n=torch.tensor([True, True, True]))
    stats_tracker.stat(loss=torch.tensor([1.0, float("nan"), 3.0]), denominator="n")
    out = stats_tracker.export()
    assert set(out) == {"n", "loss/avg", "loss/min", "loss/max"}
    assert all(math.isnan(out[f"loss/{s}"]) for s in ("avg", "min", "max"))


def test_stat_nan_outside_the_mask_is_ignored():
    stats_tracker.denominator(n=torch.tensor([True, False, True]))
    stats_tracker.stat(loss=torch.tensor([2.0, float("nan"), 6.0]), denominator="n")
    assert stats_tracker.export() == {"n": 2.0, "loss/avg": 4.0, "loss/min": 2.0, "loss/max": 6.0}


def test_stat_infinite_extreme_is_left_out_while_the_average_is_inf():
    stats_tracker.denominator(n=torch.tensor([True, True]))
    stats_tracker.stat(ratio=torch.tensor([1.0, float("inf")]), denominator="n")
    assert stats_tracker.export() == {"n": 2.0, "ratio/avg": float("inf"), "ratio/min": 1.0}


def test_stat_sum_of_nan_is_nan():
    stats_tracker.denominator(n=torch.tensor([True, True]))
    stats_tracker.stat(total=torch.tensor([1.0, float("nan")]), denominator="n", reduce_type=ReduceType.SUM)
    assert math.isnan(stats_tracker.export()["total"])


def test_nonfinite_values_are_counted_in_diagnostics_not_in_the_export():
    before = _diagnostic("stats_nonfinite_values")
    stats_tracker.scalar(loss=float("nan"))
    stats_tracker.denominator(n=torch.tensor([True, True, False]))
    stats_tracker.stat(x=torch.tensor([float("inf"), 1.0, float("nan")]), denominator="n")
    out = stats_tracker.export()
    assert not any(key.endswith("__nonfinite") for key in out)
    assert _diagnostic("stats_nonfinite_values") - before == 2


# --------------------------------------------------------------------------- argument errors


def test_stat_shape_differing_from_its_mask_raises_assertion_error():
    stats_tracker.denominator(n=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(AssertionError):
        stats_tracker.stat(x=torch.ones(3, 2), denominator="n")


def test_stat_without_recorded_denominator_raises_value_error():
    with pytest.raises(ValueError, match="does not exist"):
        stats_tracker.stat(x=torch.ones(3), denominator="missing")


def test_denominator_that_is_not_bool_raises_value_error():
    with pytest.raises(ValueError):
        stats_tracker.denominator(n=torch.ones(3))


def test_empty_denominator_raises_value_error():
    with pytest.raises(ValueError):
        stats_tracker.denominator(n=torch.zeros(0, dtype=torch.bool))


def test_empty_stat_raises_value_error():
    stats_tracker.denominator(n=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError):
        stats_tracker.stat(x=torch.ones(0), denominator="n")


def test_stat_with_scalar_reduce_type_raises_value_error():
    stats_tracker.denominator(n=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError):
        stats_tracker.stat(x=torch.ones(3), denominator="n", reduce_type=ReduceType.SCALAR)


def test_stat_with_a_reduce_type_that_is_not_the_enum_raises_value_error():
    stats_tracker.denominator(n=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError):
        stats_tracker.stat(x=torch.ones(3), denominator="n", reduce_type=3)


def test_scalar_none_raises_type_error_as_float_does():
    with pytest.raises(TypeError):
        stats_tracker.scalar(x=None)


def test_scalar_of_text_raises_value_error_as_float_does():
    with pytest.raises(ValueError):
        stats_tracker.scalar(x="not a number")


def test_scalar_of_a_many_element_tensor_raises_value_error():
    with pytest.raises(ValueError):
        stats_tracker.scalar(x=torch.ones(4))


# --------------------------------------------------------------------------- stat_compact


def test_stat_compact_matches_masked_reductions_across_unequal_batches():
    tracker = DistributedStatsTracker()
    tracker.stat_compact(torch.tensor([True, False, True]), ReduceType.AVG_MIN_MAX,
                         value=torch.tensor([2.0, float("nan"), 6.0]))
    tracker.stat_compact(torch.tensor([True]), ReduceType.AVG_MIN_MAX, value=torch.tensor([12.0]))
    assert tracker.export() == {"value/avg": 20 / 3, "value/min": 2, "value/max": 12}


def test_stat_compact_without_valid_elements_omits_avg_but_keeps_sum():
    tracker = DistributedStatsTracker()
    mask = torch.tensor([False, False])
    tracker.stat_compact(mask, ReduceType.AVG_MIN_MAX, value=torch.ones(2))
    tracker.stat_compact(mask, ReduceType.SUM, count=torch.ones(2))
    assert tracker.export() == {"count": 0}


def test_stat_compact_takes_float64_values_as_the_train_inference_stats_do():
    mask = torch.tensor([True, True, False])
    delta = torch.tensor([0.5, -0.25, 9.0], dtype=torch.float64)
    with stats_tracker.scope("ppo_actor/train_infer"):
        stats_tracker.stat_compact(mask, ReduceType.SUM, n_valid_tokens=torch.ones_like(delta))
        stats_tracker.stat_compact(mask, ReduceType.AVG, kl_k1=-delta)
    assert stats_tracker.export() == {"ppo_actor/train_infer/n_valid_tokens": 2.0,
                                      "ppo_actor/train_infer/kl_k1": -0.125}


def test_stat_compact_cannot_reuse_a_stat_key():
    tracker = DistributedStatsTracker()
    mask = torch.tensor([True])
    tracker.denominator(valid=mask)
    tracker.stat(denominator="valid", value=torch.ones(1))
    with pytest.raises(ValueError, match="non-compact stats"):
        tracker.stat_compact(mask, ReduceType.AVG, value=torch.ones(1))


def test_stat_cannot_reuse_a_stat_compact_key():
    tracker = DistributedStatsTracker()
    mask = torch.tensor([True])
    tracker.stat_compact(mask, ReduceType.AVG, value=torch.ones(1))
    tracker.denominator(valid=mask)
    with pytest.raises(ValueError, match="compact stats"):
        tracker.stat(denominator="valid", value=torch.ones(1))


def test_stat_compact_value_shape_must_match_its_mask():
    with pytest.raises(AssertionError):
        stats_tracker.stat_compact(torch.ones(3, dtype=torch.bool), ReduceType.AVG, x=torch.ones(2))


# --------------------------------------------------------------------------- weighted_mean


def test_weighted_mean_fractional_weights_preserve_the_partitioned_mean():
    tracker = DistributedStatsTracker()
    tracker.weighted_mean("loss", torch.tensor(2.0), torch.tensor(0.125))
    tracker.weighted_mean("loss", torch.tensor(8.0), torch.tensor(0.375))
    combined = DistributedStatsTracker()
    combined.weighted_mean("loss", torch.tensor(6.5), torch.tensor(0.5))
    assert tracker.export() == combined.export() == {"loss": 6.5}


def test_stat_with_weighted_avg_reduce_type_raises_and_records_nothing():
    tracker = DistributedStatsTracker()
    tracker.denominator(tokens=torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="Use weighted_mean"):
        tracker.stat("tokens", reduce_type=ReduceType.WEIGHTED_AVG, loss=torch.tensor([2.0, 8.0]))
    assert tracker.export() == {"tokens": 2.0}


def test_weighted_mean_zero_weights_ignore_nonfinite_values():
    tracker = DistributedStatsTracker()
    for value in (float("nan"), float("inf"), -float("inf")):
        tracker.weighted_mean("loss", torch.tensor(value), torch.tensor(0.0))
    assert tracker.export(reset=False) == {}
    tracker.weighted_mean("loss", torch.tensor(3.0), torch.tensor(0.25))
    assert tracker.export() == {"loss": 3.0}


def test_weighted_mean_snapshots_its_inputs_and_export_of_its_scoped_key_resets_it():
    tracker = DistributedStatsTracker("update")
    value = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    weight = torch.tensor(2, dtype=torch.int64)
    tracker.weighted_mean("loss/avg", value, weight)
    with torch.no_grad():
        value.fill_(99)
        weight.fill_(99)
    assert tracker.export(reset=False) == {"update/loss/avg": 3.0}
    assert tracker.export(key="loss/avg") == {"update/loss/avg": 3.0}
    assert tracker.export() == {}
    tracker.weighted_mean("loss/avg", torch.tensor(5.0), torch.tensor(1.0))
    assert tracker.export() == {"update/loss/avg": 5.0}


@pytest.mark.parametrize("argument", ["value", "weight"])
@pytest.mark.parametrize("invalid", [1.0, torch.ones(1), torch.tensor(1j)], ids=["float", "1-d", "complex"])
def test_weighted_mean_rejects_anything_but_a_real_0d_tensor(argument, invalid):
    tracker = DistributedStatsTracker()
    arguments = {"value": torch.tensor(1.0), "weight": torch.tensor(1.0), argument: invalid}
    with pytest.raises(ValueError, match=argument):
        tracker.weighted_mean("loss", **arguments)
    assert tracker.export() == {}


@pytest.mark.parametrize("compact_first", [False, True])
def test_compact_and_weighted_stats_reject_one_key_without_corrupting_it(compact_first):
    tracker = DistributedStatsTracker()

    def compact():
        tracker.stat_compact(torch.ones(2, dtype=torch.bool), ReduceType.AVG, loss=torch.tensor([2.0, 4.0]))

    def weighted():
        tracker.weighted_mean("loss", torch.tensor(7.0), torch.tensor(0.25))

    first, second = (compact, weighted) if compact_first else (weighted, compact)
    first()
    with pytest.raises(ValueError, match="compact stats"):
        second()
    assert tracker.export()["loss"] == (3.0 if compact_first else 7.0)
