"""Hostile inputs to ``ebpo verl`` (issues #10 item 10 and #11 item 9): typos and bad options end in
one line and exit code 2 — before anything is launched, downloaded or written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hostile.harness import CliCase, check_cli_error, cli_table, ids

pytest.importorskip("verl")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"
TRAIN = str(FIXTURES / "dapo-math-17k.parquet")
NO_HUB = {
    "HF_ENDPOINT": "http://127.0.0.1:9",
    "EBPO_DATA_DIR": "",
}  # a closed local port: offline, fast


def _file(name: str, text: str = "x"):
    def setup(tmp: Path) -> None:
        (tmp / name).write_text(text)

    return setup


def _train_ids() -> list[str]:
    from ebpo.data import load_dataset  # the loader prepare-data reads the file with

    return [str(row["id"]) for row in load_dataset("dapo-math-17k", data_files=TRAIN)]


def _labels(records: Callable[[list[str]], list[dict]]) -> Callable[[Path], None]:
    """A labels file built from the fixture's training ids when the case runs."""

    def setup(tmp: Path) -> None:
        lines = [json.dumps(r) for r in records(_train_ids())]
        (tmp / "labels.jsonl").write_text("\n".join(lines) + "\n")

    return setup


#: prepare-data with a labels file, offline: the fixture as training set, no evaluation sets
PREPARE_WITH_LABELS = ["verl", "prepare-data", f"--train-file={TRAIN}", "--labels", "labels.jsonl"]
PREPARE_WITH_LABELS += ["--out-dir", "{tmp}/data", "--eval"]


