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

from tests.hostile.harness import CliCase, check_cli_error, cli_rows, cli_table, ids, table_rows

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

#: ``ebpo data label in.jsonl -o out.jsonl ARGUMENTS`` on a good input: numbers, and option
#: combinations that would do nothing, or not what was asked
LABEL_TABLE = r"""
    label-split-with-a-file | --split test | --split is for dataset names; 'in\.jsonl' is a file
    label-limit-0 | --limit 0 | --limit must be an integer >= 1, got 0
    label-limit-negative | --limit -5 | --limit must be an integer >= 1, got -5
    label-seed-negative | --seed -1 | --seed must be an integer >= 0, got -1
    label-num-topics-0 | --num-topics 0 | --num-topics must be an integer >= 1, got 0
    label-samples-0 | --samples 0 | --samples must be an integer >= 1, got 0
    label-temperature-nan | --temperature nan | --temperature must be a finite number >= 0
    label-temperature-inf | --temperature inf | --temperature must be a finite number >= 0
    label-temperature-negative | --temperature -0.5 | --temperature must be a finite number
    label-max-new-tokens-0 | --max-new-tokens 0 | --max-new-tokens must be an integer >= 1
    label-batch-size-0 | --batch-size 0 | --batch-size must be an integer >= 1
    label-tiers-0 | --tiers 0 | --tiers must be an integer >= 2, got 0
    label-tiers-1 | --tiers 1 | --tiers must be an integer >= 2, got 1
    label-tiers-negative | --tiers -3 | --tiers must be an integer >= 2, got -3
    label-tiers-without-difficulty | --tiers 3 --difficulty none | --tiers needs a difficulty: drop --difficulty none
    label-model-without-pass-rate | --model org/model | --model is only used by --difficulty pass-rate
    label-pass-rate-without-model | --difficulty pass-rate | --difficulty pass-rate needs --model
    label-topic-output-empty | --topic-output '' | --topic-output must name a column
    label-topic-fn-no-module | --topic-fn function | --topic-fn must look like MODULE:FUNCTION; got 'function'
    label-in-place-and-another-output | --in-place
    | --in-place writes to the input file 'in\.jsonl'; drop --output 'out\.jsonl' or --in-place
    label-pass-rate-missing-model-path | --difficulty pass-rate --model ./no-model
    | model path './no-model' does not exist
    label-topic-column-missing | --topic-column nope
    | --topic-column 'nope': the input has no such column; its columns are \['prompt', 'answer', 'topic',
    +  'difficulty'\]
    label-prompt-column-missing | --topic tfidf --prompt-column nope
    | --prompt-column 'nope': the input has no such column
    label-topic-fn-missing-module | --topic-fn no_such_module_xyz:f
    | --topic-fn 'no_such_module_xyz:f' cannot be loaded: ModuleNotFoundError
"""
_COLUMNS = r"its columns are \['prompt', 'answer', 'topic', 'difficulty'\]"
_TOPIC_FN = r"the labelling function " + HERE
#: (id, arguments after ``ebpo data label in.jsonl -o out.jsonl``, message) on a good input
LABEL_ROWS = [
    # numbers
    # option combinations that would do nothing, or not what was asked
    # issue 46 item 9: a named column this run would not read was ignored without a word
    *[
        (
            f"label-{option[2:]}-absent",
            f"{option} nope",
            rf"{option} 'nope': the input has no such column; " + _COLUMNS + "$",
        )
        for option in ("--prompt-column", "--answer-column", "--level-column")
    ],
    # --topic-fn
    (
        "label-topic-fn-raises",
        f"--topic-fn {HERE}:raising_topic",
        _TOPIC_FN + r":raising_topic raised KeyError on row 1: 'subfield'$",
    ),
    (
        "label-topic-fn-returns-none",
        f"--topic-fn {HERE}:no_topic",
        _TOPIC_FN + r":no_topic returned no label for row 0",
    ),
    (
        "label-topic-fn-unhashable",
        f"--topic-fn {HERE}:list_topic",
        _TOPIC_FN
        + r":list_topic returned an unhashable list for row 0; return a string or an integer",
    ),
    (
        "label-topic-fn-missing-function",
        f"--topic-fn {HERE}:nope",
        rf"--topic-fn '{HERE}:nope' cannot be loaded: AttributeError: module '{HERE}' has no attribute 'nope'",
    ),
    (
        "label-topic-fn-not-callable",
        f"--topic-fn {HERE}:NOT_CALLABLE",
        rf"--topic-fn '{HERE}:NOT_CALLABLE' is not callable",
    ),
    (
        "label-topic-fn-and-topic",
        f"--topic-fn {HERE}:raising_topic --topic tfidf",
        r"--topic-fn replaces --topic; drop --topic tfidf",
    ),
]
#: ``ebpo data label in.jsonl ARGUMENTS`` on a good input: where the output goes
OUTPUT_TABLE = r"""
    label-output-below-dev-null | -o /dev/null/out.jsonl
    | --output '/dev/null/out\.jsonl' lies below '/dev/null', which is not a directory
    label-output-below-a-file | -o in.jsonl/out.jsonl
    | --output 'in\.jsonl/out\.jsonl' lies below 'in\.jsonl', which is not a directory
    label-output-dev-null | -o /dev/null | --output must end in \.jsonl or \.parquet
    label-output-csv | -o out.csv | --output must end in \.jsonl or \.parquet
    label-output-is-input | -o in.jsonl | --output 'in\.jsonl' is the input file; pass --in-place
    label-no-output |  | --output is required \(or --in-place
"""

