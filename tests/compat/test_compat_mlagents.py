"""otel_rl.timers as a drop-in for Unity ML-Agents' ``mlagents_envs.timers``.

Each test checks one behaviour ML-Agents documents or relies on at a call site:
``learn.py`` dumps ``get_timer_tree()`` to ``timers.json`` with no setup, the
trainer controller merges each trainer thread's stack into the main thread
(``get_timer_stack_for_thread``, ``TimerNode.merge``, ``merge_gauges``), and the
subprocess env manager merges every worker process's root
(``get_timer_root`` then ``reset_timers`` in the worker). Its own tests patch
``_get_thread_timer`` (or, in older releases, ``_global_timer_stack``).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import math
import multiprocessing
import pickle
import sys
import threading
import time
from unittest import mock

import pytest
from pytest import approx
from support import one, run_python

import otel_rl
from otel_rl import report, timers
from otel_rl._internal import guard

ANY = mock.ANY
ML_AGENTS_NAMES = (
    "TIMER_FORMAT_VERSION", "TimerNode", "GaugeNode", "TimerStack", "hierarchical_timer", "timed",
    "set_gauge", "merge_gauges", "add_metadata", "get_timer_tree", "get_timer_root", "reset_timers",
    "get_timer_stack_for_thread",
)
DEFAULT_METADATA_KEYS = {"timer_format_version", "start_time_seconds", "end_time_seconds",
                         "python_version", "command_line_arguments"}


@pytest.fixture
def stack():
    """A private TimerStack that every default-stack call of this test records into."""
    private = timers.TimerStack()
    with mock.patch("otel_rl.timers._get_thread_timer", return_value=private):
        yield private


@pytest.fixture
def counters():
    guard.clear()
    yield guard.diagnostics
    guard.clear()


def _paths(tree, prefix=()):
    """{path tuple: node dict} for every node below ``tree``."""
    out = {}
    for name, child in (tree.get("children") or {}).items():
        out[prefix + (name,)] = child
        out.update(_paths(child, prefix + (name,)))
    return out


def _run_in_thread(fn):
    box = {}

    def target():
        box["value"] = fn()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    return box["value"], thread


# --- names and signatures -------------------------------------------------------------------------
def test_every_public_name_of_mlagents_timers_is_importable_from_otel_rl_timers():
    missing = [name for name in ML_AGENTS_NAMES if not hasattr(timers, name)]
    assert missing == []
    assert set(ML_AGENTS_NAMES) <= set(timers.__all__)


def test_functions_show_mlagents_signatures():
    def params(fn):
        return {name: p.default for name, p in inspect.signature(fn).parameters.items()}

    empty = inspect.Parameter.empty
    assert params(timers.hierarchical_timer) == {"name": empty, "timer_stack": None}
    assert params(timers.timed) == {"func": empty}
    assert params(timers.set_gauge) == {"name": empty, "value": empty, "timer_stack": None}
    assert params(timers.merge_gauges) == {"gauges": empty, "timer_stack": None}
    assert params(timers.add_metadata) == {"key": empty, "value": empty, "timer_stack": None}
    for fn in (timers.get_timer_tree, timers.get_timer_root, timers.reset_timers):
        assert params(fn) == {"timer_stack": None}
    assert params(timers.get_timer_stack_for_thread) == {"t": empty}
    assert params(timers.TimerNode.merge) == {"self": empty, "other": empty, "root_name": None,
                                              "is_parallel": True}


def test_timer_format_version_is_mlagents_value_and_shared_with_the_report():
    report_timer_tree = importlib.import_module("otel_rl.report.timer_tree")

    assert timers.TIMER_FORMAT_VERSION == "0.1.0"
    assert report_timer_tree.TIMER_FORMAT_VERSION == timers.TIMER_FORMAT_VERSION


def test_timer_node_starts_empty_with_mlagents_fields():
    node = timers.TimerNode()
    assert (node.children, node.total, node.count, node.is_parallel) == ({}, 0.0, 0, False)
    child = node.get_child("a")
    assert node.get_child("a") is child and node.add_child("a") is child
    child.add_time(0.5)
    child.add_time(0.25)
    assert (child.total, child.count) == (0.75, 2)


# --- no setup --------------------------------------------------------------------------------------
def test_get_timer_tree_works_without_configure_in_a_fresh_process(tmp_path):
    # What learn.py does at the end of training: no otel_rl setup at all.
    code = """
