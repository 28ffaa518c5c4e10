"""The ``ebpo train`` job (ebpo.lab.train.job): bad input fails before anything is loaded or deleted, a
tiny run writes everything and shows one progress bar, every method of a seed sees the same prompts,
an interrupted run resumes, the warm start is cached, and (``smollm`` marker) a real pretrained LM
trains."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.cli import main  # noqa: E402
from ebpo.integrations.trl.signal import PATIENCE  # noqa: E402
from ebpo.lab.cpu_task import policy  # noqa: E402
from ebpo.lab.runs.directory import RUN_ENTRIES, read_metrics, write_manifest  # noqa: E402
from ebpo.lab.train import data as job_data  # noqa: E402
from ebpo.lab.train import job  # noqa: E402
from ebpo.lab.train import trainer as job_trainer  # noqa: E402
from ebpo.lab.train.job import TrainJobConfig, run_train_job  # noqa: E402

pytestmark = pytest.mark.trl


def tiny(tmp_path: Path, **overrides) -> TrainJobConfig:
    """A run of a few seconds: a 1-layer width-32 model, 2 prompts x G=2 per step, 2 cells."""
    options = {
        "steps": 2,
        "group_size": 2,
        "prompts_per_step": 2,
        "topics": ("add",),
        "tiers": (1, 2),
        "eval_problems": 1,
        "eval_samples": 8,
        "eval_every": 1,
        "save_every": 1,
        "warm_start_steps": 3,
        "warm_start_batch_size": 8,
        "tiny_layers": 1,
        "tiny_hidden_size": 32,
        "output_dir": str(tmp_path / "run"),
        "cache_dir": str(tmp_path / "cache"),
        "progress": False,
    }
    return TrainJobConfig(**{**options, **overrides})


@pytest.fixture
def no_compute(monkeypatch):
    """Fail the test if the job gets as far as building a model."""

    def forbidden(*args, **kwargs):
        raise AssertionError("compute started before the bad input was rejected")

    monkeypatch.setattr(policy, "load_policy", forbidden)


# ------------------------------------------------------------------ bad input, before any compute
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"estimator": "ppo"}, "estimator"),
        ({"group_size": 1}, "group_size"),
        ({"eval_samples": 4}, "eval_samples"),
        ({"order": "random"}, "order"),
        ({"model": "/nonexistent/model-dir"}, "does not exist"),
        ({"model": "missing.gguf"}, "does not exist"),
        ({"dataset": "/nonexistent/problems.jsonl"}, "does not exist"),
        ({"topics": ("div",)}, "topics"),
        ({"tiers": (0,)}, "tiers"),
        ({"reward": "exact"}, "reward"),
        ({"learning_rate": float("inf")}, "learning_rate"),
        ({"warm_start_corrupt": 1.5}, "warm_start_corrupt"),
        ({"eval_validation": True, "dataset": "math-500"}, "eval_validation"),
    ],
)
def test_bad_options_raise_before_compute(tmp_path, no_compute, overrides, match):
    with pytest.raises(ValueError, match=match):
        run_train_job(tiny(tmp_path, **overrides))
    assert not (tmp_path / "run").exists()


def test_dataset_without_needed_columns_is_refused(tmp_path, no_compute):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "1+1", "solution": "2"}) + "\n")
    with pytest.raises(ValueError, match="prompt"):
        run_train_job(tiny(tmp_path, dataset=str(path)))


def test_directory_with_another_run_is_refused(tmp_path, no_compute):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_manifest(run_dir, tiny(tmp_path, seed=7).identity(), "completed", 2)
    with pytest.raises(ValueError, match="already holds a run"):
        run_train_job(tiny(tmp_path))
    with pytest.raises(ValueError, match="different run"):
        run_train_job(tiny(tmp_path, resume=True))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds no ebpo run"):
        run_train_job(tiny(tmp_path, output_dir=str(tmp_path / "other"), overwrite=True))
    assert (tmp_path / "other" / "notes.txt").exists()  # never deleted
    with pytest.raises(ValueError, match="nothing to resume"):
        run_train_job(tiny(tmp_path, output_dir=str(tmp_path / "empty"), resume=True))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="output_dir .* is a file"):
        run_train_job(tiny(tmp_path, output_dir=str(tmp_path / "afile")))


def test_overwrite_with_a_model_that_fails_to_load_keeps_the_old_run(tmp_path, monkeypatch):
    """Issue #11 item 3: the old run is deleted only once the model has loaded."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_manifest(run_dir, tiny(tmp_path, seed=7).identity(), "completed", 2)
    (run_dir / "results.json").write_text("{}")

    def unreachable(*args, **kwargs):
        raise ValueError("could not load model 'bad/id' from the Hugging Face Hub (OSError)")

    monkeypatch.setattr(policy, "load_policy", unreachable)
    with pytest.raises(ValueError, match="bad/id"):
        run_train_job(tiny(tmp_path, overwrite=True))
    assert (run_dir / "results.json").exists()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"