#: ``ebpo verl ARGUMENTS``: one stderr line matching the message (a line starting "| " holds the
#: message of a long row, "+ " continues it)
VERL_TABLE = r"""
    ebpo-key-typo | +algorithm.ebpo.prir=ema
    | ^ebpo verl run: error: unknown key\(s\) 'prir' under algorithm\.ebpo .*did you mean 'prior'\?.*valid keys:
    +  .*half_life
    ebpo-key-typo-dry-run | --dry-run +algorithm.ebpo.prir=ema
    | ^ebpo verl run: error: unknown key\(s\) 'prir' under algorithm\.ebpo .*did you mean 'prior'\?.*valid keys:
    +  .*half_life
    ebpo-key-typo-recipe | recipe ebpo_topic +algorithm.ebpo.half_lif=20
    | ^ebpo verl recipe: error: unknown key\(s\) 'half_lif' .*did you mean 'half_life'\?
    ebpo-bb-foreign-key | algorithm.adv_estimator=ebpo_bb +algorithm.ebpo.within_variance=pooled
    | unknown key\(s\) 'within_variance' under algorithm\.ebpo for adv_estimator='ebpo_bb'
    jspo-key | algorithm.adv_estimator=jspo +algorithm.ebpo.prior=batch
    | unknown key\(s\) 'prior' under algorithm\.ebpo for adv_estimator='jspo'
    ebpo-bad-value | recipe ebpo +algorithm.ebpo.prior=forever
    | ^ebpo verl recipe: error: invalid algorithm\.ebpo option .*prior must be one of \['history', 'batch',
    +  'ema'\], got 'forever'
    ebpo-key-typo-with-grpo-dry-run | recipe grpo --dry-run +algorithm.ebpo.prir=ema
    | ^ebpo verl recipe: error: algorithm\.ebpo\.prir is read only by ebpo's estimators \(.*ebpo, .*\), not by
    +  adv_estimator='grpo', which would ignore it: drop the algorithm\.ebpo override\(s\), or set
    +  algorithm\.adv_estimator to one of ebpo's estimators$
    ebpo-bad-value-with-grpo-dry-run | recipe dapo --dry-run +algorithm.ebpo.prior=forever
    | ^ebpo verl recipe: error: algorithm\.ebpo\.prior is read only by ebpo's estimators .*adv_estimator='grpo'
    ebpo-keys-with-gae-run | algorithm.adv_estimator=gae +algorithm.ebpo.prior=batch +algorithm.ebpo.x=1
    | ^ebpo verl run: error: algorithm\.ebpo\.prior, algorithm\.ebpo\.x are read only by ebpo's estimators
    +  .*adv_estimator='gae'
    dry-run-unknown-key | recipe ebpo --dry-run trainer.nonexistent=5
    | ^ebpo verl recipe: error: the overrides do not compose into verl's config: Could not override
    +  'trainer\.nonexistent'\. To append to your config use \+trainer\.nonexistent=5$
    dry-run-run-unknown-key | --dry-run trainer.nonexistent=5
    | ^ebpo verl run: error: the overrides do not compose into verl's config: Could not override
    dry-run-missing-config-group | recipe ebpo --dry-run algorithm=nonexistent
    | ^ebpo verl recipe: error: the overrides do not compose .*Could not override 'algorithm'
    dry-run-bad-interpolation | recipe ebpo --dry-run 'trainer.total_epochs=${oops}'
    | ^ebpo verl recipe: error: .*Interpolation key 'oops' not found
    dry-run-batch-size-not-a-number | recipe ebpo --dry-run data.train_batch_size=abc
    | ^ebpo verl recipe: error: data\.train_batch_size must be a positive integer, got 'abc'$
    dry-run-batch-size-negative | recipe ebpo --dry-run data.train_batch_size=-1
    | data\.train_batch_size must be a positive integer, got -1$
    dry-run-callback-not-importable | recipe ebpo --dry-run trainer.checkpoint_callback_class=nope.Nope
    | ^ebpo verl recipe: error: trainer\.checkpoint_callback_class='nope\.Nope' cannot be loaded: .*No module named
    +  'nope'
    dry-run-reward-not-importable | recipe ebpo --dry-run reward.custom_reward_function.path=pkg://nope_module
    | ^ebpo verl recipe: error: reward\.custom_reward_function='pkg://nope_module' cannot be loaded
    prepare-out-dir-below-dev-null | prepare-data --out-dir /dev/null/data
    | --out-dir '/dev/null/data' lies below '/dev/null', which is not a directory
    prepare-train-file-missing | prepare-data --train-file missing.parquet
    | --train-file 'missing.parquet' is not a file
    prepare-eval-file-missing | prepare-data --eval-file aime-2024=nothere.jsonl
    | --eval-file aime-2024= 'nothere.jsonl' is not a file
    doctor-address-without-value | doctor --address
    | ^ebpo verl doctor: error: argument --address: expected one argument
    kl-in-reward-with-ebpo-bb | algorithm.adv_estimator=ebpo_bb algorithm.use_kl_in_reward=True
    | ^ebpo verl run: error: algorithm\.use_kl_in_reward=True puts verl's KL penalty into the rewards that
    +  adv_estimator=ebpo_bb reads
    half-life-with-sub-batches | +algorithm.ebpo.prior=ema +trainer.v1.sync.parameter_sync_step=2
    | ^ebpo verl run: error: ebpo \(prior=ema, half_life=50\.0\) forgets per estimator call
    async-trainer-mode | trainer.v1.trainer_mode=separate_async
    | ^ebpo verl run: error: adv_estimator=ebpo has not run under trainer\.v1\.trainer_mode=separate_async \(verl
    +  0\.9\.1: PPOTrainerSeparateAsync asserts
    on-missing-state-typo | +algorithm.ebpo.on_missing_state=ignore
    | ^ebpo verl run: error: algorithm\.ebpo\.on_missing_state must be one of error, start_empty
    subcommand-typo | docter | ^ebpo verl: error: unknown subcommand 'docter'; did you mean 'doctor'\?
    subcommand-typo-recipe | recipes ebpo | ^ebpo verl: error: unknown subcommand 'recipes'; did you mean 'recipe'\?
    subcommand-unknown-word | train | ^ebpo verl: error: unknown subcommand 'train' \(expected one of
    run-word-not-override | run docter | ^ebpo verl run: error: 'docter' is not a Hydra override
    run-unknown-flag | run --frobnicate | ^ebpo verl run: error: unknown option\(s\) \['--frobnicate'\]
    ebpo-bad-number | +algorithm.ebpo.prior=ema +algorithm.ebpo.half_life=-3 | half_life must be a positive
    ebpo-section-not-mapping | +algorithm.ebpo=5 | algorithm\.ebpo must be a mapping of options
    ebpo-per-cluster | +algorithm.ebpo.per_cluster=True | per_cluster=True is not supported in verl
    hydra-syntax | '+algorithm.ebpo.prior=[batch' | ^ebpo verl run: error: cannot parse the Hydra overrides
    recipe-unknown | recipe ebpo_topci | ^ebpo verl recipe: error: unknown recipe 'ebpo_topci'
    recipe-without-a-name | recipe | ^ebpo verl recipe: error: NAME: expected a recipe's name, one of ebpo,
    +  ebpo_topic, ebpo_diff, grpo, dr_grpo, dapo, entropy_mech \(ebpo verl recipe --list says what each runs\)$
    prepare-out-dir-empty | prepare-data --out-dir '' | --out-dir must be a non-empty path
    prepare-eval-file-syntax | prepare-data --eval-file gsm8k=x.jsonl | --eval-file must be NAME=PATH with NAME in
    prepare-eval-unknown | prepare-data --eval gsm8k | unknown evaluation set\(s\) \['gsm8k'\]
    prepare-num-topics-zero | prepare-data --num-topics 0 | --num-topics must be a positive integer, got 0
    prepare-limit-zero | prepare-data --limit 0 | --limit must be a positive integer, got 0
    prepare-template | prepare-data --template chatml | --template must be one of .*got 'chatml'
    smoke-typo | smoek | ^ebpo verl: error: unknown subcommand 'smoek'; did you mean 'smoke'\?
"""
#: ``ebpo verl smoke ARGUMENTS``: one stderr line matching SMOKE + the message
SMOKE = r"^ebpo verl smoke: error: "
SMOKE_TABLE = r"""
    smoke-steps-more-than-the-task-has | --steps 48
    | --steps 48 needs 192 distinct prompts \(one epoch of 48 steps × 4\); the arithmetic task has 191: at most
    +  --steps 47$
    smoke-recipe-on-the-legacy-trainer | --recipe grpo --trainer legacy
    | --recipe runs on verl's default trainer \(--trainer v1\) only: the legacy CPU trainer has no reference
    +  policy, which the recipes' KL loss needs$
    smoke-sub-steps-not-dividing-the-batch | --parameter-sync-step 3
    | --parameter-sync-step must divide the batch of 4 prompts; got 3$
    smoke-sub-steps-on-the-legacy-trainer | --parameter-sync-step 2 --trainer legacy
    | --parameter-sync-step runs verl's sub-steps, which only the v1 trainer has
    smoke-sub-steps-with-a-per-call-decay | --parameter-sync-step 2 --all
    | --parameter-sync-step 2 with jspo_plus_plus: jspo_plus_plus \(smooth_coef=0\.9\) forgets per estimator call
    smoke-two-output-on-the-legacy-trainer | --agent-loop two_output --trainer legacy
    | --agent-loop two_output runs on verl's default trainer \(--trainer v1\) only: the legacy trainer has no agent
    +  loop$
    smoke-two-output-with-a-recipe | --agent-loop two_output --recipe ebpo
    | --agent-loop two_output runs the estimators, not --recipe
    smoke-unknown-estimator | --estimator grpo | argument --estimator: invalid choice: 'grpo'
    smoke-all-and-estimator | --all --estimator ebpo | pass either --all or --estimator, not both
    smoke-unknown-flag | --epochs 9 | unrecognized arguments: --epochs 9
    smoke-steps-too-few | --steps 2 | --steps must be an integer >= 3, got 2$
    smoke-steps-not-a-number | --steps 4.5 | argument --steps: invalid int value: '4.5'
    smoke-unknown-recipe | --recipe ebpo_topci | argument --recipe: invalid choice: 'ebpo_topci'
    smoke-unknown-trainer | --trainer v2 | argument --trainer: invalid choice: 'v2'
    smoke-unknown-resume-mode | --resume-mode disable | argument --resume-mode: invalid choice: 'disable'
    smoke-sub-steps-zero | --parameter-sync-step 0 | --parameter-sync-step must be
    smoke-unknown-agent-loop | --agent-loop three_output | argument --agent-loop: invalid choice: 'three_output'
"""