import json, sys, time
from otel_rl.timers import add_metadata, get_timer_tree, hierarchical_timer, timed
import otel_rl
assert not otel_rl.is_configured()

@timed
def advance():
    with hierarchical_timer("env_step"):
        time.sleep(0.002)

add_metadata("mlagents_version", "1.0")
with hierarchical_timer("run_training.setup"):
    pass
for _ in range(3):
    advance()
with open(sys.argv[1], "w") as f:
    json.dump(get_timer_tree(), f, indent=4)
"""
    path = tmp_path / "timers.json"
    run_python(code, None, str(path), check=True, timeout=120)
    tree = json.loads(path.read_text())
    assert tree["name"] == "root" and tree["count"] == 1
    assert set(tree["children"]) == {"run_training.setup", "advance"}
    advance = tree["children"]["advance"]
    assert advance["count"] == 3
    assert advance["children"]["env_step"]["count"] == 3
    assert advance["children"]["env_step"]["total"] >= 0.006
    assert tree["metadata"]["mlagents_version"] == "1.0"
    assert set(tree["metadata"]) == DEFAULT_METADATA_KEYS | {"mlagents_version"}


def test_default_stack_records_without_configure(stack):
    assert not otel_rl.is_configured()
    with timers.hierarchical_timer("block"):
        pass
    assert timers.get_timer_tree()["children"]["block"]["count"] == 1


# --- the tree ---------------------------------------------------------------------------------------
def test_nested_blocks_keep_one_node_per_name_path(stack):
    for _ in range(4):
        with timers.hierarchical_timer("outer"):
            with timers.hierarchical_timer("inner"):
                pass
        with timers.hierarchical_timer("inner"):
            pass
    root = stack.root
    assert set(root.children) == {"outer", "inner"}
    assert root.children["outer"].count == 4
    assert root.children["outer"].children["inner"].count == 4
    assert root.children["inner"].count == 4
    assert root.children["inner"] is not root.children["outer"].children["inner"]


def test_tree_dict_has_mlagents_node_fields_and_self_time(stack):
    with timers.hierarchical_timer("parent"):
        time.sleep(0.003)
        with timers.hierarchical_timer("child"):
            time.sleep(0.002)
    tree = timers.get_timer_tree()
    assert set(tree) == {"name", "metadata", "total", "count", "self", "children"}
    parent = tree["children"]["parent"]
    assert set(parent) == {"total", "count", "self", "children"}
    child = parent["children"]["child"]
    assert set(child) == {"total", "count", "self"}  # no empty "children", no "is_parallel"
    assert parent["self"] == approx(parent["total"] - child["total"])
    assert child["self"] == child["total"] >= 0.002
    assert tree["self"] == approx(max(0.0, tree["total"] - parent["total"]))


def test_root_total_is_time_since_the_stack_was_made(stack):
    time.sleep(0.01)
    root = timers.get_timer_root()
    assert root is stack.root and root.count == 1 and root.total >= 0.01


def test_default_metadata_has_exactly_mlagents_keys(stack):
    meta = timers.get_timer_tree()["metadata"]
    assert set(meta) == DEFAULT_METADATA_KEYS
    assert meta["timer_format_version"] == timers.TIMER_FORMAT_VERSION
    assert meta["python_version"] == sys.version
    assert meta["command_line_arguments"] == " ".join(sys.argv)
    assert int(meta["start_time_seconds"]) <= int(meta["end_time_seconds"]) <= time.time()


def test_add_metadata_adds_a_key_to_the_tree(stack):
    timers.add_metadata("pytorch_version", "2.3.0")
    assert timers.get_timer_tree()["metadata"]["pytorch_version"] == "2.3.0"


def test_block_that_raises_is_counted_and_the_exception_propagates(stack):
    with pytest.raises(RuntimeError, match="timeout"):
        with timers.hierarchical_timer("raises"):
            raise RuntimeError("timeout!")
    with timers.hierarchical_timer("after"):
        pass
    assert stack.root.children["raises"].count == 1
    assert "after" in stack.root.children  # the failed block was closed: "after" is not under it
    assert stack.stack == [stack.root]


def test_hierarchical_timer_yields_the_node_of_its_block(stack):
    with timers.hierarchical_timer("workers") as node:
        pass
    assert node is stack.root.children["workers"] and node.count == 1


def test_timed_names_the_node_by_qualified_name_and_keeps_the_function(stack):
    class Trainer:
        @timers.timed
        def advance(self, x):
            """Docstring kept."""
            return x * 2

    assert Trainer().advance(3) == 6
    assert Trainer.advance.__doc__ == "Docstring kept."
    assert Trainer.advance.__name__ == "advance"
    assert set(stack.root.children) == {Trainer.advance.__wrapped__.__qualname__}
    assert stack.root.children[Trainer.advance.__qualname__].count == 1


def test_timed_with_a_name_uses_that_name(stack):
    @timers.timed("env.step")
    def step():
        return 1

    step()
    assert stack.root.children["env.step"].count == 1


def test_hierarchical_timer_also_decorates(stack):
    @timers.hierarchical_timer("update")
    def update():
        with timers.hierarchical_timer("backward"):
            pass

    update()
    update()
    assert stack.root.children["update"].count == 2
    assert stack.root.children["update"].children["backward"].count == 2


def test_timed_generator_is_timed_from_first_item_to_its_end(stack):
    @timers.timed
    def batches():
        for i in range(3):
            with timers.hierarchical_timer("load"):
                time.sleep(0.001)
            yield i

    assert list(batches()) == [0, 1, 2]
    node = stack.root.children[batches.__wrapped__.__qualname__]
    assert node.count == 1 and node.children["load"].count == 3
    assert node.total >= node.children["load"].total


def test_code_between_items_of_a_timed_generator_is_not_nested_under_it(stack):
    @timers.timed
    def items():
        yield 1
        yield 2

    for _ in items():
        with timers.hierarchical_timer("consumer"):
            pass
    assert stack.root.children["consumer"].count == 2


def test_exception_thrown_into_a_timed_generator_reaches_it(stack):
    seen = []

    @timers.timed
    def gen():
        try:
            yield 1
        except KeyError as exc:
            seen.append(exc)
            yield 2

    g = gen()
    assert next(g) == 1
    assert g.throw(KeyError("k")) == 2
    g.close()
    assert len(seen) == 1


def test_timed_coroutine_covers_the_await(stack):
    @timers.timed
    async def fetch():
        await asyncio.sleep(0.002)
        return 5

    assert asyncio.run(fetch()) == 5
    node = stack.root.children[fetch.__wrapped__.__qualname__]
    assert node.count == 1 and node.total >= 0.002


# --- gauges -----------------------------------------------------------------------------------------
def test_gauge_keeps_last_value_min_max_and_count(stack):
    for value in (2.0, 7.5, -1.0, 3.0):
        timers.set_gauge("reward", value)
    assert timers.get_timer_tree()["gauges"] == {
        "reward": {"value": 3.0, "min": -1.0, "max": 7.5, "count": 4}}


def test_nan_gauge_values_are_ignored(stack):
    timers.set_gauge("loss", 1.0)
    timers.set_gauge("loss", math.nan)
    assert stack.gauges["loss"].as_dict() == {"value": 1.0, "min": 1.0, "max": 1.0, "count": 1}


def test_tree_has_no_gauges_key_until_a_gauge_is_set(stack):
    assert "gauges" not in timers.get_timer_tree()


def test_gauge_value_that_is_not_a_number_is_ignored_not_raised(stack, counters):
    timers.set_gauge("reward", "high")
    timers.set_gauge("reward", None)
    assert "reward" not in stack.gauges
    assert counters()["bad_gauge_value"] == 2


# --- the mock patterns of ML-Agents' own tests ------------------------------------------------------
def test_patching_get_thread_timer_redirects_blocks_gauges_and_trees():
    private = timers.TimerStack()
    with mock.patch("otel_rl.timers._get_thread_timer", return_value=private):
        with timers.hierarchical_timer("top_level"):
            timers.set_gauge("g", 1.0)
        assert timers.get_timer_tree() == {
            "name": "root", "total": ANY, "count": 1, "self": ANY,
            "children": {"top_level": {"total": ANY, "count": 1, "self": ANY}},
            "gauges": {"g": {"value": 1.0, "min": 1.0, "max": 1.0, "count": 1}},
            "metadata": {key: ANY for key in DEFAULT_METADATA_KEYS},
        }
    assert "top_level" in private.root.children


def test_patching_the_global_timer_stack_redirects_the_main_thread():
    with mock.patch("otel_rl.timers._global_timer_stack", new_callable=timers.TimerStack) as private:
        with timers.hierarchical_timer("top_level"):
            pass
        assert set(private.root.children) == {"top_level"}


# --- reset -------------------------------------------------------------------------------------------
def test_reset_timers_starts_a_new_tree_and_leaves_a_handed_out_root_alone(stack):
    with timers.hierarchical_timer("before"):
        pass
    timers.set_gauge("g", 1.0)
    timers.add_metadata("extra", "x")
    old_root = timers.get_timer_root()
    timers.reset_timers()
    with timers.hierarchical_timer("after"):
        pass
    assert set(old_root.children) == {"before"}
    tree = timers.get_timer_tree()
    assert set(tree["children"]) == {"after"}
    assert "gauges" not in tree and set(tree["metadata"]) == DEFAULT_METADATA_KEYS


def test_reset_inside_an_open_block_does_not_break_later_blocks(stack):
    with timers.hierarchical_timer("open"):
        timers.reset_timers()
        with timers.hierarchical_timer("inside"):
            pass
    with timers.hierarchical_timer("later"):
        pass
    assert set(stack.root.children) == {"inside", "later"}
    assert stack.stack == [stack.root]


# --- merging -----------------------------------------------------------------------------------------
def test_merge_adds_totals_and_counts_under_root_name_and_marks_parallel():
    mine, other = timers.TimerStack(), timers.TimerStack()
    other.push("env_step")
    other.stack[-1].add_time(2.0)
    other.pop()
    root = other.get_root()
    with timers.hierarchical_timer("workers", timer_stack=mine) as node:
        node.merge(root, root_name="worker_root", is_parallel=True)
        node.merge(root, root_name="worker_root", is_parallel=True)
    worker_root = node.children["worker_root"]
    assert worker_root.count == 2 and worker_root.is_parallel
    assert worker_root.children["env_step"].total == 4.0
    assert worker_root.children["env_step"].count == 2
    assert worker_root.children["env_step"].is_parallel
    tree = mine.get_timing_tree()
    assert tree["children"]["workers"]["children"]["worker_root"]["is_parallel"] is True


def test_merge_without_parallel_leaves_flags_off():
    a, b = timers.TimerNode(), timers.TimerNode()
    b.get_child("x").add_time(1.0)
    a.merge(b, is_parallel=False)
    assert a.children["x"].total == 1.0 and not a.children["x"].is_parallel and not a.is_parallel


def test_merging_a_node_into_its_own_subtree_terminates():
    root = timers.TimerNode()
    child = root.get_child("workers")
    child.add_time(1.0)
    child.merge(root, root_name="worker_root")
    assert child.children["worker_root"].children["workers"].total == 1.0


def test_merge_accepts_a_tree_dict_read_from_timers_json():
    tree = {"total": 3.0, "count": 1, "self": 1.0,
            "children": {"step": {"total": 2.0, "count": 5, "self": 2.0, "is_parallel": True}}}
    node = timers.TimerNode()
    node.merge(json.loads(json.dumps(tree)), root_name="remote", is_parallel=False)
    remote = node.children["remote"]
    assert (remote.total, remote.count) == (3.0, 1)
    assert (remote.children["step"].count, remote.children["step"].is_parallel) == (5, True)


def test_merge_gauges_keeps_the_later_value_and_combines_min_max_count():
    mine = timers.TimerStack()
    mine.set_gauge("reward", 5.0)
    other = timers.TimerStack()
    time.sleep(0.01)
    other.set_gauge("reward", 1.0)
    other.set_gauge("reward", 2.0)
    other.set_gauge("entropy", 0.3)
    timers.merge_gauges(other.gauges, timer_stack=mine)
    assert mine.gauges["reward"].as_dict() == {"value": 2.0, "min": 1.0, "max": 5.0, "count": 3}
    assert mine.gauges["entropy"].as_dict() == {"value": 0.3, "min": 0.3, "max": 0.3, "count": 1}


def test_merged_gauges_are_copies_not_shared_with_the_other_stack():
    mine, other = timers.TimerStack(), timers.TimerStack()
    other.set_gauge("g", 1.0)
    timers.merge_gauges(other.gauges, timer_stack=mine)
    other.set_gauge("g", 9.0)
    assert mine.gauges["g"].value == 1.0 and mine.gauges["g"].count == 1


def test_merge_gauges_accepts_the_dict_form_of_a_tree():
    mine = timers.TimerStack()
    timers.merge_gauges({"g": {"value": 4.0, "min": 0.0, "max": 4.0, "count": 3}}, timer_stack=mine)
    assert mine.gauges["g"].as_dict() == {"value": 4.0, "min": 0.0, "max": 4.0, "count": 3}


def test_timer_node_and_gauge_node_survive_pickling():
    node = timers.TimerNode()
    node.get_child("a").add_time(1.5)
    node.is_parallel = True
    copy = pickle.loads(pickle.dumps(node))
    assert copy.children["a"].total == 1.5 and copy.is_parallel
    gauge = pickle.loads(pickle.dumps(timers.GaugeNode(2.0)))
    assert gauge.as_dict() == {"value": 2.0, "min": 2.0, "max": 2.0, "count": 1}


# --- threads -----------------------------------------------------------------------------------------
def test_each_thread_has_its_own_stack():
    barrier = threading.Barrier(2)
    trees = {}

    def target(name):
        barrier.wait()  # both threads time blocks at the same time
        for _ in range(3):
            with timers.hierarchical_timer(name):
                time.sleep(0.001)
        trees[name] = timers.get_timer_tree()

    threads = [threading.Thread(target=target, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert set(trees["a"]["children"]) == {"a"} and set(trees["b"]["children"]) == {"b"}
    assert trees["a"]["children"]["a"]["count"] == trees["b"]["children"]["b"]["count"] == 3
    for t, name in zip(threads, ("a", "b")):
        assert set(timers.get_timer_stack_for_thread(t).root.children) == {name}
    assert "a" not in timers.get_timer_stack_for_thread(threading.main_thread()).root.children


def test_trainer_thread_stack_merges_into_the_controller_thread():
    # TrainerController.join_threads: merge each trainer thread's root and gauges.
    def trainer():
        for _ in range(2):
            with timers.hierarchical_timer("trainer_advance"):
                pass
        timers.set_gauge("policy_queue", 4.0)

    def controller():  # a thread of its own, so its default stack starts empty
        _, thread = _run_in_thread(trainer)
        with timers.hierarchical_timer("trainer_threads") as main_node:
            thread_stack = timers.get_timer_stack_for_thread(thread)
            main_node.merge(thread_stack.root, root_name="thread_root", is_parallel=True)
            timers.merge_gauges(thread_stack.gauges)
        return timers.get_timer_tree()

    tree, _ = _run_in_thread(controller)
    assert set(tree["children"]) == {"trainer_threads"}
    merged = tree["children"]["trainer_threads"]["children"]["thread_root"]
    assert merged["is_parallel"] is True
    assert merged["children"]["trainer_advance"]["count"] == 2
    assert merged["children"]["trainer_advance"]["is_parallel"] is True
    assert tree["gauges"]["policy_queue"] == {"value": 4.0, "min": 4.0, "max": 4.0, "count": 1}


def test_stack_of_an_unstarted_thread_is_none():
    assert timers.get_timer_stack_for_thread(threading.Thread(target=lambda: None)) is None


def test_main_thread_stack_is_the_default_stack_of_the_main_thread():
    assert threading.current_thread() is threading.main_thread()
    assert timers.get_timer_stack_for_thread(threading.main_thread()) is timers._get_thread_timer()


# --- a subprocess merges into the parent ------------------------------------------------------------
def _env_worker(queue, worker_id, steps):
    """An env worker as ML-Agents runs one: after each step it sends its root, then resets."""
    for step in range(steps):
        with timers.hierarchical_timer("env.step"):
            with timers.hierarchical_timer("communicator.exchange"):
                time.sleep(0.001)
        timers.set_gauge("worker_id", float(worker_id))
        gauges = timers.get_timer_stack_for_thread(threading.current_thread()).gauges
        queue.put((worker_id, timers.get_timer_root(), dict(gauges)))
        timers.reset_timers()


def test_subprocess_roots_merge_into_the_parent_tree(stack):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_env_worker, args=(queue, wid, 2)) for wid in range(2)]
    for proc in procs:
        proc.start()
    responses = [queue.get(timeout=120) for _ in range(4)]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    for _, root, gauges in responses:
        # _postprocess_steps: every worker root merged under "workers" as "worker_root".
        with timers.hierarchical_timer("workers") as main_node:
            main_node.merge(root, root_name="worker_root", is_parallel=True)
        timers.merge_gauges(gauges)
    tree = timers.get_timer_tree()
    workers = tree["children"]["workers"]
    assert workers["count"] == 4
    worker_root = workers["children"]["worker_root"]
    assert worker_root["count"] == 4 and worker_root["is_parallel"] is True
    step = worker_root["children"]["env.step"]
    assert step["count"] == 4  # one step per message: each worker reset after sending
    assert step["children"]["communicator.exchange"]["count"] == 4
    assert step["children"]["communicator.exchange"]["total"] >= 0.004
    assert tree["gauges"]["worker_id"]["count"] == 4
    assert (tree["gauges"]["worker_id"]["min"], tree["gauges"]["worker_id"]["max"]) == (0.0, 1.0)


# --- asyncio -----------------------------------------------------------------------------------------
def test_concurrent_asyncio_tasks_nest_under_their_own_blocks_and_overlap_is_parallel(stack):
    async def session(i):
        async with timers.hierarchical_timer("session"):
            with timers.hierarchical_timer("generate"):
                await asyncio.sleep(0.002 * (2 - i))
            await asyncio.sleep(0)
            with timers.hierarchical_timer("reward"):
                pass

    async def main():
        with timers.hierarchical_timer("rollout"):
            await asyncio.gather(session(0), session(1))

    asyncio.run(main())
    paths = _paths(timers.get_timer_tree())
    assert set(paths) == {("rollout",), ("rollout", "session"), ("rollout", "session", "generate"),
                          ("rollout", "session", "reward")}
    assert paths[("rollout", "session")]["count"] == 2
    assert paths[("rollout", "session")]["is_parallel"] is True
    assert "is_parallel" not in paths[("rollout",)]
    assert stack.stack == [stack.root]


# --- bad input ---------------------------------------------------------------------------------------
def test_unknown_keyword_arguments_are_accepted_ignored_and_counted(stack, counters):
    with timers.hierarchical_timer("block", color="red"):
        pass
    timers.set_gauge("g", 1.0, unit="s")
    timers.add_metadata("k", "v", scope="run")
    tree = timers.get_timer_tree(pretty=True)
    timers.merge_gauges({}, strategy="max")
    timers.get_timer_root(refresh=True)
    timers.reset_timers(hard=True)
    assert tree["children"]["block"]["count"] == 1
    assert counters()["ignored_argument"] == 7


def test_non_text_timer_names_become_text(stack):
    with timers.hierarchical_timer(3):
        pass
    json.dumps(timers.get_timer_tree())
    assert "3" in stack.root.children


def test_merging_something_that_is_not_a_tree_is_reported_not_raised(counters):
    node = timers.TimerNode()
    node.merge(object())
    assert node.count == 0 and counters()["timer_error"] == 1


def test_unbalanced_pop_keeps_the_root():
    s = timers.TimerStack()
    s.pop()
    s.pop()
    assert s.stack == [s.root] and s.push("x") is s.root.children["x"]


# --- with tracing configured -------------------------------------------------------------------------
def test_configured_blocks_are_also_nested_spans_and_gauges_span_events(traced, stack):
    @timers.timed
    def train():
        with timers.hierarchical_timer("backward"):
            timers.set_gauge("loss", 0.25)

    train()
    spans = traced.spans()
    outer = one(spans, train.__wrapped__.__qualname__)
    inner = one(spans, "backward")
    assert inner["parent_span_id"] == outer["span_id"]
    assert [e["name"] for e in inner["events"]] == ["loss"]
    assert inner["events"][0]["attributes"]["rl.gauge.value"] == 0.25
    assert stack.root.children[train.__wrapped__.__qualname__].children["backward"].count == 1


def test_unconfigured_blocks_make_no_spans(stack):
    from opentelemetry import trace

    assert not otel_rl.is_configured()
    with timers.hierarchical_timer("quiet"):
        current = trace.get_current_span()
    assert current is trace.INVALID_SPAN
    assert stack.root.children["quiet"].count == 1


def test_in_memory_tree_matches_the_report_tree_rebuilt_from_spans(tmp_path):
    otel_rl.configure(fileroot=str(tmp_path), rank=0, export_process=False)

    def work():
        @timers.timed
        def step():
            with timers.hierarchical_timer("forward"):
                time.sleep(0.001)
            with timers.hierarchical_timer("backward"):
                time.sleep(0.002)
            timers.set_gauge("loss", 0.5)

        for _ in range(3):
            step()
        return timers.get_timer_tree()

    memory, _ = _run_in_thread(work)  # a new thread: a stack of its own, nothing else in it
    settings = otel_rl.settings()
    otel_rl.shutdown()
    data = report.load(settings.run_dir)
    rebuilt = report.timer_tree(data)
    mem_paths, rep_paths = _paths(memory), _paths(rebuilt)
    assert mem_paths and set(mem_paths) == set(rep_paths)
    for path, node in mem_paths.items():
        assert set(node) == set(rep_paths[path])
        assert rep_paths[path]["count"] == node["count"]
        assert rep_paths[path]["total"] == approx(node["total"], abs=5e-3)
    assert rebuilt["gauges"]["loss"] == memory["gauges"]["loss"]
    assert rebuilt["metadata"]["timer_format_version"] == memory["metadata"]["timer_format_version"]
