"""The built-in task family: integer arithmetic with an unbounded problem space.

A problem is ``a <op> b`` with a topic (the operation) and a difficulty tier (the number of digits
of its larger operand):

* ``add`` — ``a + b``, both operands with up to ``tier`` digits;
* ``sub`` — ``a - b`` with ``a >= b`` (answers never negative);
* ``mul`` — ``a * d``, a ``tier``-digit number times one digit ``d`` in 2..9.

Tiers are any positive digit counts (:data:`MAX_DIGITS` at most), so the problem space grows as
10^(2·tier): the RL stream (:func:`problem_stream`) draws fresh problems at every step instead of
cycling through a small pool (the one-digit tier, 100 problems per topic, is the exception).

Two renderings (:data:`STYLES`):

* ``reversed`` — every number written least significant digit first: 347 + 85 = 432 is the
  prompt ``743+58=`` answered ``234``. A left-to-right model then meets the digits in the order
  in which carries flow, and the i-th answer digit sits beside the i-th operand digits, which
  makes multi-digit arithmetic learnable by the built-in two-layer model (with operands in normal
  order its warm start reached about half the Pass@1);
* ``word`` — a short word problem asking for an ``Answer: N`` line (normal digit order), for
  pretrained instruct models (render it with :func:`word_messages`).

Splits are disjoint by construction: a problem's split (train / validation / held-out) is a fixed
function of the problem itself, a CRC32 hash of ``topic:a:b`` (8 : 1 : 1), so no seed, size or
tier list can put a held-out problem in the training stream. Held-out and validation sets are
fixed lists (:func:`fixed_problems`), deterministic in their seed.

Rows have the schema of :mod:`ebpo.data`: ``{id, prompt, answer, source, topic, difficulty}``
(``answer`` is the target text of the style).
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ebpo.utils.checks import check_positive_int, is_integer

__all__ = [
    "BUILTIN_DATASETS",
    "DEFAULT_TIERS",
    "MAX_DIGITS",
    "SPLITS",
    "STYLES",
    "TOPICS",
    "WORD_EXAMPLE",
    "Problem",
    "check_cells",
    "corrupt_digit",
    "extract_integer",
    "fixed_problems",
    "integer_reward",
    "problem_split",
    "problem_stream",
    "reward",
    "word_messages",
    "word_text",
]

TOPICS = ("add", "sub", "mul")
DEFAULT_TIERS = (1, 2, 3)
#: the largest tier (digits of an operand); a sanity bound, far beyond what the tiny model learns
MAX_DIGITS = 15
SPLITS = ("train", "validation", "heldout")
STYLES = ("reversed", "word")
#: built-in dataset name -> style (``--dataset arithmetic`` is the default run)
BUILTIN_DATASETS = {"arithmetic": "reversed", "arithmetic-word": "word"}

_SYMBOL = {"add": "+", "sub": "-", "mul": "*"}
_WORD_TEMPLATES = {
    "add": "Sam has {a} apples and buys {b} more. How many apples does Sam have now?",
    "sub": "Sam has {a} apples and gives away {b}. How many apples does Sam have left?",
    "mul": "There are {a} boxes with {b} pencils in each box. How many pencils are there in total?",
}
_WORD_SUFFIX = "\nEnd with a line 'Answer: <number>'."
#: the worked example shown before every word problem (question, reply): a prior chat turn for
#: instruct models (:func:`word_messages`), plain text otherwise. SmolLM2-135M-Instruct copies its
#: short "... Answer: N" shape; without it it rarely writes the line. (3 + 4 is a training
#: problem, so the example never gives away a held-out answer.)
WORD_EXAMPLE = (
    _WORD_TEMPLATES["add"].format(a=3, b=4).replace("Sam", "Tom") + _WORD_SUFFIX,
    "Tom has 3 + 4 = 7 apples.\nAnswer: 7",
)
# Out of 10 hash buckets: 1 held-out, 1 validation, 8 train.
_HELDOUT_BUCKETS, _VALIDATION_BUCKETS = {0}, {1}
_ANSWER_LINE = re.compile(r"answer\s*[:=]\s*\$?\s*(-?\d[\d,]*)", re.IGNORECASE)
_INTEGER = re.compile(r"-?\d+")


def problem_split(topic: str, a: int, b: int) -> str:
    """The split (``train`` / ``validation`` / ``heldout``) that problem ``a <topic> b`` belongs to."""
    bucket = zlib.crc32(f"{topic}:{a}:{b}".encode()) % 10
    if bucket in _HELDOUT_BUCKETS:
        return "heldout"
    if bucket in _VALIDATION_BUCKETS:
        return "validation"
    return "train"


@dataclass(frozen=True)
class Problem:
    """One arithmetic problem; ``digits`` is its tier (digits of the larger operand)."""

    topic: str
    a: int
    b: int
    digits: int

    @property
    def answer(self) -> int:
        return (
            self.a + self.b
            if self.topic == "add"
            else self.a - self.b
            if self.topic == "sub"
            else self.a * self.b
        )

    @property
    def split(self) -> str:
        return problem_split(self.topic, self.a, self.b)

    @property
    def id(self) -> str:
        return f"{self.topic}-{self.digits}d-{self.a}-{self.b}"

    def prompt(self, style: str = "reversed") -> str:
        if style == "reversed":
            return f"{str(self.a)[::-1]}{_SYMBOL[self.topic]}{str(self.b)[::-1]}="
        return _WORD_TEMPLATES[self.topic].format(a=self.a, b=self.b) + _WORD_SUFFIX

    def target(self, style: str = "reversed") -> str:
        """The answer as the style writes it: digits reversed (``reversed``) or plain (``word``)."""
        return str(self.answer)[::-1] if style == "reversed" else str(self.answer)

    def row(self, style: str = "reversed") -> dict[str, Any]:
        """The problem in the :mod:`ebpo.data` schema."""
        return {
            "id": self.id,
            "prompt": self.prompt(style),
            "answer": self.target(style),
            "source": f"ebpo.lab.cpu_task.task/{style}",
            "topic": self.topic,
            "difficulty": self.digits,
        }


def check_cells(topics: Sequence[str], tiers: Sequence[int], style: str = "reversed") -> None:
    """Raise ValueError naming the bad argument unless topics / tiers / style are valid."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {list(STYLES)}, got {style!r}")
    topics, tiers = list(topics), list(tiers)
    if not topics or any(t not in TOPICS for t in topics) or len(set(topics)) != len(topics):
        raise ValueError(f"topics must be distinct values of {list(TOPICS)}, got {topics}")
    if (
        not tiers
        or any(not is_integer(t) or not 1 <= t <= MAX_DIGITS for t in tiers)
        or len(set(tiers)) != len(tiers)
    ):
        raise ValueError(f"tiers must be distinct digit counts in 1..{MAX_DIGITS}, got {tiers}")


