"""Training figures per step, from ``otel_rl.stats`` exports, beside the timing views.

Every line of ``stats-r{rank}.jsonl`` is one tracker's export at one step
(``{"time", "step", "tracker", "rank", "values"}``). The view puts a step's
values from every tracker and rank side by side, so reward, acceptance and loss
sit next to the phase and span timings of the same step.
"""

from __future__ import annotations

from typing import Any

from ._model import RunData
from ._stats import step_sort_key

#: Keys shown first (and in the terminal table): the ones an RL run is judged by.
HEADLINE = ("reward", "accept", "correct", "loss", "kl", "entropy", "grad_norm", "staleness")
#: Columns of the terminal table; the JSON and HTML views hold every key.
MAX_TABLE_KEYS = 8


def _rank(key: str) -> tuple[int, str]:
    lowered = key.lower()
    for i, word in enumerate(HEADLINE):
        if word in lowered:
            return i, key
    return len(HEADLINE), key


def training(data: RunData) -> dict[str, Any]:
    """Per step, the values every ``otel_rl.stats`` export recorded (``--step`` applies).

    Returns:
        ``{"keys": [...], "headline": [...], "rows": [{"step", "values": {key: value}}]}``:
        keys with the headline ones (reward, acceptance, correctness, loss, ...) first,
        ``__count`` keys left out; a key exported by several ranks of one step is
        their mean (every rank of a reduce group exports the same value).
    """
    by_step: dict[Any, dict[str, list[float]]] = {}
    for rec in data.stats:
        step = rec.get("step")
        if data.steps is not None and step not in data.steps:
            continue
        values = rec.get("values")
        if not isinstance(values, dict):
            continue
        bucket = by_step.setdefault(step, {})
        for key, value in values.items():
            if key.endswith("__count") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            bucket.setdefault(str(key), []).append(float(value))
    keys = sorted({k for bucket in by_step.values() for k in bucket}, key=_rank)
    rows = [{"step": step, "values": {k: sum(v) / len(v) for k, v in sorted(bucket.items(), key=lambda kv: _rank(kv[0]))}}
            for step, bucket in sorted(by_step.items(), key=lambda item: step_sort_key(item[0]))]
    headline = [k for k in keys if _rank(k)[0] < len(HEADLINE)][:MAX_TABLE_KEYS]
    return {"keys": keys, "headline": headline or keys[:MAX_TABLE_KEYS], "rows": rows}