LABEL_CASES = [
    # output paths: the input itself, a directory, below a file or /dev/null, wrong suffix, none
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
        "label-num-topics-above-rows",
        ["data", "label", "in.jsonl", "-o", "out.jsonl", "--topic", "tfidf", "--num-topics", "5"],
        L + r"num_topics \(5\) exceeds the number of texts \(3\)",
        setup=PLAIN_IN,
    ),
    # option combinations that would do nothing, or not what was asked
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
        "label-difficulty-level-without-column",
        [*LABEL, "--difficulty", "level", "--topic", "none"],
        L + r"--difficulty level needs a level column",
        setup=PLAIN_IN,
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
    # --topic-fn
]

#: (name, row 1's difficulty as JSON, message) for ``ebpo data order in.jsonl --order difficulty``
ROW_0 = jsonl({"prompt": "a", "difficulty": 1})
DIFFICULTIES = r"""
    true | true | difficulty must be numbers \(higher = harder\); row 1 holds True, a boolean
    false | false | .*row 1 holds False, a boolean
    string-1 | "1" | .*row 1 holds '1', a str
    string-empty | "" | .*row 1 holds '', a str
    string-level | "Level 3" | .*row 1 holds 'Level 3', a str\. Convert level strings
    list | [1] | .*row 1 holds \[1\], a list
    object | {"v": 1} | .*row 1 holds \{'v': 1\}, a dict
    nan | NaN | difficulty has 1 missing or non-finite value\(s\) \(first at row 1\): nan
    null | null | .*\(first at row 1\): None; fill them
    infinity | Infinity | .*\(first at row 1\): inf
    overflowing-float | 1e400 | .*\(first at row 1\): inf
"""
#: ``ebpo data order in.jsonl --order topic ARGUMENTS`` on a good input
ORDER_TABLE = r"""
    order-output-is-input | -o in.jsonl | --output 'in\.jsonl' is the input file; pass --in-place
    order-output-below-dev-null | -o /dev/null/x.parquet | --output '/dev/null/x\.parquet' lies below '/dev/null'
    order-output-csv | -o out.csv | --output must end in \.jsonl or \.parquet
    order-no-output |  | --output is required \(or --in-place
    order-in-place-and-another-output | -o out.jsonl --in-place | --in-place writes to the input file
    order-seed-negative | -o out.jsonl --seed -2 | --seed must be an integer >= 0, got -2
    order-topic-column-missing | -o out.jsonl --topic-column nope
    | --topic-column 'nope': the input has no such column; its columns are \['prompt', 'answer', 'topic',
    +  'difficulty'\]
    order-difficulty-column-missing | -o out.jsonl --difficulty-column level
    | --difficulty-column 'level': the input has no such column
"""
ORDER_CASES = [
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
            setup=files({"in.jsonl": ROW_0 + '{"prompt": "b", "difficulty": ' + token + "}\n"}),
        )
        for name, token, match in table_rows(DIFFICULTIES, 3)
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
DEMO_TABLE = r"""
    demo-seed-negative | --seed -1 | --seed must be an integer >= 0, got -1$
    demo-prompts-0 | --prompts 0 | --prompts must be an integer between 1 and 100000, got 0$
    demo-prompts-negative | --prompts -4 | --prompts must be an integer between 1 and
    demo-prompts-huge | --prompts 10000000 | --prompts must be an integer between 1 and 100000
    demo-group-size-0 | --group-size 0 | --group-size must be an integer between 1 and 64, got 0$
    demo-group-size-huge | --group-size 1000 | --group-size must be an integer between 1 and 64
    demo-steps-0 | --steps 0 | --steps must be an integer between 1 and 10000, got 0$
    demo-too-many-responses | --prompts 100000 --group-size 64 --steps 10
    | --prompts x --group-size x --steps = 64,000,000 responses; .* at most 20,000,000
"""
DEMO_CASES = cli_table(["demo"], D, DEMO_TABLE) + []