def _draw(rng: random.Random, topic: str, digits: int) -> Problem:
    """A uniformly random problem of the (topic, digits) cell, whatever its split."""
    lowest = 10 ** (digits - 1) if digits > 1 else 0
    a = rng.randint(lowest, 10**digits - 1)
    if topic == "mul":
        return Problem(topic, a, rng.randint(2, 9), digits)
    b = rng.randint(0, 10**digits - 1)
    if topic == "sub" and b > a:
        a, b = b, a
    return Problem(topic, a, b, digits)


def problem_stream(
    split: str = "train",
    *,
    seed: int = 0,
    topics: Sequence[str] = TOPICS,
    tiers: Sequence[int] = DEFAULT_TIERS,
) -> Iterator[Problem]:
    """An endless, seeded stream of problems of ``split``: each draw picks a topic and a tier
    uniformly at random, then a uniformly random problem of that cell (rejecting other splits).

    Two streams with the same arguments are identical, which is what pairs the methods of
    ``ebpo bench`` (every method of a seed trains on the same prompts)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    check_cells(topics, tiers)
    rng = random.Random(f"stream:{seed}:{split}")
    topics, tiers = list(topics), list(tiers)
    while True:
        topic, digits = rng.choice(topics), rng.choice(tiers)
        problem = _draw(rng, topic, digits)
        if problem.split == split:
            yield problem


def fixed_problems(
    split: str,
    per_cell: int,
    *,
    seed: int = 0,
    topics: Sequence[str] = TOPICS,
    tiers: Sequence[int] = DEFAULT_TIERS,
) -> list[Problem]:
    """``per_cell`` distinct problems of ``split`` for every (topic, tier) cell, deterministic in
    ``seed`` (a cell with fewer problems in the split, e.g. one-digit held-out sums, gives all it
    has). Ordered cell by cell: topic, then tier."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    check_positive_int("per_cell", per_cell)
    check_cells(topics, tiers)
    problems: list[Problem] = []
    for topic in topics:
        for digits in tiers:
            # one generator per cell, so adding a topic or tier leaves the other cells unchanged
            rng = random.Random(f"fixed:{seed}:{split}:{topic}:{digits}")
            seen: set[Problem] = set()
            # the attempt cap ends small cells (one digit) that run out of problems
            for _ in range(50 * per_cell + 2000):
                if len(seen) == per_cell:
                    break
                problem = _draw(rng, topic, digits)
                if problem.split == split and problem not in seen:
                    seen.add(problem)
                    problems.append(problem)
    return problems


def corrupt_digit(target: str, rng: random.Random) -> str:
    """``target`` with one digit (chosen uniformly) replaced by a different digit."""
    positions = [i for i, c in enumerate(target) if c.isdigit()]
    if not positions:
        return target
    i = rng.choice(positions)
    wrong = str((int(target[i]) + rng.randint(1, 9)) % 10)
    return target[:i] + wrong + target[i + 1 :]


def reward(completion: str, target: str, style: str = "reversed") -> float:
    """1.0 for a correct completion, else 0.0. ``reversed``: the completion (whitespace stripped)
    is exactly the target digits; ``word``: its final integer (:func:`extract_integer`) equals it."""
    if style == "reversed":
        return float(completion.strip() == str(target))
    return integer_reward(completion, target)


def word_messages(prompt: str) -> list[dict[str, str]]:
    """Chat messages for a word-style prompt: :data:`WORD_EXAMPLE` as a first user / assistant
    turn, then the problem."""
    question, reply = WORD_EXAMPLE
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": prompt},
    ]


def word_text(prompt: str) -> str:
    """The plain-text form of :func:`word_messages`, for models without a chat template."""
    question, reply = WORD_EXAMPLE
    return f"{question}\n{reply}\n\n{prompt}\n"


def extract_integer(text: str) -> int | None:
    """The model's final integer: the last ``Answer: N`` line if any, else the last integer."""
    matches = _ANSWER_LINE.findall(text)
    if matches:
        return int(matches[-1].replace(",", ""))
    numbers = _INTEGER.findall(text)
    return int(numbers[-1]) if numbers else None


def integer_reward(completion: str, answer: str | int) -> float:
    """1.0 if the completion's final integer equals ``answer`` exactly, else 0.0 (fast, no sympy)."""
    value = extract_integer(completion)
    return float(value is not None and value == int(answer))