CASES = [
    # -- subcommand typos never launch a run
    # -- algorithm.ebpo.* checked before launching (keys from the estimator's constructor)
    # -- algorithm.ebpo.* set for an estimator that never reads it (it passed the dry run silently)
    # -- issue #21 item 11: a dry run with a bad override is a user error (exit 2, one line), like
    #    the checks above; it exited 1 with "dry run FAILED" and Hydra's two-line message
    CliCase(
        "dry-run-verl-assertion",
        [
            "verl",
            "recipe",
            "ebpo",
            "--dry-run",
            "actor_rollout_ref.actor.use_dynamic_bsz=False",
            "trainer.n_gpus_per_node=7",
        ],
        r"^ebpo verl recipe: error: verl refuses the configuration: real_train_batch_size "
        r"\(2048\) must be divisible by minimal possible batch size \(28\)$",
    ),
    # -- prepare-data: offline, bad paths and bad options; nothing (not even data/) left behind
    CliCase(
        "prepare-offline",
        ["verl", "prepare-data", "--limit", "3"],
        r"^ebpo verl prepare-data: error: cannot load 'dapo-math-17k': "
        r"the Hugging Face Hub is not reachable.*--train-file",
        env=NO_HUB,
    ),
    CliCase(
        "prepare-offline-eval-after-train",
        ["verl", "prepare-data", f"--train-file={TRAIN}", "--eval", "aime-2024"],
        r"cannot load 'aime-2024': the Hugging Face Hub is not reachable.*--eval-file aime-2024=PATH",
        env=NO_HUB,
    ),
    CliCase(
        "prepare-out-dir-is-file",
        ["verl", "prepare-data", "--out-dir", "out.txt"],
        r"^ebpo verl prepare-data: error: --out-dir 'out.txt' is a file, expected a directory",
        setup=_file("out.txt"),
    ),
    CliCase(
        "smoke-work-dir-holds-the-users-files",
        ["verl", "smoke", "--work-dir", "{tmp}"],
        r"^ebpo verl smoke: error: --work-dir .* holds files that ebpo verl smoke did not write",
        setup=_file("notes.txt"),
    ),
    CliCase(
        "prepare-out-dir-below-file",
        ["verl", "prepare-data", "--out-dir", "out.txt/data"],
        r"--out-dir 'out.txt/data' lies below 'out.txt'",
        setup=_file("out.txt"),
    ),
    CliCase(
        "prepare-train-file-garbage",
        ["verl", "prepare-data", "--train-file", "train.parquet", "--eval"],
        r"^ebpo verl prepare-data: error: cannot read --train-file 'train.parquet'",
        setup=_file("train.parquet", "not parquet"),
    ),
    CliCase(
        "prepare-labels-not-json",
        ["verl", "prepare-data", "--labels", "labels.jsonl"],
        r"--labels labels\.jsonl: line 2 is not JSON",
        setup=_file("labels.jsonl", '{"id": "a", "topic": "x"}\n{oops\n'),
    ),
    CliCase(
        "prepare-labels-no-id",
        ["verl", "prepare-data", "--labels", "labels.jsonl"],
        r"--labels labels\.jsonl: line 1 is not a JSON object with an 'id'",
        setup=_file("labels.jsonl", "[1, 2]\n"),
    ),
    # -- --labels ids must label exactly the training rows: refused in one line with counts, before
    #    anything is written (they fell back to TF-IDF topics silently, the last record of an id won)
    CliCase(
        "prepare-labels-match-no-row",
        PREPARE_WITH_LABELS,
        r"^ebpo verl prepare-data: error: --labels labels\.jsonl: none of its 2 id\(s\) matches one "
        r"of the 3 training rows' ids \(e\.g\. 'p1' in the file, '9a9b6eb4-.*' in the data\); the "
        r"ids must be the training set's 'id' column$",
        setup=_labels(lambda ids: [{"id": "p1", "topic": "a"}, {"id": "p2", "topic": "b"}]),
    ),
    CliCase(
        "prepare-labels-some-rows-unlabelled",
        PREPARE_WITH_LABELS,
        r"^ebpo verl prepare-data: error: --labels labels\.jsonl: 2 of the 3 training rows have no "
        r"record \(first: 'b426d104-.*'\); give every training row a record$",
        setup=_labels(lambda ids: [{"id": ids[0], "topic": "a"}]),
    ),
    CliCase(
        "prepare-labels-ids-beyond-the-rows",
        PREPARE_WITH_LABELS,
        r"^ebpo verl prepare-data: error: --labels labels\.jsonl: 1 of its 4 id\(s\) match no "
        r"training row \(first: 'typo-id'\); remove them, or check",
        setup=_labels(lambda ids: [{"id": i, "topic": "a"} for i in [*ids, "typo-id"]]),
    ),
    CliCase(
        "prepare-labels-id-repeated-with-other-labels",
        PREPARE_WITH_LABELS,
        r"^ebpo verl prepare-data: error: --labels labels\.jsonl: 1 id\(s\) appear more than once "
        r"with different labels \(first: '9a9b6eb4-.*' on lines 1 and 4\); keep one record per id$",
        setup=_labels(
            lambda ids: [
                *({"id": i, "pass_rate": 0.5} for i in ids),
                {"id": ids[0], "pass_rate": 0.9},
                {"id": ids[1], "pass_rate": 0.5},  # the same record again: harmless, kept once
            ]
        ),
    ),
    # -- ebpo verl smoke: refused before Ray, verl or a model is touched
    CliCase(
        "smoke-work-dir-is-a-file",
        ["verl", "smoke", "--work-dir", "{tmp}/out.txt"],
        r"^ebpo verl smoke: error: --work-dir .*out.txt' is a file, expected a directory",
        setup=_file("out.txt"),
    ),
    # -- combinations the plug-in refuses (issue #27), before launching
]
CASES += cli_table(["verl"], "", VERL_TABLE) + cli_table(["verl", "smoke"], SMOKE, SMOKE_TABLE)


