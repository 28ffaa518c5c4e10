"""Hostile inputs for ``ebpo data label`` / ``ebpo data order``, ``ebpo demo``, ``ebpo simulate``
and the dataset loader behind ``ebpo train --dataset`` (issue #11, items 2 and 9).

Every row must end in one line on stderr and exit code 2 with nothing created, lost or changed
in the scratch directory — in particular an input or an existing output that the command was
asked to overwrite keeps every byte when a row turns out to be unwritable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.hostile.harness import CliCase, check_cli_error, ids

HERE = __name__  # importable as tests.hostile.test_cli_data: the --topic-fn functions below


def raising_topic(row: dict) -> str:
    if row["prompt"] == "b":
        raise KeyError("subfield")
    return "t"


def no_topic(row: dict) -> None:
    return None


def list_topic(row: dict) -> list:
    return [row["prompt"]]


NOT_CALLABLE = 3


def jsonl(*rows: dict) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


#: Three problems; the second has a difficulty of -inf (Python's json writes and reads -Infinity,
#: which no JSON file may hold).
UNWRITABLE = jsonl(
    {"prompt": "a", "answer": "1", "topic": "x", "difficulty": 1.0},
    {"prompt": "b", "answer": "2", "topic": "y", "difficulty": float("-inf")},
    {"prompt": "c", "answer": "3", "topic": "x", "difficulty": 2.0},
)
GOOD = jsonl(
    {"prompt": "a", "answer": "1", "topic": "x", "difficulty": 1.0},
    {"prompt": "b", "answer": "2", "topic": "y", "difficulty": 3.0},
    {"prompt": "c", "answer": "3", "topic": "x", "difficulty": 2.0},
)
PLAIN = jsonl(
    {"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}, {"prompt": "c", "answer": "3"}
)


def files(contents: dict[str, str | bytes | None]) -> Callable[[Path], None]:
    """Setup writing ``{relative path: content}`` into the scratch directory (``None``: an empty
    directory). Shared with the other hostile CLI tables."""

    def setup(tmp: Path) -> None:
        for name, content in contents.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if content is None:
                path.mkdir()
            elif isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)

    return setup


GOOD_IN = files({"in.jsonl": GOOD})
PLAIN_IN = files({"in.jsonl": PLAIN})
LABEL = ["data", "label", "in.jsonl", "-o", "out.jsonl"]
ORDER = ["data", "order", "in.jsonl", "--order", "topic", "-o", "out.jsonl"]
L = r"^ebpo data label: error: "
R = r"^ebpo data order: error: "

MALFORMED = {
    "empty": ("", r"data file '[^']*in\.jsonl' is empty: it holds no rows"),
    "blank-lines": ("\n \n", r"data file 'in\.jsonl' is empty: it holds no rows"),
    "bad-json": (
        jsonl({"prompt": "a", "answer": "1"}) + "{oops\n",
        r"in\.jsonl: line 2: not valid JSON",
    ),
    "non-object-line": (
        jsonl({"prompt": "a", "answer": "1"}) + "[1, 2]\n",
        r"in\.jsonl: line 2 is a JSON array, expected an object",
    ),
    "not-utf8": (
        b'{"prompt": "caf\xe9"}\n',
        r"data file 'in\.jsonl' is not UTF-8 text \(invalid continuation byte at byte 15\)",
    ),
    # issue 46 item 9: the last value won without a word (trainer_state.json refuses them)
    "duplicate-key": (
        jsonl({"prompt": "a", "answer": "1", "topic": "x", "difficulty": 1.0})
        + '{"prompt": "b", "answer": "2", "topic": "y", "difficulty": 3.0, "difficulty": 7}\n',
        r"in\.jsonl: line 2: key 'difficulty' appears twice in one object$",
    ),
    "duplicate-nested-key": (
        '{"prompt": "a", "answer": "1", "topic": "x", "meta": {"id": 1, "id": 2}}\n',
        r"in\.jsonl: line 1: key 'id' appears twice in one object$",
    ),
}

LABEL_CASES = [
    # output paths: the input itself, a directory, below a file or /dev/null, wrong suffix, none
    CliCase(
        "label-output-is-input",
        ["data", "label", "in.jsonl", "-o", "in.jsonl"],
        L + r"--output 'in\.jsonl' is the input file; pass --in-place",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-output-is-input-other-spelling",
        ["data", "label", "in.jsonl", "-o", "{tmp}/./in.jsonl"],
        L + r"--output .* is the input file; pass --in-place",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-output-is-directory",
        LABEL,
        L + r"--output 'out\.jsonl' is a directory, expected a file path",
        setup=files({"in.jsonl": GOOD, "out.jsonl": None}),
    ),
    CliCase(
        "label-output-below-dev-null",
        [*LABEL[:3], "-o", "/dev/null/out.jsonl"],
        L + r"--output '/dev/null/out\.jsonl' lies below '/dev/null', which is not a directory",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-output-below-a-file",
        [*LABEL[:3], "-o", "in.jsonl/out.jsonl"],
        L + r"--output 'in\.jsonl/out\.jsonl' lies below 'in\.jsonl', which is not a directory",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-output-dev-null",
        [*LABEL[:3], "-o", "/dev/null"],
        L + r"--output must end in \.jsonl or \.parquet",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-output-csv",
        [*LABEL[:3], "-o", "out.csv"],
        L + r"--output must end in \.jsonl or \.parquet",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-no-output", LABEL[:3], L + r"--output is required \(or --in-place", setup=GOOD_IN
    ),
    CliCase(
        "label-in-place-and-another-output",
        [*LABEL, "--in-place"],
        L
        + r"--in-place writes to the input file 'in\.jsonl'; drop --output 'out\.jsonl' or --in-place",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-in-place-dataset-name",
        ["data", "label", "math-500", "--in-place"],
        L
        + r"--in-place needs the input to be an existing \.jsonl or \.parquet file; got 'math-500'",
    ),
    CliCase(
        "label-in-place-json-input",
        ["data", "label", "in.json", "--in-place"],
        L + r"--in-place needs the input to be an existing \.jsonl or \.parquet file",
        setup=files({"in.json": "[]"}),
    ),
    # a row that JSON cannot hold: the input (in place) and an existing output keep every byte
    CliCase(
        "label-in-place-unwritable-row",
        ["data", "label", "in.jsonl", "--in-place"],
        L + r"input row 1 \(counting from 0\), column 'difficulty': -inf cannot be stored in JSON",
        setup=files({"in.jsonl": UNWRITABLE}),
    ),
    CliCase(
        "label-unwritable-row-existing-output",
        LABEL,
        L + r"input row 1 .* column 'difficulty': -inf cannot be stored",
        setup=files({"in.jsonl": UNWRITABLE, "out.jsonl": "precious\n"}),
    ),
    CliCase(
        "label-nan-in-another-column-to-jsonl",
        [*LABEL, "--topic", "none"],
        L + r"input row 1 \(counting from 0\), column 'score': nan cannot be stored in JSON",
        setup=files(
            {"in.jsonl": jsonl({"prompt": "a", "score": 1}) + '{"prompt": "b", "score": NaN}\n'}
        ),
    ),
    CliCase(
        "label-level-boolean",
        [*LABEL, "--topic", "none", "--difficulty", "level"],
        L + r"levels must be numbers or strings like 'Level 3'; got True",
        setup=files({"in.jsonl": jsonl({"prompt": "a", "level": True})}),
    ),
    CliCase(
        "label-5000-digit-integer",
        LABEL,
        L + r"in\.jsonl: line 1: cannot be read \(Exceeds the limit",
        setup=files({"in.jsonl": '{"prompt": "a", "id": ' + "1" * 5000 + "}\n"}),
    ),
    CliCase(
        "label-5000-digit-integer-json-array",
        ["data", "label", "in.json", "-o", "out.jsonl"],
        L + r"in\.json: cannot be read \(Exceeds the limit",
        setup=files({"in.json": '[{"prompt": "a", "id": ' + "1" * 5000 + "}]"}),
    ),
    CliCase(
        "label-tiers-nan-difficulty",
        [*LABEL, "--topic", "none", "--tiers", "2"],
        L + r"--tiers needs a difficulty on every row; 1 rows have none",
        setup=files(
            {
                "in.jsonl": jsonl({"prompt": "a", "difficulty": 1})
                + '{"prompt": "b", "difficulty": NaN}\n'
            }
        ),
    ),
    # unreadable inputs
    CliCase("label-missing-input", LABEL, L + r"input file 'in\.jsonl' does not exist"),
    CliCase(
        "label-unknown-dataset",
        ["data", "label", "gsm8k", "-o", "out.jsonl"],
        L + r"name_or_path must be one of",
    ),
    *[
        CliCase(f"label-input-{name}", LABEL, L + match, setup=files({"in.jsonl": content}))
        for name, (content, match) in MALFORMED.items()
    ],
    CliCase(
        "label-json-array-duplicate-key",
        ["data", "label", "in.json", "-o", "out.jsonl"],
        L + r"in\.json: key 'topic' appears twice in one object$",
        setup=files({"in.json": '[{"prompt": "a", "answer": "1", "topic": "x", "topic": "y"}]'}),
    ),
    CliCase(
        "label-input-not-parquet",
        ["data", "label", "in.parquet", "-o", "out.jsonl"],
        L + r"input file 'in\.parquet' is not a readable Parquet file",
        setup=files({"in.parquet": "not parquet"}),
    ),
    # numbers
    CliCase(
        "label-split-with-a-file",
        [*LABEL, "--split", "test"],
        L + r"--split is for dataset names; 'in\.jsonl' is a file",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-limit-0",
        [*LABEL, "--limit", "0"],
        L + r"--limit must be an integer >= 1, got 0",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-limit-negative",
        [*LABEL, "--limit", "-5"],
        L + r"--limit must be an integer >= 1, got -5",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-seed-negative",
        [*LABEL, "--seed", "-1"],
        L + r"--seed must be an integer >= 0, got -1",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-num-topics-0",
        [*LABEL, "--num-topics", "0"],
        L + r"--num-topics must be an integer >= 1, got 0",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-num-topics-above-rows",
        ["data", "label", "in.jsonl", "-o", "out.jsonl", "--topic", "tfidf", "--num-topics", "5"],
        L + r"num_topics \(5\) exceeds the number of texts \(3\)",
        setup=PLAIN_IN,
    ),
    CliCase(
        "label-samples-0",
        [*LABEL, "--samples", "0"],
        L + r"--samples must be an integer >= 1, got 0",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-temperature-nan",
        [*LABEL, "--temperature", "nan"],
        L + r"--temperature must be a finite number >= 0",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-temperature-inf",
        [*LABEL, "--temperature", "inf"],
        L + r"--temperature must be a finite number >= 0",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-temperature-negative",
        [*LABEL, "--temperature", "-0.5"],
        L + r"--temperature must be a finite number",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-max-new-tokens-0",
        [*LABEL, "--max-new-tokens", "0"],
        L + r"--max-new-tokens must be an integer >= 1",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-batch-size-0",
        [*LABEL, "--batch-size", "0"],
        L + r"--batch-size must be an integer >= 1",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-tiers-0",
        [*LABEL, "--tiers", "0"],
        L + r"--tiers must be an integer >= 2, got 0",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-tiers-1",
        [*LABEL, "--tiers", "1"],
        L + r"--tiers must be an integer >= 2, got 1",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-tiers-negative",
        [*LABEL, "--tiers", "-3"],
        L + r"--tiers must be an integer >= 2, got -3",
        setup=GOOD_IN,
    ),
    # option combinations that would do nothing, or not what was asked
    CliCase(
        "label-tiers-without-difficulty",
        [*LABEL, "--tiers", "3", "--difficulty", "none"],
        L + r"--tiers needs a difficulty: drop --difficulty none",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-tiers-on-rows-without-difficulty",
        [*LABEL, "--tiers", "2"],
        L + r"--tiers needs a difficulty on every row; 1 rows have none",
        setup=files(
            {
                "in.jsonl": jsonl(
                    {"prompt": "a", "answer": "1", "topic": "x", "level": "Level 2"},
                    {"prompt": "b", "answer": "2", "topic": "x", "level": "Level ?"},
                )
            }
        ),
    ),
    CliCase(
        "label-model-without-pass-rate",
        [*LABEL, "--model", "org/model"],
        L + r"--model is only used by --difficulty pass-rate",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-pass-rate-without-model",
        [*LABEL, "--difficulty", "pass-rate"],
        L + r"--difficulty pass-rate needs --model",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-pass-rate-missing-model-path",
        [*LABEL, "--difficulty", "pass-rate", "--model", "./no-model"],
        L + r"model path './no-model' does not exist",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-difficulty-level-without-column",
        [*LABEL, "--difficulty", "level", "--topic", "none"],
        L + r"--difficulty level needs a level column",
        setup=PLAIN_IN,
    ),
    CliCase(
        "label-topic-column-missing",
        [*LABEL, "--topic-column", "nope"],
        L + r"--topic-column 'nope': the input has no such column; "
        r"its columns are \['prompt', 'answer', 'topic', 'difficulty'\]",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-topic-column-incomplete",
        [*LABEL, "--topic-column", "topic"],
        L + r"--topic-column 'topic' has rows without a topic",
        setup=files(
            {
                "in.jsonl": jsonl(
                    {"prompt": "a", "answer": "1", "topic": "x"},
                    {"prompt": "b", "answer": "2", "topic": ""},
                )
            }
        ),
    ),
    CliCase(
        "label-prompt-column-missing",
        [*LABEL, "--topic", "tfidf", "--prompt-column", "nope"],
        L + r"--prompt-column 'nope': the input has no such column",
        setup=GOOD_IN,
    ),
    # issue 46 item 9: a named column this run would not read was ignored without a word
    *[
        CliCase(
            f"label-{option[2:]}-absent",
            [*LABEL, option, "nope"],
            L + rf"{option} 'nope': the input has no such column; "
            r"its columns are \['prompt', 'answer', 'topic', 'difficulty'\]$",
            setup=GOOD_IN,
        )
        for option in ("--prompt-column", "--answer-column", "--level-column")
    ],
    # issue 46 item 9: a level that is not one scalar ([7] became difficulty 7.0, {"a": 1} 1.0)
    *[
        CliCase(
            f"label-{column}-{label}",
            LABEL,
            L + rf"row 1 \(counting from 0\), column '{column}': the level {shown} is {kind}; "
            r"a level is one number or a text such as 'Level 3'$",
            setup=files(
                {
                    "in.jsonl": jsonl(
                        {"prompt": "a", "answer": "1", "topic": "x", column: "Level 2"},
                        {"prompt": "b", "answer": "2", "topic": "x", column: value},
                    )
                }
            ),
        )
        for column in ("level", "difficulty")
        for label, kind, value, shown in [
            ("list", "a list", [7], r"\[7\]"),
            ("mapping", "a mapping", {"a": 1}, r"\{'a': 1\}"),
            ("list-of-text", "a list", ["Level 3"], r"\['Level 3'\]"),
        ]
    ],
    CliCase(
        "label-parquet-level-of-lists",
        ["data", "label", "in.parquet", "-o", "out.jsonl"],
        L + r"row 0 \(counting from 0\), column 'level': the level \[7\] is a list",
        setup=lambda tmp: pq.write_table(
            pa.table({"prompt": ["a"], "answer": ["1"], "topic": ["x"], "level": [[7]]}),
            tmp / "in.parquet",
        ),
    ),
    CliCase(
        "label-topic-output-empty",
        [*LABEL, "--topic-output", ""],
        L + r"--topic-output must name a column",
        setup=GOOD_IN,
    ),
    # --topic-fn
    CliCase(
        "label-topic-fn-raises",
        [*LABEL, "--topic-fn", f"{HERE}:raising_topic"],
        L + rf"the labelling function {HERE}:raising_topic raised KeyError on row 1: 'subfield'$",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-topic-fn-returns-none",
        [*LABEL, "--topic-fn", f"{HERE}:no_topic"],
        L + rf"the labelling function {HERE}:no_topic returned no label for row 0",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-topic-fn-unhashable",
        [*LABEL, "--topic-fn", f"{HERE}:list_topic"],
        L + rf"the labelling function {HERE}:list_topic returned an unhashable list for row 0; "
        r"return a string or an integer",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-topic-fn-missing-module",
        [*LABEL, "--topic-fn", "no_such_module_xyz:f"],
        L + r"--topic-fn 'no_such_module_xyz:f' cannot be loaded: ModuleNotFoundError",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-topic-fn-missing-function",
        [*LABEL, "--topic-fn", f"{HERE}:nope"],
        L
        + rf"--topic-fn '{HERE}:nope' cannot be loaded: AttributeError: module '{HERE}' has no attribute 'nope'",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-topic-fn-not-callable",
        [*LABEL, "--topic-fn", f"{HERE}:NOT_CALLABLE"],
        L + rf"--topic-fn '{HERE}:NOT_CALLABLE' is not callable",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-topic-fn-no-module",
        [*LABEL, "--topic-fn", "function"],
        L + r"--topic-fn must look like MODULE:FUNCTION; got 'function'",
        setup=GOOD_IN,
    ),
    CliCase(
        "label-topic-fn-and-topic",
        [*LABEL, "--topic-fn", f"{HERE}:raising_topic", "--topic", "tfidf"],
        L + r"--topic-fn replaces --topic; drop --topic tfidf",
        setup=GOOD_IN,
    ),
]

ORDER_CASES = [
    CliCase(
        "order-output-is-input",
        ["data", "order", "in.jsonl", "--order", "topic", "-o", "in.jsonl"],
        R + r"--output 'in\.jsonl' is the input file; pass --in-place",
        setup=GOOD_IN,
    ),
    CliCase(
        "order-in-place-unwritable-row",
        ["data", "order", "in.jsonl", "--order", "topic", "--in-place"],
        R + r"input row 1 \(counting from 0\), column 'difficulty': -inf cannot be stored in JSON",
        setup=files({"in.jsonl": UNWRITABLE}),
    ),
    CliCase(
        "order-unwritable-row-existing-output",
        ORDER,
        R + r"input row 1 .* -inf cannot be stored in JSON",
        setup=files({"in.jsonl": UNWRITABLE, "out.jsonl": "precious\n"}),
    ),
    CliCase(
        "order-unwritable-row-parquet-existing-output",
        [*ORDER[:-1], "out.parquet"],
        R + r"cannot store these rows as Parquet",
        setup=files(
            {
                "in.jsonl": jsonl(
                    {"prompt": "a", "answer": "1", "topic": "x", "v": 1},
                    {"prompt": "b", "answer": "2", "topic": "y", "v": "s"},
                ),
                "out.parquet": b"precious",
            }
        ),
    ),
    CliCase(
        "order-output-is-directory",
        ORDER,
        R + r"--output 'out\.jsonl' is a directory",
        setup=files({"in.jsonl": GOOD, "out.jsonl": None}),
    ),
    CliCase(
        "order-output-below-dev-null",
        [*ORDER[:-1], "/dev/null/x.parquet"],
        R + r"--output '/dev/null/x\.parquet' lies below '/dev/null'",
        setup=GOOD_IN,
    ),
    CliCase(
        "order-output-csv",
        [*ORDER[:-1], "out.csv"],
        R + r"--output must end in \.jsonl or \.parquet",
        setup=GOOD_IN,
    ),
    CliCase(
        "order-no-output", ORDER[:-2], R + r"--output is required \(or --in-place", setup=GOOD_IN
    ),
    CliCase(
        "order-in-place-and-another-output",
        [*ORDER, "--in-place"],
        R + r"--in-place writes to the input file",
        setup=GOOD_IN,
    ),
    CliCase(
        "order-topic-column-missing",
        [*ORDER, "--topic-column", "nope"],
        R + r"--topic-column 'nope': the input has no such column; "
        r"its columns are \['prompt', 'answer', 'topic', 'difficulty'\]",
        setup=GOOD_IN,
    ),
    CliCase(
        "order-difficulty-column-missing",
        [*ORDER, "--difficulty-column", "level"],
        R + r"--difficulty-column 'level': the input has no such column",
        setup=GOOD_IN,
    ),
    CliCase(
        "order-seed-negative",
        [*ORDER, "--seed", "-2"],
        R + r"--seed must be an integer >= 0, got -2",
        setup=GOOD_IN,
    ),
    CliCase(
        "order-missing-topic-column",
        ORDER,
        R
        + r"order='topic' needs a topic column; the dataset has none of 'topic', 'extra_info\.topic'",
        setup=PLAIN_IN,
    ),
    CliCase(
        "order-non-finite-difficulty",
        ["data", "order", "in.jsonl", "--order", "difficulty", "-o", "out.jsonl"],
        R + r"difficulty has 1 missing or non-finite value\(s\) \(first at row 1\)",
        setup=files({"in.jsonl": UNWRITABLE}),
    ),
    CliCase(
        "order-non-numeric-difficulty",
        ["data", "order", "in.jsonl", "--order", "difficulty", "-o", "out.jsonl"],
        R + r"difficulty must be numbers",
        setup=files({"in.jsonl": jsonl({"prompt": "a", "answer": "1", "difficulty": "hard"})}),
    ),
    # difficulties that are not numbers (issue #21, item 12): float() took True as 1.0 and "1"
    # as 1.0; NaN, null and infinities are missing values, refused naming the row and the value
    *[
        CliCase(
            f"order-difficulty-{name}",
            ["data", "order", "in.jsonl", "--order", "difficulty", "-o", "out.jsonl"],
            R + match,
            setup=files(
                {
                    "in.jsonl": jsonl({"prompt": "a", "difficulty": 1})
                    + '{"prompt": "b", "difficulty": '
                    + token
                    + "}\n"
                }
            ),
        )
        for name, token, match in [
            (
                "true",
                "true",
                r"difficulty must be numbers \(higher = harder\); row 1 holds True, a boolean",
            ),
            ("false", "false", r".*row 1 holds False, a boolean"),
            ("string-1", '"1"', r".*row 1 holds '1', a str"),
            ("string-empty", '""', r".*row 1 holds '', a str"),
            (
                "string-level",
                '"Level 3"',
                r".*row 1 holds 'Level 3', a str\. Convert level strings",
            ),
            ("list", "[1]", r".*row 1 holds \[1\], a list"),
            ("object", '{"v": 1}', r".*row 1 holds \{'v': 1\}, a dict"),
            (
                "nan",
                "NaN",
                r"difficulty has 1 missing or non-finite value\(s\) \(first at row 1\): nan",
            ),
            ("null", "null", r".*\(first at row 1\): None; fill them"),
            ("infinity", "Infinity", r".*\(first at row 1\): inf"),
            ("overflowing-float", "1e400", r".*\(first at row 1\): inf"),
        ]
    ],
    CliCase(
        "order-difficulty-column-of-booleans-in-place",
        ["data", "order", "in.jsonl", "--order", "topic_then_difficulty", "--in-place"],
        R + r".*row 0 holds True, a boolean",
        setup=files(
            {
                "in.jsonl": jsonl(
                    {"topic": "x", "difficulty": True}, {"topic": "y", "difficulty": False}
                )
            }
        ),
    ),
    # values JSON or Parquet cannot hold are refused, never converted (issue #21, item 3)
    CliCase(
        "order-nan-in-another-column-to-jsonl",
        ORDER,
        R + r"input row 0 \(counting from 0\), column 'score': nan cannot be stored in JSON",
        setup=files({"in.jsonl": '{"prompt": "a", "topic": "x", "score": NaN}\n'}),
    ),
    CliCase(
        "order-nan-nested-in-place",
        ["data", "order", "in.jsonl", "--order", "topic", "--in-place"],
        R
        + r"input row 1 \(counting from 0\), column 'meta': \{'s': \[1, -inf\]\} cannot be stored",
        setup=files(
            {"in.jsonl": jsonl({"topic": "y"}) + '{"topic": "x", "meta": {"s": [1, -Infinity]}}\n'}
        ),
    ),
    CliCase(
        "order-int-beyond-64-bits-to-parquet",
        [*ORDER[:-1], "out.parquet"],
        R + r"cannot store these rows as Parquet \(column 'id': .*\); write \.jsonl instead",
        setup=files(
            {
                "in.jsonl": jsonl(
                    {"topic": "x", "id": 12345678901234567891}, {"topic": "y", "id": -1}
                )
            }
        ),
    ),
    CliCase(
        "order-int-not-exact-as-double-to-parquet",
        [*ORDER[:-1], "out.parquet"],
        R
        + r"cannot store these rows as Parquet \(column 'v': Integer value 9007199254740993 is outside",
        setup=files(
            {"in.jsonl": jsonl({"topic": "x", "v": 9007199254740993}, {"topic": "y", "v": 0.5})}
        ),
    ),
    CliCase(
        "order-5000-digit-integer",
        ORDER,
        R + r"in\.jsonl: line 2: cannot be read \(Exceeds the limit \(4300 digits\)",
        setup=files(
            {"in.jsonl": jsonl({"topic": "x"}) + '{"topic": "y", "id": ' + "7" * 5000 + "}\n"}
        ),
    ),
    CliCase("order-missing-input", ORDER, R + r"input file 'in\.jsonl' does not exist"),
    *[
        CliCase(f"order-input-{name}", ORDER, R + match, setup=files({"in.jsonl": content}))
        for name, (content, match) in MALFORMED.items()
    ],
    CliCase(
        "order-input-not-parquet",
        ["data", "order", "in.parquet", "--order", "topic", "-o", "out.jsonl"],
        R + r"input file 'in\.parquet' is not a readable Parquet file",
        setup=files({"in.parquet": "PAR1 but not really"}),
    ),
]

D = r"^ebpo demo: error: "
DEMO_CASES = [
    CliCase(
        "demo-seed-negative",
        ["demo", "--seed", "-1"],
        D + r"--seed must be an integer >= 0, got -1$",
    ),
    CliCase(
        "demo-prompts-0",
        ["demo", "--prompts", "0"],
        D + r"--prompts must be an integer between 1 and 100000, got 0$",
    ),
    CliCase(
        "demo-prompts-negative",
        ["demo", "--prompts", "-4"],
        D + r"--prompts must be an integer between 1 and",
    ),
    CliCase(
        "demo-prompts-huge",
        ["demo", "--prompts", "10000000"],
        D + r"--prompts must be an integer between 1 and 100000",
    ),
    CliCase(
        "demo-group-size-0",
        ["demo", "--group-size", "0"],
        D + r"--group-size must be an integer between 1 and 64, got 0$",
    ),
    CliCase(
        "demo-group-size-huge",
        ["demo", "--group-size", "1000"],
        D + r"--group-size must be an integer between 1 and 64",
    ),
    CliCase(
        "demo-steps-0",
        ["demo", "--steps", "0"],
        D + r"--steps must be an integer between 1 and 10000, got 0$",
    ),
    CliCase(
        "demo-too-many-responses",
        ["demo", "--prompts", "100000", "--group-size", "64", "--steps", "10"],
        D + r"--prompts x --group-size x --steps = 64,000,000 responses; .* at most 20,000,000",
    ),
]

S = r"^ebpo simulate: error: "
SIMULATE_CASES = [
    CliCase(
        "simulate-output-dir-is-file",
        ["simulate", "--quick", "--output-dir", "results"],
        S + r"--output-dir 'results' is a file, expected a directory",
        setup=files({"results": "precious"}),
    ),
    CliCase(
        "simulate-output-dir-below-dev-null",
        ["simulate", "--quick", "--output-dir", "/dev/null/sim"],
        S + r"--output-dir '/dev/null/sim' lies below '/dev/null'",
    ),
    CliCase(
        "simulate-output-dir-below-a-file",
        ["simulate", "--quick", "--output-dir", "results/sim"],
        S + r"--output-dir 'results/sim' lies below 'results', which is not a directory",
        setup=files({"results": "precious"}),
    ),
    CliCase(
        "simulate-output-dir-empty",
        ["simulate", "--quick", "--output-dir", ""],
        S + r"--output-dir must be a non-empty path",
    ),
    CliCase(
        "simulate-unknown-experiment",
        ["simulate", "--experiments", "baseline,nope"],
        S
        + r"--experiments must be a comma-separated subset of baseline,saturation,bandit,priors, got 'baseline,nope'",
    ),
    CliCase(
        "simulate-no-experiment",
        ["simulate", "--experiments", ","],
        S + r"--experiments must be a comma-separated subset",
    ),
    CliCase(
        "simulate-seed-negative",
        ["simulate", "--quick", "--seed", "-1"],
        S + r"--seed must be an integer >= 0, got -1",
    ),
]

T = r"^ebpo train: error: "
TRAIN_DATASET_CASES = [
    # ebpo train loads the dataset before it creates the run directory or loads a model
    CliCase(
        "train-dataset-malformed",
        ["train", "--dataset", "in.jsonl"],
        T + r"in\.jsonl: line 2: not valid JSON",
        setup=files({"in.jsonl": MALFORMED["bad-json"][0]}),
    ),
    CliCase(
        "train-dataset-empty",
        ["train", "--dataset", "in.jsonl"],
        T + r"data file 'in\.jsonl' is empty: it holds no rows",
        setup=files({"in.jsonl": ""}),
    ),
    CliCase(
        "train-dataset-non-object",
        ["train", "--dataset", "in.jsonl"],
        T + r"in\.jsonl: line 2 is a JSON array",
        setup=files({"in.jsonl": MALFORMED["non-object-line"][0]}),
    ),
    CliCase(
        "train-dataset-missing-columns",
        ["train", "--dataset", "in.jsonl"],
        T + r"data file 'in\.jsonl': cannot recognise the columns \['question'\]: "
        r"expected at least 'prompt' and 'answer'",
        setup=files({"in.jsonl": jsonl({"question": "1+1?"})}),
    ),
    CliCase(
        "train-dataset-empty-answer",
        ["train", "--dataset", "in.jsonl"],
        T + r"in\.jsonl: line 2 has no 'answer'",
        setup=files(
            {"in.jsonl": jsonl({"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": ""})}
        ),
    ),
]

CASES = LABEL_CASES + ORDER_CASES + DEMO_CASES + SIMULATE_CASES + TRAIN_DATASET_CASES


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cli_user_error(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)
