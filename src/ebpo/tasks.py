"""The built-in CPU task family: integer arithmetic by topic and difficulty tier (operand range).

Topics are operations (``add``, ``sub``, ``mul``); the difficulty tier sets the operand range
(:data:`TIER_RANGES`): tier 1 one digit (0-9), tier 2 up to 20 with at least one operand >= 10,
tier 3 two digits (10-99). The ranges are small enough for the built-in tiny model to learn: its
warm start solves most 1-digit problems, part of the tier-2 ones and few two-digit products, so RL
sees a realistic mix of groups that always succeed, always fail and are mixed, and the topic /
difficulty labels feed the curricula.

Rows have the schema of ``ebpo.data``: ``{id, prompt, answer, source, topic, difficulty}``.
Two prompt styles: ``"compact"`` (``12+34=``, for the character-level model) and ``"word"``
(a short word problem asking for an ``Answer: N`` line, for pretrained instruct models; render it
with :func:`word_messages`, which puts a worked example first).

Splits never overlap: a problem's split is a fixed function of the problem itself (a CRC32 hash of
``topic:a:b``), so train / validation / held-out stay disjoint whatever the seed or size.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Sequence
from typing import Any

__all__ = [
    "BUILTIN_DATASETS",
    "WORD_EXAMPLE",
    "SPLITS",
    "STYLES",
    "TIERS",
    "TIER_RANGES",
    "TOPICS",
    "extract_integer",
    "integer_reward",
    "make_problems",
    "problem_split",
    "word_messages",
    "word_text",
]

TOPICS = ("add", "sub", "mul")
TIERS = (1, 2, 3)
SPLITS = ("train", "validation", "heldout")
STYLES = ("compact", "word")
#: built-in dataset name -> prompt style (``--dataset arithmetic`` is the default run)
BUILTIN_DATASETS = {"arithmetic": "compact", "arithmetic-word": "word"}

_SYMBOL = {"add": "+", "sub": "-", "mul": "*"}
_WORD_TEMPLATES = {
    "add": "Sam has {a} apples and buys {b} more. How many apples does Sam have now?",
    "sub": "Sam has {a} apples and gives away {b}. How many apples does Sam have left?",
    "mul": "There are {a} boxes with {b} pencils in each box. How many pencils are there in total?",
}
_WORD_SUFFIX = "\nEnd with a line 'Answer: <number>'."
#: the worked example shown before every word problem (question, reply): a prior chat turn for
#: instruct models (:func:`word_messages`), plain text otherwise. SmolLM2-135M-Instruct copies its
#: short "... Answer: N" shape, which both rewards parse; without it it rarely writes the line.
#: (3 + 4 is a training problem, so the example never gives away a held-out answer.)
WORD_EXAMPLE = (
    "Tom has 3 apples and buys 4 more. How many apples does Tom have now?" + _WORD_SUFFIX,
    "Tom has 3 + 4 = 7 apples.\nAnswer: 7",
)
# Out of 10 hash buckets: 1 held-out, 1 validation, 8 train.
_HELDOUT_BUCKETS, _VALIDATION_BUCKETS = {0}, {1}
_ANSWER_LINE = re.compile(r"answer\s*[:=]\s*\$?\s*(-?\d[\d,]*)", re.IGNORECASE)
_INTEGER = re.compile(r"-?\d+")


def problem_split(topic: str, a: int, b: int) -> str:
    """The split (``train``/``validation``/``heldout``) that problem ``a <op> b`` belongs to."""
    bucket = zlib.crc32(f"{topic}:{a}:{b}".encode()) % 10
    if bucket in _HELDOUT_BUCKETS:
        return "heldout"
    if bucket in _VALIDATION_BUCKETS:
        return "validation"
    return "train"


#: difficulty tier -> (lowest, highest) operand; tier 2 also needs one operand >= 10 (so it never
#: repeats a tier-1 problem)
TIER_RANGES = {1: (0, 9), 2: (0, 20), 3: (10, 99)}


def _operands(topic: str, tier: int, rng: random.Random) -> tuple[int, int]:
    low, high = TIER_RANGES[tier]
    while True:
        a, b = rng.randint(low, high), rng.randint(low, high)
        if tier != 2 or max(a, b) >= 10:
            break
    if topic == "sub" and b > a:  # keep answers non-negative
        a, b = b, a
    return a, b


def _answer(topic: str, a: int, b: int) -> int:
    return a + b if topic == "add" else a - b if topic == "sub" else a * b


def _prompt(topic: str, a: int, b: int, style: str) -> str:
    if style == "compact":
        return f"{a}{_SYMBOL[topic]}{b}="
    return _WORD_TEMPLATES[topic].format(a=a, b=b) + _WORD_SUFFIX


def make_problems(
    split: str = "train",
    per_cell: int = 100,
    *,
    topics: Sequence[str] = TOPICS,
    tiers: Sequence[int] = TIERS,
    style: str = "compact",
    seed: int = 0,
) -> list[dict[str, Any]]:
    """``per_cell`` distinct problems of ``split`` for every (topic, tier) cell, deterministic in
    ``seed``. A cell with fewer distinct problems in the split (1-digit held-out) gives all it has.

    Rows are ordered cell by cell (topic, then tier); shuffle or order them with ``ebpo.curriculum``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    if style not in STYLES:
        raise ValueError(f"style must be one of {list(STYLES)}, got {style!r}")
    if isinstance(per_cell, bool) or not isinstance(per_cell, int) or per_cell < 1:
        raise ValueError(f"per_cell must be a positive integer, got {per_cell!r}")
    bad_topics = [t for t in topics if t not in TOPICS]
    if bad_topics or not topics:
        raise ValueError(f"topics must be a non-empty subset of {list(TOPICS)}, got {list(topics)}")
    bad_tiers = [t for t in tiers if t not in TIERS]
    if bad_tiers or not tiers:
        raise ValueError(f"tiers must be a non-empty subset of {list(TIERS)}, got {list(tiers)}")

    rows: list[dict[str, Any]] = []
    for topic in topics:
        for digits in tiers:
            # one generator per cell, so adding a topic does not change the other cells' problems
            rng = random.Random(f"{seed}:{split}:{topic}:{digits}")
            seen: set[tuple[int, int]] = set()
            # rejection sampling; the attempt cap ends small cells (1-digit) that run out of problems
            for _ in range(50 * per_cell + 1000):
                if len(seen) == per_cell:
                    break
                a, b = _operands(topic, digits, rng)
                if (a, b) in seen or problem_split(topic, a, b) != split:
                    continue
                seen.add((a, b))
                rows.append(
                    {
                        "id": f"{topic}-{digits}d-{a}-{b}",
                        "prompt": _prompt(topic, a, b, style),
                        "answer": str(_answer(topic, a, b)),
                        "source": f"ebpo.tasks/{style}",
                        "topic": topic,
                        "difficulty": digits,
                    }
                )
    return rows


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
