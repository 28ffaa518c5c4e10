"""Simulated save and resume: the estimator state goes into global_step_N/ and comes back exactly."""

from __future__ import annotations

import json
import os

import pytest
import torch
from omegaconf import OmegaConf
from tests.integrations.verl.conftest import verl_batch

from ebpo.integrations.verl.resume import resume_folder
from ebpo.integrations.verl.state import METRICS_FILENAME, STATE_FILENAME, STORE

pytestmark = pytest.mark.verl

CALLBACK = "ebpo.integrations.verl.checkpoint.EBPOCheckpointCallback"
GROUPS = [4, 3, 4, 1, 4, 4, 2]


def _config(
    run_dir,
    resume_mode="auto",
    resume_from_path=None,
    estimator="ebpo",
    algorithm=None,
    **ebpo_options,
):
    """A verl config; ``algorithm`` adds keys beside ``algorithm.ebpo`` (e.g. ``js_smooth_coef``)."""
    return OmegaConf.create(
        {
            "trainer": {
                "checkpoint_callback_class": CALLBACK,
                "default_local_dir": str(run_dir),
                "resume_mode": resume_mode,
                "resume_from_path": resume_from_path,
            },
            "algorithm": {"adv_estimator": estimator, "ebpo": ebpo_options, **(algorithm or {})},
        }
    )


def _step(config, step):
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data, *_ = verl_batch(GROUPS, seed=100 + step, step=step)
    name = config.algorithm.adv_estimator
    return (
        compute_advantage(data, adv_estimator=name, config=config.algorithm)
        .batch["advantages"]
        .clone()
    )


def _save(callback, run_dir, step):
    """What verl's _save_checkpoint does around the callback: folder, tracker file, on_save."""
    folder = os.path.join(run_dir, f"global_step_{step}")
    os.makedirs(os.path.join(folder, "actor"), exist_ok=True)
    with open(os.path.join(run_dir, "latest_checkpointed_iteration.txt"), "w") as handle:
        handle.write(str(step))
    callback.on_save(trainer=None, global_step=step, checkpoint_dir=folder, async_save=False)
    return folder


#: stateful configurations: EBPO's running prior; JSPO++'s smoothing of λ and the mean, asked for
#: with our option or with the JSPO authors' key (0.999: the EMA remembers within a few steps)
STATEFUL = {
    "ebpo": {},
    "ebpo-ema-within": {"prior": "ema", "half_life": 3.0, "within_variance": "within"},
    "jspo_plus_plus": {"estimator": "jspo_plus_plus", "smooth_coef": 0.999},
    "jspo_plus_plus-js_smooth_coef": {
        "estimator": "jspo_plus_plus",
        "algorithm": {"js_smooth_coef": 0.999},
    },
}


@pytest.mark.parametrize("stateful", sorted(STATEFUL))
def test_save_and_auto_resume_restore_state_exactly(tmp_path, stateful):
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    options = STATEFUL[stateful]
    # Reference: one uninterrupted run of 5 steps.
    reference_dir = tmp_path / "reference"
    config = _config(reference_dir, **options)
    build_checkpoint_callback(config)
    uninterrupted = [_step(config, s) for s in range(5)]
    final_state = STORE.state_dict()
    STORE.clear()

    # Interrupted run: 3 steps, checkpoint, "new process", resume (auto), 2 more steps.
    run_dir = tmp_path / "run"
    config = _config(run_dir, **options)
    callback = build_checkpoint_callback(config)
    assert type(callback).__name__ == "EBPOCheckpointCallback"
    for s in range(3):
        assert torch.equal(_step(config, s), uninterrupted[s])
    folder = _save(callback, str(run_dir), 3)
    with open(os.path.join(folder, STATE_FILENAME)) as handle:
        saved = json.load(handle)
    assert saved["estimators"][0]["state"]["steps"] == 3
    assert saved["estimators"][0]["name"] == config.algorithm.adv_estimator
    state_at_save = STORE.state_dict()

    STORE.clear()  # the resumed job starts in a fresh TaskRunner process
    build_checkpoint_callback(config)  # verl builds the callback before loading its checkpoint
    assert STORE.restored_from == folder and len(STORE) == 1
    assert STORE.state_dict() == state_at_save  # through the JSON file, bit for bit
    resumed = [_step(config, s) for s in range(3, 5)]
    for got, want in zip(resumed, uninterrupted[3:], strict=True):
        assert torch.equal(got, want)
    assert STORE.state_dict() == final_state

    # The callback also pointed the metrics JSONL at the run directory: one line per step.
    lines = (run_dir / METRICS_FILENAME).read_text().splitlines()
    assert [json.loads(line)["estimator_step"] for line in lines] == [1, 2, 3, 4, 5]


def test_resume_path_and_disable(tmp_path):
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    config = _config(tmp_path)
    callback = build_checkpoint_callback(config)
    _step(config, 0)
    first = _save(callback, str(tmp_path), 1)
    _step(config, 1)
    _save(callback, str(tmp_path), 2)

    STORE.clear()
    build_checkpoint_callback(_config(tmp_path, resume_mode="resume_path", resume_from_path=first))
    assert (
        STORE.state_dict()["estimators"][0]["state"]["steps"] == 1
    )  # the folder asked for, not the latest

    STORE.clear()
    build_checkpoint_callback(_config(tmp_path, resume_mode="disable"))
    assert len(STORE) == 0 and STORE.restored_from is None

    STORE.clear()
    build_checkpoint_callback(_config(tmp_path))  # auto: the latest (step 2)
    assert STORE.state_dict()["estimators"][0]["state"]["steps"] == 2


def test_resume_folder_rules(tmp_path):
    trainer = OmegaConf.create({"default_local_dir": str(tmp_path), "resume_mode": "auto"})
    assert resume_folder(trainer) is None  # nothing saved yet: training from scratch
    os.makedirs(tmp_path / "global_step_7")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7")
    assert resume_folder(trainer) == str(tmp_path / "global_step_7")
    with pytest.raises(ValueError, match="resume_from_path"):
        resume_folder(
            OmegaConf.create({"resume_mode": "resume_path", "resume_from_path": "/x/step3"})
        )
    with pytest.raises(ValueError, match="resume_mode"):
        resume_folder(OmegaConf.create({"resume_mode": "sometimes"}))


def test_changed_options_start_from_empty_state(tmp_path, caplog):
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    config = _config(tmp_path)
    callback = build_checkpoint_callback(config)
    _step(config, 0)
    _save(callback, str(tmp_path), 1)
    STORE.clear()
    changed = _config(tmp_path, prior="ema")
    build_checkpoint_callback(changed)
    _step(changed, 1)
    entry = [e for e in STORE.state_dict()["estimators"] if e["options"].get("prior") == "ema"][0]
    assert entry["state"]["steps"] == 1  # started empty: only the step after the resume
    assert (
        len(STORE) == 2
    )  # the restored (unused) default-options estimator is kept for the next save
    assert "does not match the current options" in caplog.text


def test_corrupt_state_file_is_a_clear_error(tmp_path):
    folder = tmp_path / "global_step_1"
    folder.mkdir()
    (folder / STATE_FILENAME).write_text(json.dumps({"format": 99}))
    with pytest.raises(ValueError, match="cannot restore EBPO estimator state"):
        STORE.load(folder)
