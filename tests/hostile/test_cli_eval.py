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

from tests.hostile.harness import CliCase, check_cli_error, ids
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


CASES = [
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
    CliCase(
        "out-is-file",
        [*EVAL, "--out", "res"],
        E + r"out_dir \(--out\) 'res' is a file, expected a directory",
        setup=files({"res": "precious"}),
    ),
    CliCase(
        "out-below-a-file",
        [*EVAL, "--out", "res/sub"],
        E + r"out_dir \(--out\) 'res/sub' lies below 'res', which is not a directory",
        setup=files({"res": "precious"}),
    ),
    CliCase(
        "out-below-dev-null",
        [*EVAL, "--out", "/dev/null/res"],
        E + r"out_dir \(--out\) '/dev/null/res' lies below '/dev/null'",
    ),
    CliCase("out-empty", [*EVAL, "--out", ""], E + r"out_dir \(--out\) must be a non-empty path"),
    # scoring and generation numbers
    CliCase(
        "timeout-negative",
        [*EVAL, "--timeout", "-1"],
        E + r"timeout must be a finite number of seconds > 0 .*got -1\.0$",
    ),
    CliCase(
        "timeout-zero",
        [*EVAL, "--timeout", "0"],
        E + r"timeout must be a finite number of seconds > 0",
    ),
    CliCase(
        "timeout-nan",
        [*EVAL, "--timeout", "nan"],
        E + r"timeout must be a finite number of seconds > 0 .*got nan$",
    ),
    CliCase(
        "timeout-inf",
        [*EVAL, "--timeout", "inf"],
        E + r"timeout must be a finite number of seconds > 0 .*got inf$",
    ),
    CliCase(
        "score-workers-0",
        [*EVAL, "--score-workers", "0"],
        E + r"score_workers must be an integer >= 1, got 0$",
    ),
    CliCase(
        "score-workers-negative",
        [*EVAL, "--score-workers", "-2"],
        E + r"score_workers must be an integer >= 1, got -2$",
    ),
    CliCase(
        "batch-size-0",
        [*EVAL, "--batch-size", "0"],
        E + r"batch_size must be an integer >= 1, got 0$",
    ),
    CliCase("n-0", [*EVAL[:-1], "0"], E + r"n must be an integer >= 1, got 0$"),
    CliCase("n-negative", [*EVAL[:-1], "-3"], E + r"n must be an integer >= 1, got -3$"),
    CliCase(
        "k-not-integer",
        [*EVAL, "--k", "1,a"],
        E + r"--k must be comma-separated integers such as 1,4,32; got '1,a'$",
    ),
    CliCase("k-float", [*EVAL, "--k", "1.5"], E + r"--k must be comma-separated integers"),
    CliCase("k-empty", [*EVAL, "--k", ""], E + r"--k must be comma-separated integers"),
    CliCase(
        "k-above-n",
        [*EVAL, "--k", "1,4"],
        E + r"every k in ks \(--k\) must be in \[1, n=2\], got \[1, 4\]$",
    ),
    CliCase(
        "k-zero",
        [*EVAL, "--k", "0,1"],
        E + r"every k in ks \(--k\) must be in \[1, n=2\], got \[0, 1\]$",
    ),
    CliCase("k-negative", [*EVAL, "--k", "-1"], E + r"every k in ks \(--k\) must be in \[1, n=2\]"),
    CliCase("limit-0", [*EVAL, "--limit", "0"], E + r"limit must be an integer >= 1, got 0$"),
    CliCase(
        "limit-negative", [*EVAL, "--limit", "-1"], E + r"limit must be an integer >= 1, got -1$"
    ),
    CliCase(
        "temperature-nan",
        [*EVAL, "--temperature", "nan"],
        E + r"temperature must be a finite number >= 0 \(0 = greedy\), got nan$",
    ),
    CliCase(
        "temperature-inf",
        [*EVAL, "--temperature", "inf"],
        E + r"temperature must be a finite number >= 0",
    ),
    CliCase(
        "temperature-negative",
        [*EVAL, "--temperature", "-1"],
        E + r"temperature must be a finite number >= 0",
    ),
    CliCase("top-p-zero", [*EVAL, "--top-p", "0"], E + r"top_p must be in \(0, 1\], got 0\.0$"),
    CliCase(
        "top-p-above-one", [*EVAL, "--top-p", "1.5"], E + r"top_p must be in \(0, 1\], got 1\.5$"
    ),
    CliCase("top-p-nan", [*EVAL, "--top-p", "nan"], E + r"top_p must be in \(0, 1\], got nan$"),
    CliCase(
        "max-new-tokens-0",
        [*EVAL, "--max-new-tokens", "0"],
        E + r"max_new_tokens must be an integer >= 1, got 0$",
    ),
    CliCase("seed-negative", [*EVAL, "--seed", "-1"], E + r"seed must be an integer >= 0, got -1$"),
    # benchmarks and data files
    CliCase(
        "unknown-benchmark",
        [*EVAL[:4], "aime-2025,gsm8k"],
        E + r"benchmarks: unknown \['gsm8k'\]; choose from",
    ),
    CliCase("no-benchmark", [*EVAL[:4], ","], E + r"--benchmarks must name at least one of"),
    CliCase(
        "repeated-benchmark",
        [*EVAL[:4], "aime-2025,aime-2025"],
        E + r"benchmarks: \['aime-2025'\] named more than once$",
    ),
    CliCase(
        "data-file-missing",
        [*EVAL, "--data-file", "aime-2025=missing.jsonl"],
        E + r"data file for 'aime-2025' \('missing\.jsonl'\) does not exist$",
    ),
    CliCase(
        "data-file-is-directory",
        [*EVAL, "--data-file", "aime-2025=dir.jsonl"],
        E + r"data file for 'aime-2025' \('dir\.jsonl'\) is a directory$",
        setup=files({"dir.jsonl": None}),
    ),
    CliCase(
        "data-file-no-equals",
        [*EVAL, "--data-file", "aime.jsonl"],
        E + r"--data-file must be NAME=PATH, got 'aime\.jsonl'$",
    ),
    CliCase(
        "data-file-no-name",
        [*EVAL, "--data-file", "=aime.jsonl"],
        E + r"--data-file must be NAME=PATH, got '=aime\.jsonl'$",
    ),
    CliCase(
        "data-file-not-evaluated",
        [*EVAL, "--data-file", "math-500=aime.jsonl"],
        E
        + r"data_files \(--data-file\) names 'math-500', which is not among the benchmarks \['aime-2025'\]$",
        setup=files({"aime.jsonl": GOOD_ROWS}),
    ),
    CliCase(
        "data-file-twice",
        [*EVAL, "--data-file", "aime-2025=a.jsonl", "--data-file", "aime-2025=b.jsonl"],
        E + r"--data-file names 'aime-2025' twice \('a\.jsonl' and 'b\.jsonl'\)$",
    ),
    CliCase(
        "data-dir-missing",
        [*EVAL, "--data-dir", "nowhere"],
        E + r"data_dir \(--data-dir\) 'nowhere' is not a directory$",
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
CASES += [
    # --device / --dtype: refused before anything loads
    CliCase(
        "device-unknown",
        [*EVAL, "--device", "gpu"],
        E + r"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'$",
    ),
    CliCase(
        "device-index-not-a-number",
        [*EVAL, "--device", "cuda:x"],
        E + r"device must be .* got 'cuda:x'$",
    ),
    CliCase(
        "dtype-unknown", [*EVAL, "--dtype", "fp8"], E + r"argument --dtype: invalid choice: 'fp8'"
    ),
]
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
