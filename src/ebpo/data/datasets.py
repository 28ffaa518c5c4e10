"""The datasets of the EBPO paper (the registry :data:`DATASETS`) and the one schema their rows are
normalised to.

Every row, whatever its source, becomes::

    {"id": str, "prompt": str, "answer": str, "source": str, "topic": str, "difficulty": str}

``prompt`` is the bare problem statement (no template: apply one with :mod:`ebpo.data.templates`),
``answer`` the ground truth :func:`ebpo.rewards.score_math` compares against, ``source`` the
registry name, ``topic``/``difficulty`` free-form strings, empty when the dataset has none (MATH-500
gives subject and level 1-5, OlympiadBench subfield and "Competition"; :mod:`ebpo.curriculum`
fills them for the rest).

Registry (:data:`DATASETS`): training set ``dapo-math-17k``; evaluation sets ``math-500``,
``aime-2024``, ``aime-2025``, ``amc-2023``, ``olympiadbench``. The hub ids are the copies most RLVR
evaluation code uses; each spec records its columns, which the test fixtures reproduce.
:mod:`ebpo.data.loading` loads them (:func:`ebpo.data.load_dataset`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ebpo.data.templates import strip_dapo_template
from ebpo.utils.checks import is_integer

__all__ = ["DATASETS", "SCHEMA", "DatasetSpec", "check_limit", "detect_schema", "normalise_rows"]

SCHEMA = ("id", "prompt", "answer", "source", "topic", "difficulty")


@dataclass(frozen=True)
class DatasetSpec:
    """One registered dataset: where it lives on the hub and how its rows map to :data:`SCHEMA`.

    ``columns`` are the hub columns the normaliser reads (used to recognise local files in this
    schema); ``normalise(row, index)`` returns a unified row."""

    name: str
    hub_id: str
    split: str
    columns: tuple[str, ...]
    normalise: Callable[[Mapping[str, Any], int], dict[str, str]]
    config: str | None = None
    dedupe: bool = False  # drop rows whose prompt repeats (DAPO-Math-17K ships every problem ~100x)
    description: str = ""


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):  # None, NaN: missing
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # e.g. AMC answers stored as 27.0
    return str(value).strip()


def _strip_dollars(answer: str) -> str:
    answer = answer.strip()
    while len(answer) >= 2 and answer.startswith("$") and answer.endswith("$"):
        answer = answer[1:-1].strip()
    return answer


def _row(
    source: str, id_: Any, prompt: Any, answer: Any, topic: Any = "", difficulty: Any = ""
) -> dict[str, str]:
    return {
        "id": _text(id_),
        "prompt": _text(prompt),
        "answer": _strip_dollars(_text(answer)),
        "source": source,
        "topic": _text(topic),
        "difficulty": _text(difficulty),
    }


# ----------------------------------------------------------------------------------- normalisers
def _dapo(row: Mapping[str, Any], i: int) -> dict[str, str]:
    # prompt: [{"content": <DAPO template around the problem>, "role": "user"}]
    messages = row["prompt"]
    if isinstance(messages, str):
        content = messages
    else:
        users = [m for m in messages if m.get("role") == "user"] or list(messages)
        content = users[-1]["content"]
    extra = row.get("extra_info") or {}
    return _row(
        "dapo-math-17k",
        extra.get("id") or extra.get("index") or f"dapo-math-17k-{i}",
        strip_dapo_template(content),
        row["reward_model"]["ground_truth"],
    )


def _math500(row: Mapping[str, Any], i: int) -> dict[str, str]:
    return _row(
        "math-500",
        row.get("unique_id") or f"math-500-{i}",
        row["problem"],
        row["answer"],
        row.get("subject"),
        row.get("level"),
    )


def _aime(name: str) -> Callable[[Mapping[str, Any], int], dict[str, str]]:
    def normalise(row: Mapping[str, Any], i: int) -> dict[str, str]:
        id_ = row.get("id")
        return _row(
            name, f"{name}-{id_ if id_ not in (None, '') else i}", row["problem"], row["answer"]
        )

    return normalise


def _amc23(row: Mapping[str, Any], i: int) -> dict[str, str]:
    id_ = row.get("id")
    return _row(
        "amc-2023",
        f"amc-2023-{id_ if id_ not in (None, '') else i}",
        row["question"],
        row["answer"],
    )


def _olympiadbench(row: Mapping[str, Any], i: int) -> dict[str, str]:
    # final_answer is a list of "$...$" strings (several for is_multiple_answer problems);
    # math-verify compares the comma-joined list as a set/tuple.
    answers = row["final_answer"]
    if isinstance(answers, str):
        answers = [answers]
    answer = ", ".join(_strip_dollars(_text(a)) for a in answers)
    context = _text(row.get("context"))
    problem = f"{context}\n\n{_text(row['question'])}" if context else row["question"]
    return _row(
        "olympiadbench",
        f"olympiadbench-{row.get('id', i)}",
        problem,
        answer,
        row.get("subfield"),
        row.get("difficulty"),
    )


def _unified(row: Mapping[str, Any], i: int) -> dict[str, str]:
    source = _text(row.get("source")) or "local"
    return _row(
        source,
        row.get("id") or f"{source}-{i}",
        row["prompt"],
        row["answer"],
        row.get("topic"),
        row.get("difficulty"),
    )


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            "dapo-math-17k",
            "BytedTsinghua-SIA/DAPO-Math-17k",
            "train",
            ("data_source", "prompt", "ability", "reward_model", "extra_info"),
            _dapo,
            dedupe=True,
            description="DAPO training set: 17,398 unique integer-answer problems (1.79M rows with repeats).",
        ),
        DatasetSpec(
            "math-500",
            "HuggingFaceH4/MATH-500",
            "test",
            ("problem", "solution", "answer", "subject", "level", "unique_id"),
            _math500,
            description="500 MATH test problems (Lightman et al. 2023); subject -> topic, level -> difficulty.",
        ),
        DatasetSpec(
            "aime-2024",
            "HuggingFaceH4/aime_2024",
            "train",
            ("id", "problem", "solution", "answer", "url", "year"),
            _aime("aime-2024"),
            description="AIME 2024 I and II, 30 problems, integer answers 0-999.",
        ),
        DatasetSpec(
            "aime-2025",
            "math-ai/aime25",
            "test",
            ("problem", "answer", "id"),
            _aime("aime-2025"),
            description="AIME 2025 I and II, 30 problems, integer answers 0-999.",
        ),
        DatasetSpec(
            "amc-2023",
            "math-ai/amc23",
            "test",
            ("id", "question", "answer", "url"),
            _amc23,
            description="AMC 12 2023, 40 problems with numeric answers.",
        ),
        DatasetSpec(
            "olympiadbench",
            "Hothan/OlympiadBench",
            "train",
            (
                "id",
                "question",
                "solution",
                "final_answer",
                "context",
                "is_multiple_answer",
                "unit",
                "answer_type",
                "subfield",
                "difficulty",
            ),
            _olympiadbench,
            config="OE_TO_maths_en_COMP",
            description="OlympiadBench open-ended, text-only, English competition maths (675 problems).",
        ),
    )
}
_UNIFIED_COLUMNS = ("prompt", "answer")


# ------------------------------------------------------------------------------------ schemas
def detect_schema(columns: Iterable[str]) -> str:
    """The registry name whose hub columns are all present, or ``"unified"`` for files already in
    :data:`SCHEMA` (at least ``prompt`` and ``answer`` as plain columns)."""
    columns = set(columns)
    # Most specific match first: AIME 2025's columns are a subset of AIME 2024's.
    matches = [spec for spec in DATASETS.values() if set(spec.columns) <= columns]
    if matches:
        return max(matches, key=lambda spec: len(spec.columns)).name
    if set(_UNIFIED_COLUMNS) <= columns:
        return "unified"
    raise ValueError(
        f"cannot recognise the columns {sorted(columns)}: expected at least 'prompt' and 'answer' "
        f"(the unified schema {SCHEMA}) or the hub schema of one of {sorted(DATASETS)}"
    )


def normalise_rows(
    rows: Iterable[Mapping[str, Any]],
    schema: str,
    *,
    dedupe: bool | None = None,
    limit: int | None = None,
    where: Callable[[int], str] | None = None,
) -> list[dict[str, str]]:
    """Rows mapped to :data:`SCHEMA` with ``schema``'s normaliser (a registry name or
    ``"unified"``); duplicates of an earlier prompt dropped when ``dedupe`` (default: the spec's
    setting); at most ``limit`` rows.

    A row that lacks a column the normaliser reads, or whose prompt or answer is empty (a problem
    nobody can score), raises ValueError naming it: ``where(i)`` (default ``"row i"``; the loader
    passes the file and line)."""
    if schema != "unified" and schema not in DATASETS:
        raise ValueError(f"schema must be 'unified' or one of {sorted(DATASETS)}, got {schema!r}")
    check_limit(limit)
    where = where or (lambda i: f"row {i}")
    normalise = _unified if schema == "unified" else DATASETS[schema].normalise
    if dedupe is None:
        dedupe = schema != "unified" and DATASETS[schema].dedupe
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for i, raw in enumerate(rows):
        if limit is not None and len(out) >= limit:
            break
        try:
            row = normalise(raw, i)
        except KeyError as error:
            raise ValueError(
                f"{where(i)} does not match the {schema!r} schema: no column {error}"
            ) from error
        except (TypeError, AttributeError, IndexError) as error:
            raise ValueError(
                f"{where(i)} does not match the {schema!r} schema: malformed value ({error})"
            ) from error
        empty = [key for key in ("prompt", "answer") if not row[key]]
        if empty:
            raise ValueError(
                f"{where(i)} has no {' and no '.join(map(repr, empty))} (the {schema!r} schema; every "
                "problem needs a prompt and a reference answer)"
            )
        if dedupe:
            if row["prompt"] in seen:
                continue
            seen.add(row["prompt"])
        out.append(row)
    return out


def check_limit(limit: Any) -> None:
    """``limit`` (a number of rows) must be None or an integer >= 0."""
    if limit is not None and (not is_integer(limit) or limit < 0):
        raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")