def test_a_run_that_failed_at_its_start_does_not_block_the_next(tmp_path, monkeypatch):
    """Issue #11 item 3: a failed start leaves no run that needs --overwrite."""
    config = tiny(tmp_path, steps=1, eval_every=0)

    def broken_eval(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(job, "_evaluator", lambda *a: broken_eval)
    with pytest.raises(RuntimeError):
        run_train_job(config)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "starting"
    monkeypatch.undo()
    assert run_train_job(config)["status"] == "completed"  # no --overwrite needed


def test_cli_reports_bad_input_as_an_error(tmp_path, capsys, no_compute):
    assert main(["train", "--group-size", "1", "--output-dir", str(tmp_path / "run")]) == 2
    assert "group_size must be an integer >= 2" in capsys.readouterr().err
    assert main(["train", "--tiers", "0", "--output-dir", str(tmp_path / "run")]) == 2
    assert "tiers must be distinct digit counts" in capsys.readouterr().err


def test_an_external_dataset_smaller_than_a_step_is_refused_before_compute(tmp_path, no_compute):
    """Issue #21 item 12: a step needs prompts_per_step distinct training prompts."""
    path = tmp_path / "small.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(6))
    )
    with pytest.raises(
        ValueError, match=r"prompts_per_step \(64\) exceeds the 5 training prompts of dataset"
    ):
        run_train_job(tiny(tmp_path, dataset=str(path), prompts_per_step=64, eval_problems=1))
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ replacing a run (issue #21 item 1)
def test_overwrite_through_a_symlink_keeps_the_users_files(tmp_path):
    """--overwrite replaces only what the old run created: the user's notes in the run directory
    stay, and an output_dir that is a symbolic link is followed (the link stays a link)."""
    target = tmp_path / "disk" / "run"
    target.mkdir(parents=True)
    write_manifest(target, tiny(tmp_path, seed=7).identity(), "completed", 2)
    (target / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (target / "checkpoints" / "checkpoint-2" / "old.bin").write_text("old")
    (target / "results.json").write_text('{"old": true}')
    (target / "notes.md").write_text("my notes")
    link = tmp_path / "link"
    link.symlink_to(target)
    result = run_train_job(
        tiny(tmp_path, output_dir=str(link), overwrite=True, steps=1, eval_every=0, save_every=0)
    )
    assert result["status"] == "completed" and link.is_symlink()
    assert (target / "notes.md").read_text() == "my notes"
    assert not (target / "checkpoints" / "checkpoint-2" / "old.bin").exists()
    assert json.loads((target / "results.json").read_text())["status"] == "completed"
    manifest = json.loads((target / "run.json").read_text())
    assert manifest["config"]["seed"] == 0 and manifest["created"] == manifest["created"]


# ------------------------------------------------------------------ divergence (issue #21 item 11)
def test_training_that_diverges_stops_in_one_line(tmp_path, monkeypatch):
    """NaN weights during RL: a ValueError naming the step and learning_rate (the CLI's one line),
    the run marked failed, no checkpoint of NaN weights."""

    class Poisoned(job_trainer.EBPOTrainer):
        def training_step(self, model, *args, **kwargs):
            loss = super().training_step(model, *args, **kwargs)
            if self.state.global_step >= 1:  # during step 2
                for parameter in model.parameters():
                    parameter.data.fill_(float("nan"))
            return loss

    monkeypatch.setattr(job_trainer, "EBPOTrainer", Poisoned)  # where the job builds it
    with pytest.raises(
        ValueError, match=r"training diverged at step \d.*lower learning_rate \(now 0\.0003\)"
    ):
        run_train_job(tiny(tmp_path, steps=4, eval_every=0, save_every=1))
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["status"] == "failed"
    assert not (tmp_path / "run" / "final_model").exists()
    saved = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("checkpoint-*"))
    assert saved == ["checkpoint-1"]  # the last finite one


# ------------------------------------------------------------------ the prompt stream
def test_every_method_of_a_seed_trains_on_the_same_prompt_stream(tmp_path, monkeypatch):
    """The paired design of ebpo bench: step k of any method sees the same prompts."""
    seen: dict[str, list[list[str]]] = {}
    real = job_data.trl_reward

    def recording(score, name):
        inner = real(score)

        def reward(prompts, completions, answer, **kwargs):
            seen.setdefault(name, []).append(sorted(set(prompts)))
            return inner(prompts, completions, answer, **kwargs)

        return reward

    for name, estimator in (("grpo", "grpo"), ("ebpo", "ebpo")):
        monkeypatch.setattr(job_data, "trl_reward", lambda score, name=name: recording(score, name))
        run_train_job(
            tiny(
                tmp_path,
                estimator=estimator,
                steps=3,
                eval_every=0,
                save_every=0,
                output_dir=str(tmp_path / name),
            )
        )
    assert seen["grpo"] == seen["ebpo"] and len(seen["grpo"]) == 3
    expected = [r["prompt"] for r in job_data.load_job_data(tiny(tmp_path, steps=3)).rl_rows]
    # step k: prompts 2k, 2k+1
    assert seen["grpo"] == [sorted(set(expected[2 * k : 2 * k + 2])) for k in range(3)]


# ------------------------------------------------------------------ a whole run
@pytest.mark.slow  # two runs, ~20 s on the shared CPU
def test_tiny_run_writes_everything_and_caches_the_warm_start(tmp_path, capsys):
    config = replace(tiny(tmp_path), progress=True, eval_validation=True)
    assert job.warm_start_pending(config)
    result = run_train_job(config)
    assert not job.warm_start_pending(config)  # the check looks where warm_start() caches
    run_dir = Path(result["run_dir"])
    assert result["status"] == "completed" and result["global_step"] == 2
    assert result["warm_start_cached"] is False
    for phase in ("before", "after", "validation"):
        summary = result[phase]
        assert set(summary["cells"]) == {"add/1", "add/2"} and set(summary["tiers"]) == {"1", "2"}
        assert 0.0 <= summary["overall"] <= 1.0
    records = read_metrics(result["metrics_path"])
    train_records = [r for r in records if "reward" in r]
    assert [r["step"] for r in train_records] == [1, 2]
    assert all(
        "grad_norm" in r and "entropy" in r and "ebpo/shrinkage_mean" in r for r in train_records
    )
    assert any("heldout/pass@1" in r for r in records)
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    for name in ("reward", "heldout_pass1", "entropy", "grad_norm", "shrinkage"):
        assert (run_dir / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert (run_dir / "final_model" / "config.json").is_file()
    assert json.loads((run_dir / "estimator_state.json").read_text())["estimator"] == "ebpo"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    before = json.loads((run_dir / "eval_before.json").read_text())
    assert len(before["problems"]) == 2  # one per cell
    # the console: one progress bar and the tables, not TRL's metrics dict per step
    console = capsys.readouterr()
    text = console.out + console.err
    assert "'grad_norm':" not in text and "{'loss'" not in text
    assert "held-out Pass@1 (%)" in console.out and "RL:" in console.err

    # same warm-start recipe, new run directory: the warm start comes from the cache
    second = run_train_job(
        replace(config, output_dir=str(tmp_path / "run2"), steps=1, eval_every=0, progress=False)
    )
    assert second["warm_start_cached"] is True
    assert second["before"] == result["before"]  # same starting model, same eval seed
    with pytest.raises(ValueError, match="already holds a run"):
        run_train_job(config)


def test_interrupt_leaves_a_checkpoint_that_resume_continues(tmp_path, monkeypatch):
    real_reward = job_data.trl_reward

    def reward_that_sends_sigterm(score):
        inner = real_reward(score)
        calls = []

        def reward(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:  # during step 2, as `kill -TERM` would
                os.kill(os.getpid(), signal.SIGTERM)
            return inner(*args, **kwargs)

        return reward

    monkeypatch.setattr(job_data, "trl_reward", reward_that_sends_sigterm)
    config = tiny(tmp_path, steps=3, eval_every=0, save_every=0)
    result = run_train_job(config)
    run_dir = Path(result["run_dir"])
    assert result["status"] == "interrupted" and result["global_step"] == 2
    assert (run_dir / "checkpoints" / "checkpoint-2").is_dir()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"

    monkeypatch.setattr(job_data, "trl_reward", real_reward)
    resumed = run_train_job(replace(config, resume=True))
    assert resumed["status"] == "completed" and resumed["global_step"] == 3
    records = read_metrics(resumed["metrics_path"])
    steps = [r["step"] for r in records if "reward" in r]
    assert steps == [1, 2, 3]  # nothing lost, nothing logged twice
    # one end-of-training summary, the finished run's (issue #21 item 12)
    assert [r["step"] for r in records if "train_runtime" in r] == [3]
    assert resumed["before"] == result["before"]  # the before-eval is not redone
    again = run_train_job(replace(config, resume=True))
    assert again["status"] == "completed"  # nothing left to do


def test_a_run_whose_rewards_are_all_0_says_it_trains_nothing(tmp_path, monkeypatch, capsys):
    real_reward = job_data.trl_reward
    monkeypatch.setattr(job_data, "trl_reward", lambda score: real_reward(lambda text, answer: 0.0))
    config = replace(tiny(tmp_path, steps=PATIENCE + 1, eval_every=0, save_every=0), progress=True)
    result = run_train_job(config)
    notice = result["no_signal"]
    assert notice and "every completion scored 0" in notice and "\n" not in notice
    assert json.loads((Path(result["run_dir"]) / "results.json").read_text())["no_signal"] == notice
    # said at the end of the console output, under the before / after table
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == f"note: {notice}" and out[-1].startswith("run directory:")


def test_a_curriculum_and_a_preset_without_prior_run(tmp_path):
    result = run_train_job(
        tiny(tmp_path, estimator="dr_grpo", steps=1, eval_every=0, order="difficulty")
    )
    assert result["status"] == "completed"
    # the run creates what its manifest claims, and nothing else (no lock file left behind)
    assert {p.name for p in Path(result["run_dir"]).iterdir()} <= set(RUN_ENTRIES)
    assert (
        json.loads((Path(result["run_dir"]) / "estimator_state.json").read_text())["estimator"]
        == "dr_grpo"
    )
    assert (Path(result["run_dir"]) / "plots" / "shrinkage.png").is_file()


# ------------------------------------------------------------------ a real pretrained LM
@pytest.mark.slow
@pytest.mark.smollm
def test_smollm2_few_rl_steps_on_word_problems(tmp_path):
    """The real SmolLM2-135M-Instruct, 2 RL steps of one arithmetic word problem × 4 completions,
    scored by the math reward (:func:`ebpo.rewards.score_math`): loss and gradient non-zero. The
    word prompt shows a worked example ending in ``Answer: 7`` (``ebpo.lab.cpu_task.task.WORD_EXAMPLE``), so
    the model writes the ``Answer:`` line; at temperature 0.7 a good share of its one-digit sums
    score 1. Sized for CI (~85 s on one thread; py-spy: about a third transformers reading the GGUF
    file, the rest the two steps' forward and backward passes over the 116-token prompt and the
    two evaluations): one prompt a step, 32 completion tokens, 8 evaluation samples."""
    pytest.importorskip("gguf")
    from ebpo.evaluation.models import smollm2_gguf_path

    try:  # the package's own __init__ imports an unrelated CLI (`llm`): look for the file only
        smollm2_gguf_path()
    except ValueError as error:
        pytest.skip(str(error))
    config = TrainJobConfig(
        model="smollm2-135m",
        dataset="arithmetic-word",
        topics=("add",),
        tiers=(1,),
        reward="math",
        temperature=0.7,
        steps=2,
        group_size=4,
        prompts_per_step=1,
        max_completion_length=32,
        eval_problems=1,
        eval_samples=8,  # the least Pass@1 takes: the two evaluations are ~a fifth of the time
        eval_every=0,
        save_every=0,
        learning_rate=1e-5,
        beta=0.0,  # no reference model: halves the memory and the forward passes
        output_dir=str(tmp_path / "smollm"),
        cache_dir=str(tmp_path / "cache"),
        progress=False,
    )
    result = run_train_job(config)
    assert result["status"] == "completed" and result["global_step"] == 2
    records = [r for r in read_metrics(result["metrics_path"]) if "grad_norm" in r]
    assert len(records) == 2
    assert any(r["grad_norm"] > 0 for r in records)
    assert any(r["loss"] != 0 for r in records)
    assert any(r["reward"] > 0 for r in records)  # some completions are right, by the math reward
