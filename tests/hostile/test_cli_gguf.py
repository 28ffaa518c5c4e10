"""Damaged GGUF model files given to ``ebpo grpo --dry-run`` (issue 53 item 4): one line on
stderr, exit code 2, nothing written — where the dry run once passed a file whose real run died
of ``MemoryError`` (``block_count`` 2^31), or printed the gguf reader's traceback. Every copy is
the tiny GGUF of tests/evaluation/tiny_gguf.py, damaged as the row says; the loader's own table
(the real run's refusals included) is tests/evaluation/test_model_checks.py."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("trl")
pytest.importorskip("gguf")

from tests.evaluation.test_model_checks import DAMAGED, damaged_copy  # noqa: E402
from tests.hostile.harness import CliCase, check_cli_error, ids  # noqa: E402

ROWS = "".join(f'{{"prompt": "{a}+{a}=", "answer": "{2 * a}"}}\n' for a in range(4))
RECIPE = """\
model_name_or_path: m.gguf
dataset_name: folder
reward_funcs: [math_reward]
num_generations: 2
per_device_train_batch_size: 4
max_completion_length: 8
max_steps: 1
use_cpu: true
bf16: false
report_to: none
"""


def setup(how):
    def write(tmp):
        (tmp / "folder").mkdir()
        (tmp / "folder" / "train.jsonl").write_text(ROWS)
        (tmp / "r.yaml").write_text(RECIPE)
        damaged_copy(tmp, how)

    return write


CASES = [
    CliCase(
        name,
        ["grpo", "--config", "r.yaml", "--dry-run"],
        r"^ebpo grpo: error: " + match.replace(r"'.*m\.gguf'", r"'m\.gguf'"),
        setup=setup(how),
    )
    for name, how, match in DAMAGED
    if match is not None
]


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_a_damaged_gguf_ends_the_dry_run_in_one_line(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)
