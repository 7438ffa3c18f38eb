"""The demo's environment: arithmetic tasks, their tokens, a calculator tool and the reward.

Pure Python (no torch), so the rules can be read and tested on their own.

A conversation is one token sequence::

    <bos> 2 3 + 4 5 =  <calc>  [ 6 8 ]  6 8 <eos>
    `---- prompt ----'  policy  `tool'  `policy'

The policy either answers at once (digits, then ``<eos>``) or emits
``<calc>``, which ends its turn: the calculator tool appends the result
between brackets and the policy's next turn gives the final answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

VOCAB: tuple[str, ...] = (
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
    "+", "-", "*", "=", "[", "]", "<calc>", "<eos>", "<bos>", "<pad>",
)
TOKEN: dict[str, int] = {text: index for index, text in enumerate(VOCAB)}
DIGITS = frozenset(range(10))
CALC, EOS, BOS, PAD = TOKEN["<calc>"], TOKEN["<eos>"], TOKEN["<bos>"], TOKEN["<pad>"]
OPEN, CLOSE = TOKEN["["], TOKEN["]"]

#: Tokens the policy may generate in one turn; an answer has at most 4 digits.
MAX_NEW_TOKENS = 6
#: Generation turns per session; every turn but the last may end in a tool call.
MAX_TURNS = 3

#: Reward of a well-formed answer that is wrong: partial credit for the format
#: gives the group a reward spread to learn from while answers are still wrong.
FORMAT_REWARD = 0.1


def encode(text: str) -> list[int]:
    """Token ids of plain characters (digits, operators, brackets)."""
    return [TOKEN[ch] for ch in text]


def decode(tokens: list[int]) -> str:
    """Readable text of token ids."""
    return "".join(VOCAB[t] for t in tokens)


@dataclass(frozen=True)
class Task:
    """One dataset item: ``a <op> b =``."""

    task_id: int
    a: int
    op: str
    b: int

    @property
    def prompt(self) -> str:
        return f"{self.a}{self.op}{self.b}="

    @property
    def answer(self) -> int:
        if self.op == "+":
            return self.a + self.b
        if self.op == "-":
            return self.a - self.b
        return self.a * self.b

    def prompt_tokens(self) -> list[int]:
        return [BOS, *encode(self.prompt)]

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "a": self.a, "op": self.op, "b": self.b}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        return cls(data["task_id"], data["a"], data["op"], data["b"])


def make_task(rng: random.Random, task_id: int) -> Task:
    """A random task; subtraction never goes negative and products stay below 1,000."""
    op = rng.choice("+-*")
    if op == "*":
        return Task(task_id, rng.randint(0, 99), op, rng.randint(0, 9))
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    if op == "-" and b > a:
        a, b = b, a
    return Task(task_id, a, op, b)


def calculator(task: Task) -> list[int]:
    """The tool's observation: the task's result between brackets."""
    return [OPEN, *encode(str(task.answer)), CLOSE]


def score(final_turn: list[int], task: Task) -> tuple[float, str]:
    """Rule-based reward of the policy's last turn.

    Returns:
        ``(reward, outcome)``: 1.0 ``correct`` for the exact answer; 0.1
        ``wrong`` for digits then ``<eos>``; 0.0 ``malformed`` for anything
        else that ended, and 0.0 ``truncated`` when the turn ran out of
        tokens before ending (the trainer drops those).
    """
    if not final_turn or final_turn[-1] not in (EOS, CALC):
        return 0.0, "truncated"
    body = final_turn[:-1]
    if final_turn[-1] != EOS or not body or not all(t in DIGITS for t in body):
        return 0.0, "malformed"
    if int(decode(body)) == task.answer:
        return 1.0, "correct"
    return FORMAT_REWARD, "wrong"


def demonstration(task: Task, use_tool: bool) -> tuple[list[int], list[int]]:
    """A correct conversation for the warm-up: tokens and a mask of the policy's own tokens."""
    answer = [*encode(str(task.answer)), EOS]
    prompt = task.prompt_tokens()
    if use_tool:
        observation = calculator(task)
        tokens = [*prompt, CALC, *observation, *answer]
        mask = [0] * len(prompt) + [1] + [0] * len(observation) + [1] * len(answer)
    else:
        tokens = [*prompt, *answer]
        mask = [0] * len(prompt) + [1] * len(answer)
    return tokens, mask