@pytest.fixture
def no_launch(monkeypatch):
    """A case that slipped through the checks must fail here, not start verl."""

    def launched(*args, **kwargs):
        raise AssertionError(f"verl was launched: {args}")

    monkeypatch.setattr(subprocess, "call", launched)


@pytest.mark.verl
@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cli_verl_user_error(case, tmp_path, monkeypatch, no_launch):
    check_cli_error(case, tmp_path, monkeypatch)


@pytest.mark.verl
@pytest.mark.parametrize(
    ("override", "code"), [("trainer.nonexistent=5", 2), ("+algorithm.ebpo.prior=ema", 0)]
)
def test_dry_run_in_a_fresh_process_prints_only_its_error(tmp_path, override, code):
    """A real ``ebpo`` process (verl imported afresh, so its import-time warnings fire): a bad
    override gives exit 2 and one stderr line; a good config exit 0 and an empty stderr — verl's
    warnings about this machine (no accelerator: expected on a dry run) and its Python warnings
    become notes on stdout."""
    env = {**os.environ, "EBPO_DEBUG": ""}
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from ebpo.cli import main; sys.exit(main())"]
        + ["verl", "recipe", "ebpo", "--dry-run", override],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == code, run.stderr
    lines = run.stderr.splitlines()
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("ebpo verl recipe: error: "), run.stderr
    else:
        assert lines == [], run.stderr
        assert "dry run OK: adv_estimator=ebpo" in run.stdout


