"""Hostile inputs for ``ebpo train``'s files and options, round three (issue #29 items 1 and 5-7):
a resume whose files the run cannot continue from, a plain run over a run that holds checkpoints,
documents nested thousands deep or built of aliases, options past their bounds, a typo in
``extra``. Each row ends in one line on stderr and exit code 2 before a model loads, with nothing
created, lost or changed — ``run.json`` and ``metrics.jsonl`` of the run included. The same
refusals with real processes (and a resume that fails only once the trainer holds the
checkpoint): test_data_loss.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

import ebpo  # noqa: E402
from ebpo.integrations.trl.checkpoint_files import (  # noqa: E402
    ESTIMATOR_STATE_FILE,
    GENERATION_STATE_FILE,
)
from ebpo.utils.checkpoints import mark_complete  # noqa: E402
from tests.hostile.harness import CliCase, check_cli_error, cli_table, ids, table_rows  # noqa: E402
from tests.hostile.test_cli_data import files  # noqa: E402
from tests.hostile.test_cli_lab import EVAL, TINY, our_run  # noqa: E402

T = r"^ebpo train: error: "
RESUME = ["train", *TINY, "--output-dir", "run", "--resume"]
DEEP_JSON = '{"a": ' * 5000 + "1" + "}" * 5000
METRICS = '{"step": 1, "reward": 0.5}\n{"step": 2, "reward": 0.5}\n'


def with_checkpoint(run, step: int = 2, *, estimator: str | None = None, **cycle: object):
    """Setup: ``run`` (a setup), then a complete ``run/checkpoints/checkpoint-<step>`` holding
    what a resume reads of it before anything loads (``cycle``: the generation state's fields
    changed; ``estimator``: the estimator state's text)."""

    def setup(tmp: Path) -> None:
        run(tmp)
        folder = tmp / "run" / "checkpoints" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        state = ebpo.make_estimator("ebpo").state_dict()
        (folder / ESTIMATOR_STATE_FILE).write_text(estimator or json.dumps(state))
        record = {
            "micro_step": step,
            "generate_every": 1,
            "steps_per_generation": 1,
            "num_processes": 1,
            "estimator_state_before_batch": None,
            **cycle,
        }
        (folder / GENERATION_STATE_FILE).write_text(json.dumps(record))
        mark_complete(folder)

    return setup


def interrupted(**contents: str | None):
    """An interrupted run of the TINY options at step 2, with its before-RL evaluation and
    metrics (``contents``: files replaced or added)."""
    return our_run(
        "interrupted",
        2,
        **{"eval_before.json": json.dumps(EVAL), "metrics.jsonl": METRICS, **contents},
    )


CHECKPOINT = T + r"run/checkpoints/checkpoint-2/"
CYCLE = r"is not a generation-cycle record written by EBPOTrainer: "
#: items 5 and 7: ``--resume`` of a run whose checkpoint's generation state has ``fields`` (JSON)
#: is refused with CHECKPOINT + 'ebpo_generation_state.json ' + CYCLE + the message
BAD_CYCLES = r"""
    resume-generate-every-zero | {"generate_every": 0} | generate_every must be an integer >= 1, got 0$
    resume-generate-every-fraction | {"generate_every": 1.9} | generate_every must be an integer >= 1, got 1\.9$
    resume-micro-step-negative | {"micro_step": -5} | micro_step must be an integer >= 0, got -5$
    resume-num-processes-a-string | {"num_processes": "1"} | num_processes must be an integer >= 1, got '1'$
"""
#: ``ebpo train *TINY ARGUMENTS``: one stderr line matching T + the message
TINY_TABLE = r"""
    extra-ddp-timeout-1e300 | --extra '{"ddp_timeout": 1e300}' | extra\['ddp_timeout'\] must be an integer, got 1e\+300$
    extra-ddp-timeout-10-pow-30 | --extra '{"ddp_timeout": 1000000000000000000000000000000}'
    | extra\['ddp_timeout'\] must be a positive number of seconds up to 2147483647
    extra-typo-key | --extra '{"epsilon_hihg": 0.28}'
    | extra: unknown key 'epsilon_hihg'; expected a field of EBPOConfig \(did you mean 'epsilon_high'\?\)$
    extra-value-of-the-wrong-type | --extra '{"num_iterations": [2]}'
    | extra\['num_iterations'\] must be an integer, got \[2\]$
    tiny-hidden-size-10-million | --tiny-hidden-size 10000000
    | the built-in model would have about 2,000,000,640,000,000 parameters .*; at most 100,000,000: lower
    +  tiny_hidden_size or tiny_layers$
    tiny-layers-huge | --tiny-layers 100000 | the built-in model would have about .* parameters
    warm-start-batch-size-huge | --warm-start-batch-size 1000000
    | warm_start_batch_size must be at most 65,536 sequences a step, got 1,000,000$
    max-completion-length-huge | --max-completion-length 10000000
    | max_completion_length must be at most 131,072 tokens, got 10,000,000$
    eval-samples-a-billion | --eval-samples 1000000000
    | eval_samples × the evaluation's problems must be at most 1,000,000 completions, got 1,000,000,000 × 1
    +  \(eval_problems 1 per topic and tier\) = 1,000,000,000$
    eval-problems-times-samples | --eval-problems 100000 --eval-samples 16
    | eval_samples × the evaluation's problems must be at most 1,000,000 completions
"""

CASES = [
    # ---- item 1: a resume that fails leaves the run as it was, and the run stays a run
    CliCase(
        "resume-metrics-step-a-string",
        RESUME,
        T + r"'run/metrics\.jsonl' holds a record whose step is '7', not a number$",
        setup=interrupted(**{"metrics.jsonl": '{"step": "7", "reward": 0.5}\n'}),
    ),
    CliCase(
        "resume-metrics-step-nan",
        RESUME,
        T + r"'run/metrics\.jsonl' holds a record whose step is nan, not a number$",
        setup=interrupted(**{"metrics.jsonl": '{"step": NaN}\n{"step": 1}\n'}),
    ),
    CliCase(
        "plain-run-over-a-starting-run-with-a-checkpoint",
        ["train", *TINY, "--output-dir", "run"],
        T + r"output_dir 'run' already holds a run \(starting, step 0; checkpoint-2 saved\); "
        r"pass --resume to continue it or --overwrite to replace it$",
        setup=with_checkpoint(our_run("starting", 0)),
    ),
    CliCase(
        "plain-run-over-a-failed-run-with-a-checkpoint",
        ["train", *TINY, "--output-dir", "run"],
        T + r"output_dir 'run' already holds a run \(failed, step 0; checkpoint-2 saved\)",
        setup=with_checkpoint(our_run("failed", 0)),
    ),
    # ---- items 5 and 7: the checkpoint's generation state, checked before anything loads
    # fmt: skip
    CliCase(
        "resume-state-before-batch-a-list",
        RESUME,
        CHECKPOINT
        + r"ebpo_generation_state\.json: estimator_state_before_batch must be an object or "
        r"null, got list$",
        setup=with_checkpoint(interrupted(), estimator_state_before_batch=[1]),
    ),
    CliCase(
        "resume-estimator-state-nested-5000-deep",
        RESUME,
        CHECKPOINT + r"ebpo_estimator_state\.json is not readable JSON \(nested too deeply",
        setup=with_checkpoint(interrupted(), estimator=DEEP_JSON),
    ),
    # ---- item 5: documents nested thousands deep (RecursionError once)
    CliCase(
        "run-json-nested-5000-deep",
        RESUME,
        T + r"'run/run\.json' is not a readable run manifest \(nested too deeply \(more than 100 "
        r"levels of lists and mappings\)\); remove it or choose another output_dir$",
        setup=files({"run/run.json": DEEP_JSON}),
    ),
    CliCase(
        "run-json-repeated-key",
        ["train", *TINY, "--output-dir", "run", "--overwrite"],
        T + r"'run/run\.json' is not a readable run manifest \(key 'status' appears twice",
        setup=files({"run/run.json": '{"format": "ebpo-run", "status": "a", "status": "b"}'}),
    ),
    CliCase(
        "estimator-options-nested-5000-deep",
        ["train", *TINY, "--estimator-options", DEEP_JSON],
        T + r"argument --estimator-options: expected a JSON object .*\(nested too deeply",
    ),
    CliCase(
        "extra-nested-5000-deep",
        ["train", *TINY, "--extra", DEEP_JSON],
        T + r"argument --extra: expected a JSON object .*\(nested too deeply",
    ),
    CliCase(
        "config-nested-5000-deep",
        ["train", "--config", "job.yaml"],
        T + r"--config 'job\.yaml': nested too deeply \(more than 100 levels",
        setup=files({"job.yaml": "extra: {a: " + "[" * 5000 + "]" * 5000 + "}\n"}),
    ),
    # ---- item 5: overflow, typos and sizes
    CliCase(
        "config-extra-typo-key",
        ["train", *TINY, "--config", "job.yaml"],
        T + r"extra: unknown key 'lerning_rate'; .*\(did you mean 'learning_rate'\?\)$",
        setup=files({"job.yaml": "extra: {lerning_rate: 0.1}\n"}),
    ),
    # ---- item 6: unbounded work
    CliCase(
        "config-alias-bomb-under-extra",
        ["train", *TINY, "--config", "job.yaml"],
        T + r"--config 'job\.yaml': it holds more than 1,000,000 values once its aliases are "
        r"expanded \(an alias bomb\?\)$",
        setup=files(
            {
                "job.yaml": "extra:\n"
                + "".join(
                    [f"  l0: &l0 [{', '.join(['x'] * 10)}]\n"]
                    + [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9)]
                )
            }
        ),
    ),
    # ---- item 7: silent surprises
    CliCase(
        "config-given-twice",
        ["train", "--config", "a.yaml", "--config", "b.yaml"],
        T + r"argument --config: given twice \('a\.yaml' and 'b\.yaml'\); give one file",
        setup=files({"a.yaml": "seed: 1\n", "b.yaml": "seed: 2\n"}),
    ),
]

CASES += [
    CliCase(
        id,
        RESUME,
        CHECKPOINT + r"ebpo_generation_state\.json " + CYCLE + match,
        setup=with_checkpoint(interrupted(), **json.loads(fields)),
    )
    for id, fields, match in table_rows(BAD_CYCLES, 3)
]
CASES += cli_table(["train", *TINY], T, TINY_TABLE)


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cli_user_error(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)