S = r"^ebpo simulate: error: "
SIMULATE_TABLE = r"""
    simulate-output-dir-empty | --quick --output-dir '' | --output-dir must be a non-empty path
    simulate-no-experiment | --experiments , | --experiments must be a comma-separated subset
    simulate-seed-negative | --quick --seed -1 | --seed must be an integer >= 0, got -1
    simulate-output-dir-below-dev-null | --quick --output-dir /dev/null/sim
    | --output-dir '/dev/null/sim' lies below '/dev/null'
    simulate-unknown-experiment | --experiments baseline,nope
    | --experiments must be a comma-separated subset of baseline,saturation,bandit,priors, got 'baseline,nope'
"""
A_FILE = files({"results": "precious"})
SIMULATE_CASES = [
    *cli_table(["simulate"], S, SIMULATE_TABLE),
    CliCase(
        "simulate-output-dir-is-file",
        ["simulate", "--quick", "--output-dir", "results"],
        S + r"--output-dir 'results' is a file, expected a directory",
        setup=A_FILE,
    ),
    CliCase(
        "simulate-output-dir-below-a-file",
        ["simulate", "--quick", "--output-dir", "results/sim"],
        S + r"--output-dir 'results/sim' lies below 'results', which is not a directory",
        setup=A_FILE,
    ),
]

T = r"^ebpo train: error: "
# ebpo train loads the dataset before it creates the run directory or loads a model
TRAIN_DATASET_CASES = [
    CliCase(id, ["train", "--dataset", "in.jsonl"], T + match, setup=files({"in.jsonl": content}))
    for id, content, match in [
        ("train-dataset-malformed", MALFORMED["bad-json"][0], r"in\.jsonl: line 2: not valid JSON"),
        ("train-dataset-empty", "", r"data file 'in\.jsonl' is empty: it holds no rows"),
        (
            "train-dataset-non-object",
            MALFORMED["non-object-line"][0],
            r"in\.jsonl: line 2 is a JSON array",
        ),
        (
            "train-dataset-missing-columns",
            jsonl({"question": "1+1?"}),
            r"data file 'in\.jsonl': cannot recognise the columns \['question'\]: "
            r"expected at least 'prompt' and 'answer'",
        ),
        (
            "train-dataset-empty-answer",
            jsonl({"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": ""}),
            r"in\.jsonl: line 2 has no 'answer'",
        ),
    ]
]

CASES = cli_table(LABEL, L, LABEL_TABLE, GOOD_IN) + cli_rows(LABEL, L, LABEL_ROWS, GOOD_IN)
CASES += cli_table(ORDER[:5], R, ORDER_TABLE, GOOD_IN)
CASES += LABEL_CASES + ORDER_CASES + DEMO_CASES + SIMULATE_CASES + TRAIN_DATASET_CASES
CASES += cli_table(LABEL[:3], L, OUTPUT_TABLE, GOOD_IN)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cli_user_error(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)