@pytest.mark.verl
def test_a_verl_failure_on_a_config_nothing_refused_exits_1_in_one_line(
    tmp_path, monkeypatch, capsys
):
    """What stays exit code 1: verl itself failing (here: a RuntimeError inside its validation)
    on a configuration no check refused — not the user's error, reported in one line."""
    from ebpo.cli import main
    from ebpo.commands.verl import validation

    def broken(config):
        raise RuntimeError("CUDA driver exploded\nsecond line")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(validation, "validate", broken)
    assert main(["verl", "recipe", "ebpo", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err == "dry run FAILED: RuntimeError: CUDA driver exploded second line\n"


@pytest.mark.verl
def test_a_plugin_missing_where_verl_runs_exits_1_in_one_line(monkeypatch, capsys):
    """Not the user's command line but an install: exit 1, one stderr line naming the node, and
    nothing launched (the cluster version: tests/commands/verl/test_nodes.py)."""
    from ebpo.cli import main
    from ebpo.commands.verl import launcher

    def missing(args, env):
        raise launcher.PluginUnavailable(
            "ebpo's verl plug-in is not usable on node 10.0.0.7 (gpu-7, id 0123456789ab): ebpo "
            "NOT registered after `import verl`"
        )

    checked = []  # the dry run's checks pass here (they run first: tests/commands/verl/test_machine.py)
    monkeypatch.setattr(launcher, "check_launchable", checked.append)
    monkeypatch.setattr(launcher, "check_plugin_where_it_runs", missing)
    monkeypatch.setattr(launcher.subprocess, "call", lambda *a, **k: pytest.fail("launched"))
    assert main(["verl", "data.train_batch_size=8"]) == 1
    assert len(checked) == 1
    err = capsys.readouterr().err
    assert err.startswith("ebpo verl run: ebpo's verl plug-in is not usable on node 10.0.0.7")
    assert err.count("\n") == 1


@pytest.mark.verl
def test_a_smoke_failing_inside_verl_exits_1_in_one_line(tmp_path, monkeypatch, capsys):
    """A failure inside verl or Ray (a RayTaskError can be a ValueError too) is not the user's
    error: exit 1, one stderr line, the runs kept — never exit 2."""
    import ebpo.lab.verl_cpu.smoke as smoke
    from ebpo.cli import main

    def broken(settings, report):
        raise ValueError("Total available GPUs 0 is less than total desired GPUs 1\nsecond line")

    monkeypatch.setattr(smoke, "run_smoke", broken)
    assert main(["verl", "smoke", "--work-dir", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("verl CPU smoke FAILED: ValueError: Total available GPUs 0 is less")
    assert err.count("\n") == 1 and "second line" in err
