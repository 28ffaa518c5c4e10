"""Hostile inputs for ``ebpo replay`` (issue 31): each row ends in one line on stderr naming the
file and the line (or the option), exit code 2, and nothing created or changed — also when the
bad row is in the run's last step, after every other step was replayed.

The rollout dumps are tests/fixtures/replay/v1 (written by verl's own writer), copied and then
corrupted the way files get corrupted: a NaN from a failed reward call, a line cut short by a
crash, a hand edit, the wrong file in the directory."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ebpo.cli import main
from tests.hostile.harness import CliCase, check_cli_error, cli_table, ids
from tests.hostile.test_cli_data import files

R = r"^ebpo replay: error: "
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "v1"
DUMP = {step: (FIXTURES / f"{step}.jsonl").read_text() for step in (1, 2, 10)}
OUT = ["--output-dir", "out"]


def dumps(**changed: str):
    """Setup: ``run/{1,2,10}.jsonl`` as verl wrote them, with ``changed`` (``s1="..."``: the text
    of run/1.jsonl) instead."""
    contents = {f"run/{step}.jsonl": text for step, text in DUMP.items()}
    contents.update({f"run/{name[1:]}.jsonl": text for name, text in changed.items()})
    return files(contents)


def linked(contents: dict[str, str | None], links: dict[str, str]):
    """Setup: :func:`files` ``contents``, then the symbolic links ``{path: target}``."""

    def setup(tmp: Path) -> None:
        files(contents)(tmp)
        for name, target in links.items():
            (tmp / name).symlink_to(target)

    return setup


def edit(step: int, line: int, old: str, new: str) -> str:
    """The dump of ``step`` with ``old`` replaced by ``new`` on ``line`` (from 1)."""
    lines = DUMP[step].splitlines(keepends=True)
    assert old in lines[line - 1], (old, lines[line - 1])
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return "".join(lines)


def jsonl(*rows: dict) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def parquet(rows: list[dict], schema: pa.Schema | None = None) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buffer)
    return buffer.getvalue()


def rows(*triples: tuple[int, str, float]) -> list[dict]:
    return [{"step": s, "prompt": p, "reward": r} for s, p, r in triples]


GOOD_TABLE = rows((1, "a", 1.0), (1, "a", 0.0), (2, "b", 1.0))
DUMPS = dumps()
PADDING_ONLY = "".join(line + "\n" for line in DUMP[1].splitlines() if '"uid": "pad' in line)

VERL_CASES = [
    CliCase(
        "step-repeats-across-directories",
        ["replay", "a", "b", *OUT],
        R + r"b/2\.jsonl: line 1: step 2 repeats \(its rows began at a/2\.jsonl: line 1\)",
        setup=files({"a/1.jsonl": DUMP[1], "a/2.jsonl": DUMP[2], "b/2.jsonl": DUMP[2]}),
    ),
    CliCase(
        "line-cut-short",
        ["replay", "run", *OUT],
        R + r"run/10\.jsonl: line 27: not valid JSON \(Unterminated string",
        setup=dumps(s10=DUMP[10][: len(DUMP[10]) - 20]),
    ),
    CliCase(
        "png-in-place-of-a-dump",
        ["replay", "run", *OUT],
        R + r"run/2\.jsonl: line 1: not UTF-8 text",
        setup=files({"run/1.jsonl": DUMP[1], "run/2.jsonl": b"\x89PNG\r\n\x1a\n\x00\x00"}),
    ),
    CliCase(
        "csv-in-place-of-a-dump",
        ["replay", "run", *OUT],
        R + r"run/1\.jsonl: line 1: not valid JSON",
        setup=files({"run/1.jsonl": "step,score\n1,0\n"}),
    ),
    CliCase(
        "empty-dump",
        ["replay", "run", *OUT],
        R + r"run/2\.jsonl: holds no rows",
        setup=dumps(s2=""),
    ),
    CliCase(
        "padding-rows-only",
        ["replay", "run", *OUT],
        R + r"run/1\.jsonl: step 1 holds only verl's padding rows",
        setup=dumps(s1=PADDING_ONLY),
    ),
    CliCase(
        "directory-without-dumps",
        ["replay", "run", *OUT],
        R + r"input directory 'run' holds no \{step\}\.jsonl files .*trainer\.rollout_data_dir",
        setup=files({"run/notes.txt": "x", "run/rollouts.jsonl": DUMP[1]}),
    ),
    CliCase("missing-input", ["replay", "nope", *OUT], R + r"input 'nope' does not exist"),
    CliCase(
        "verl-format-on-a-csv-file",
        ["replay", "t.csv", *OUT],
        R + r"input 't\.csv': verl's rollout dumps are \.jsonl files; .*--format table",
        setup=files({"t.csv": "prompt,reward,step\na,1,1\n"}),
    ),
    CliCase(
        "estimator-refuses-the-rewards",
        ["replay", "t.jsonl", *OUT, "--format", "table", "--estimators", "ebpo_bb"],
        R + r"t\.jsonl: step 1: ebpo_bb cannot take these rewards: rewards must lie in \[0, 1\]",
        setup=files({"t.jsonl": jsonl(*rows((1, "a", -1.0), (1, "a", 1.0)))}),
    ),
]

T = ["--format", "table"]
#: ``ebpo replay ARGUMENTS`` on the fixture dump in ``run/``: one stderr line matching R + the message
DUMPS_TABLE = r"""
    file-given-twice | run/1.jsonl run/../run/1.jsonl --output-dir out
    | input file 'run/\.\./run/1\.jsonl' is given twice
    unknown-estimator | run --output-dir out --estimators ebpo,ebpo_typo
    | unknown estimator 'ebpo_typo'; expected one of \[
    no-estimator | run --output-dir out --estimators ' , ' | --estimators must name at least one estimator
    output-dir-is-a-file | run --output-dir run/1.jsonl | --output-dir 'run/1\.jsonl' is a file, expected a directory
    column-option-with-verl-format | run --output-dir out --format verl --reward-column acc
    | --reward-column name a table's columns: they go with --format table
    output-dir-is-the-dump | run --output-dir run | --output-dir 'run' is the input 'run': write the report elsewhere$
    output-dir-inside-the-dump | run --output-dir run/report
    | --output-dir 'run/report' lies inside the input 'run': write the report outside
    output-dir-holds-dump-files | run/1.jsonl run/2.jsonl --output-dir run
    | --output-dir 'run' holds the input 'run/1\.jsonl'
"""
TABLE_CASES = [
    CliCase(
        "table-missing-column",
        ["replay", "t.jsonl", *OUT, *T],
        R + r"t\.jsonl: line 1: no 'reward' field, or it is null",
        setup=files({"t.jsonl": jsonl({"step": 1, "prompt": "a", "score": 1.0})}),
    ),
    CliCase(
        "table-step-repeats",
        ["replay", "t.jsonl", *OUT, *T],
        R + r"t\.jsonl: line 3: step 1 repeats \(its rows began at t\.jsonl: line 1\); each "
        r"step's rows must be together",
        setup=files({"t.jsonl": jsonl(*rows((1, "a", 1.0), (2, "b", 0.0), (1, "a", 0.0)))}),
    ),
    CliCase(
        "table-steps-decrease",
        ["replay", "t.jsonl", *OUT, *T],
        R + r"t\.jsonl: line 2: step 1 comes after step 2 \(t\.jsonl: line 1\); steps must "
        r"increase: sort the table by step",
        setup=files({"t.jsonl": jsonl(*rows((2, "a", 1.0), (1, "b", 0.0)))}),
    ),
    CliCase(
        "table-prompt-kind-changes",
        ["replay", "t.jsonl", *OUT, *T],
        R + r"t\.jsonl: line 2: 'prompt' is a list, object or float \(\[1\]\), expected a "
        r"string as in the file's first row",
        setup=files(
            {
                "t.jsonl": jsonl(
                    {"step": 1, "prompt": "a", "reward": 1.0},
                    {"step": 1, "prompt": [1], "reward": 0.0},
                )
            }
        ),
    ),
    CliCase(
        "csv-missing-column",
        ["replay", "t.csv", *OUT, *T, "--reward-column", "accuracy"],
        R + r"t\.csv: no column 'accuracy' \(columns: \['prompt', 'reward', 'step'\]\)",
        setup=files({"t.csv": "prompt,reward,step\na,1,1\n"}),
    ),
    CliCase(
        "parquet-null-reward",
        ["replay", "t.parquet", *OUT, *T],
        R + r"t\.parquet: row 2: 'reward' is null",
        setup=files({"t.parquet": parquet(rows((1, "a", 1.0), (1, "a", None)))}),  # type: ignore[arg-type]
    ),
    CliCase(
        "parquet-reward-of-strings",
        ["replay", "t.parquet", *OUT, *T],
        R + r"t\.parquet: column 'reward' holds string, not numbers",
        setup=files({"t.parquet": parquet([{"step": 1, "prompt": "a", "reward": "1.0"}])}),
    ),
    CliCase(
        "parquet-that-is-not-parquet",
        ["replay", "t.parquet", *OUT, *T],
        R + r"t\.parquet: not a readable Parquet file",
        setup=files({"t.parquet": jsonl(*GOOD_TABLE)}),
    ),
    CliCase(
        "same-column-twice",
        ["replay", "t.jsonl", *OUT, "--prompt-column", "step"],
        R + r"--prompt-column, --reward-column and --step-column must be three different columns",
        setup=files({"t.jsonl": jsonl(*GOOD_TABLE)}),
    ),
    CliCase(
        "output-would-overwrite-an-input",
        ["replay", "out/replay.csv", *OUT, *T],
        R + r"--output-dir 'out' holds the input 'out/replay\.csv': write the report elsewhere",
        setup=files({"out/replay.csv": "prompt,reward,step\na,1,1\n"}),
    ),
    CliCase(
        "output-is-a-link-to-an-input",
        ["replay", "t.csv", *OUT, *T],
        R + r"--output-dir 'out': replay\.csv would overwrite an input of this replay$",
        setup=linked(
            {"t.csv": "prompt,reward,step\na,1,1\n", "out": None}, {"out/replay.csv": "../t.csv"}
        ),
    ),
    CliCase(
        "output-dir-holds-the-tables",
        ["replay", "t", "--output-dir", "t", *T],
        R + r"--output-dir 't' is the input 't': write the report elsewhere$",
        setup=files({"t/a.jsonl": jsonl(*GOOD_TABLE)}),
    ),
]

# issue 46 item 10: the report went into the dump it replayed (compare refuses the same): the
# output directory may not be an input, hold one or lie inside one, links resolved, and that is
# refused before any input is read (a broken dump is not even looked at)
APART_CASES = [
    CliCase(
        "output-dir-is-the-dump-spelt-otherwise",
        ["replay", "run", "--output-dir", "{tmp}/./run/"],
        R + r"--output-dir '.*/run' is the input 'run'",
        setup=DUMPS,
    ),
    CliCase(
        "output-dir-holds-the-dump",
        ["replay", "d/run", "--output-dir", "d"],
        R + r"--output-dir 'd' holds the input 'd/run': write the report elsewhere",
        setup=files({f"d/run/{step}.jsonl": text for step, text in DUMP.items()}),
    ),
    CliCase(
        "output-dir-is-the-dump-through-a-link",
        ["replay", "run", "--output-dir", "link"],
        R + r"--output-dir 'link' is the input 'run'",
        setup=linked({f"run/{step}.jsonl": text for step, text in DUMP.items()}, {"link": "run"}),
    ),
    CliCase(
        "output-dir-inside-the-dump-through-a-link",
        ["replay", "run", "--output-dir", "link/new/deeper"],
        R + r"--output-dir 'link/new/deeper' lies inside the input 'run'",
        setup=linked({f"run/{step}.jsonl": text for step, text in DUMP.items()}, {"link": "run"}),
    ),
    CliCase(
        "input-is-a-link-into-the-output-dir",
        ["replay", "dumps", "--output-dir", "out"],
        R + r"--output-dir 'out' holds the input 'dumps'",
        setup=linked(
            {f"out/run/{step}.jsonl": text for step, text in DUMP.items()}, {"dumps": "out/run"}
        ),
    ),
    CliCase(
        "dump-file-linked-from-the-output-dir",
        ["replay", "run", *OUT],
        R + r"--output-dir 'out' holds the input '.*run/2\.jsonl'",
        setup=linked(
            {"run/1.jsonl": DUMP[1], "out/2.jsonl": DUMP[2]}, {"run/2.jsonl": "../out/2.jsonl"}
        ),
    ),
    CliCase(
        "output-dir-refused-before-a-broken-dump-is-read",
        ["replay", "run", "--output-dir", "run/report"],
        R + r"--output-dir 'run/report' lies inside the input 'run'",
        setup=dumps(s1="{oops\n"),
    ),
]

# The CSV reader takes what the JSON-lines reader takes, no more: numbers in plain ASCII decimal
# (Python's float() and int() also take "1_0", other scripts' digits and white space of any kind),
# every column once, steps and uid numbers within 64 bits, each refusal naming the file and line.
CSV_CASES = [
    CliCase(
        "parquet-uint64-step-past-2-63",
        ["replay", "t.parquet", *OUT, *T],
        R + r"t\.parquet: row 3: 'step' must be an integer step that fits 64 bits .*, got "
        r"9223372036854775809$",
        setup=files(
            {
                "t.parquet": parquet(
                    [
                        {"step": s, "prompt": p, "reward": 1.0}
                        for s, p in ((1, "a"), (1, "a"), (2**63 + 1, "b"))
                    ],
                    pa.schema(
                        [("step", pa.uint64()), ("prompt", pa.string()), ("reward", pa.float64())]
                    ),
                )
            }
        ),
    ),
    CliCase(
        "jsonl-step-past-2-63",
        ["replay", "t.jsonl", *OUT, *T],
        R + r"t\.jsonl: line 2: 'step' must be an integer step that fits 64 bits",
        setup=files(
            {
                "t.jsonl": '{"step": 1, "prompt": "a", "reward": 1}\n'
                f'{{"step": {2**63}, "prompt": "a", "reward": 1}}\n'
            }
        ),
    ),
    CliCase(
        "verl-uid-output-number-over-64-bits",
        ["replay", "run", *OUT],
        R + r"run/1\.jsonl: line 4: the uid output number 123456789012345678901234 does not fit "
        r"64 bits$",
        setup=files(
            {
                "run/1.jsonl": jsonl(
                    {"uid": "pad" + "0" * 32, "score": 0.0, "step": 1},
                    {"uid": "p_0_0", "score": 1.0, "step": 1},
                    {"uid": "p_1_0", "score": 0.0, "step": 1},
                    {"uid": "q_0_123456789012345678901234", "score": 0.0, "step": 1},
                )
            }
        ),
    ),
    CliCase(
        "verl-uid-session-number-over-64-bits",
        ["replay", "run", *OUT],
        R + r"run/2\.jsonl: line 2: the uid session number 18446744073709551617 does not fit",
        setup=files(
            {
                "run/1.jsonl": jsonl({"uid": "p_0_0", "score": 1.0, "step": 1}),
                "run/2.jsonl": jsonl(
                    {"uid": "p_0_0", "score": 1.0, "step": 2},
                    {"uid": f"p_{2**64 + 1}_0", "score": 0.0, "step": 2},
                ),
            }
        ),
    ),
]

#: (id, step, line, old, new, message): ``ebpo replay run`` where ``old`` on ``line`` of the
#: dump of ``step`` reads ``new``; refused with R + 'run/STEP.jsonl: line LINE: ' + the message
DUMP_EDITS = [
    (
        "nan-score",
        1,
        5,
        '"score": 0.0',
        '"score": NaN',
        r"'score' is NaN \(a failed reward call\?\)",
    ),
    ("nan-score-in-the-last-step", 10, 27, '"score": 0.0', '"score": NaN', r"'score' is NaN"),
    (
        "infinite-score",
        2,
        3,
        '"score": ',
        '"score": -Infinity, "x": ',
        r"'score' is infinite \(-inf\)",
    ),
    ("score-beyond-float", 1, 2, '"score": 0.0', '"score": 1e999', r"'score' is infinite \(inf\)"),
    ("score-as-text", 1, 6, '"score": 0.0', '"score": "0.0"', r"'score' is not a number: '0\.0'"),
    ("score-as-boolean", 1, 6, '"score": 0.0', '"score": true', r"'score' is not a number: True"),
    ("score-null", 1, 4, '"score": 0.0', '"score": null', r"no 'score' field, or it is null"),
    ("score-missing", 1, 4, '"score": 0.0, ', "", r"no 'score' field, or it is null"),
    (
        "not-a-verl-dump",
        1,
        1,
        '"score": 0.0, ',
        "",
        r"no score field: not a verl rollout dump .*--format table",
    ),
    (
        "uid-not-a-string",
        1,
        4,
        '"uid": "',
        '"uid": 5, "u": "',
        r"'uid' is an integer \(5\), expected a string",
    ),
    (
        "step-not-an-integer",
        2,
        7,
        '"step": 2',
        '"step": 2.5',
        r"'step' must be an integer step, got 2\.5",
    ),
    (
        "two-steps-in-one-dump",
        1,
        5,
        '"step": 1',
        '"step": 3',
        r"step 3, but the file began with step 1: a verl rollout dump "
        r"holds one step",
    ),
    (
        "array-line",
        2,
        3,
        DUMP[2].splitlines()[2],
        "[1, 2]",
        r"a JSON list, expected an object per line",
    ),
    (
        "duplicate-field",
        1,
        8,
        '"score": ',
        '"score": 1.0, "score": ',
        r"cannot be read \(key 'score' appears twice in one object\)",
    ),
]
#: (id, text of t.csv, message): ``ebpo replay t.csv --format table`` refused with
#: R + 't.csv: ' + the message
CSV_TEXTS = [
    (
        "csv-reward-not-a-number",
        "prompt,reward,step\na,1,1\na,abc,1\n",
        r"line 3: 'reward' is not a number in plain decimal digits: 'abc'",
    ),
    ("csv-reward-nan", "prompt,reward,step\na,nan,1\n", r"line 2: 'reward' is NaN"),
    ("csv-empty-reward", "prompt,reward,step\na,1,1\na,,1\n", r"line 3: no 'reward' value"),
    (
        "csv-column-twice-in-the-header",
        "prompt,reward,step,prompt\na,1,1,b\n",
        r"line 1: column 'prompt' appears twice in the header; rename or drop one$",
    ),
    (
        "csv-other-column-twice",
        "prompt,reward,step,note,note\na,1,1,x,y\n",
        r"line 1: column 'note' appears twice",
    ),
    (
        "csv-step-with-an-underscore",
        "prompt,reward,step\na,1,1\na,0,1_0\n",
        r"line 3: 'step' must be an integer step in plain decimal digits, got '1_0'",
    ),
    (
        "csv-first-step-with-an-underscore",
        "prompt,reward,step\na,1,1_0\n",
        r"line 2: 'step' must be an integer step in plain decimal digits, got '1_0'",
    ),
    (
        "csv-reward-with-an-underscore",
        "prompt,reward,step\na,1_000,1\n",
        r"line 2: 'reward' is not a number in plain decimal digits: '1_000'",
    ),
    (
        "csv-arabic-indic-step",
        "prompt,reward,step\na,1,1\na,0,\u0663\n",
        r"line 3: 'step' must be an integer step in plain decimal digits, got '\u0663'",
    ),
    (
        "csv-arabic-indic-reward",
        "prompt,reward,step\na,\u0661,1\n",
        r"line 2: 'reward' is not a number in plain decimal digits: '\u0661'",
    ),
    (
        "csv-fullwidth-digits",
        "prompt,reward,step\na,\uff11,1\n",
        r"line 2: 'reward' is not a number in plain decimal digits",
    ),
    (
        "csv-step-past-2-63",
        f"prompt,reward,step\na,1,1\nb,0,{2**63 + 1}\n",
        r"line 3: 'step' must be an integer step that fits 64 bits "
        r"\(-2\*\*63 to 2\*\*63 - 1\), got 9223372036854775809$",
    ),
    (
        "csv-step-of-5000-digits",
        "prompt,reward,step\na,1," + "1" * 5000 + "\n",
        r"line 2: 'step' must be an integer step in plain decimal digits, got '1111",
    ),
]

CASES = (
    VERL_CASES
    + TABLE_CASES
    + CSV_CASES
    + APART_CASES
    + cli_table(["replay"], R, DUMPS_TABLE, DUMPS)
)
CASES += [
    CliCase(
        id,
        ["replay", "run", *OUT],
        R + rf"run/{step}\.jsonl: line {line}: " + match,
        setup=dumps(**{f"s{step}": edit(step, line, old, new)}),
    )
    for id, step, line, old, new, match in DUMP_EDITS
]
CASES += [
    CliCase(
        id, ["replay", "t.csv", *OUT, *T], R + r"t\.csv: " + match, setup=files({"t.csv": text})
    )
    for id, text, match in CSV_TEXTS
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cli_user_error(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)


def test_a_csv_reads_as_its_json_lines_twin(tmp_path):
    """A byte-order mark is tolerated and every plain decimal spelling JSON has (sign, fraction,
    exponent) gives the number the JSON-lines reader gives: the replays are equal."""
    rows_ = [
        ("a", "1", "+1.0"),
        ("a", "01", "0"),
        ("b", "1", "1e0"),
        ("b", "1", ".5"),
        ("a", "2", "-0.25E+1"),
        ("a", "2", "2."),
    ]
    as_json = [{"prompt": p, "step": int(s), "reward": float(r)} for p, s, r in rows_]
    (tmp_path / "csv").mkdir()
    (tmp_path / "json").mkdir()
    text = "prompt,step,reward\r\n" + "".join(f"{p},{s},{r}\r\n" for p, s, r in rows_)
    (tmp_path / "csv" / "t.csv").write_text(text, encoding="utf-8-sig")
    (tmp_path / "json" / "t.jsonl").write_text(jsonl(*as_json))
    assert (tmp_path / "csv" / "t.csv").read_bytes().startswith(b"\xef\xbb\xbf")
    for name in ("csv", "json"):
        code = main(
            [
                "replay",
                str(tmp_path / name),
                "--format",
                "table",
                "--no-plots",
                "--output-dir",
                str(tmp_path / f"out-{name}"),
            ]
        )
        assert code == 0
    csv_steps = json.loads((tmp_path / "out-csv" / "replay.json").read_text())["steps"]
    json_steps = json.loads((tmp_path / "out-json" / "replay.json").read_text())["steps"]
    for record in csv_steps + json_steps:
        record.pop("source")
    assert csv_steps == json_steps
    assert [r["reward_mean"] for r in csv_steps] == [(1 + 0 + 1 + 0.5) / 4, (-2.5 + 2) / 2]
