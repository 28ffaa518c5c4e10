"""ebpo restores the estimator state from the folder verl itself resumes from.

:func:`ebpo.integrations.verl.resume.resume_folder` is ebpo's copy of verl's lookup (it runs in the
launcher's dry run too, where verl's trainer is not built). Here both lookups get the same
checkpoint directories — tracker files naming a folder that is there or is missing, no tracker, no
directory, a tracker with a newline or garbage, relative paths against the working directory,
``resume_path`` and ``disable`` — and must give the same answer. verl's answer is the folder its
own ``_load_checkpoint`` hands to the actor worker group (the v1 ``PPOTrainer`` of ``main_ppo``'s
default path, and the legacy ``RayPPOTrainer``), read off a recording stand-in for the workers: a
change in verl's lookup fails here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

from omegaconf import OmegaConf  # noqa: E402

from ebpo.integrations.verl.resume import resume_folder  # noqa: E402

TRACKER = "latest_checkpointed_iteration.txt"


class _Recorder:
    """What ``_load_checkpoint`` touches on a trainer: the config, the actor worker group (which
    records the folder it is asked to load), no critic, a dataloader."""

    def __init__(self, trainer_config: dict[str, Any]) -> None:
        self.config = OmegaConf.create({"trainer": trainer_config})
        self.loaded: list[str] = []
        self.use_critic = False
        self.trainer_mode = "sync"
        self.global_steps = 0
        recorder = self

        class WorkerGroup:
            def load_checkpoint(self, local_path: str, del_local_after_load: bool = False) -> None:
                recorder.loaded.append(os.path.dirname(local_path))

        class Dataloader:
            def __len__(self) -> int:
                return 10

            def load_state_dict(self, state: Any) -> None:
                pass

        self.actor_rollout_wg = WorkerGroup()
        self.train_dataloader = Dataloader()


def _verls_folder(trainer_class: Any, trainer_config: dict[str, Any]) -> str | None:
    """The ``global_step_N`` folder verl's ``_load_checkpoint`` of ``trainer_class`` loads (None:
    it trains from scratch); an error of verl's is raised."""
    recorder = _Recorder(trainer_config)
    trainer_class._load_checkpoint(recorder)
    assert len(recorder.loaded) <= 1
    return recorder.loaded[0] if recorder.loaded else None


def _trainer_classes() -> list[Any]:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return [PPOTrainer, RayPPOTrainer]


def _trainer_config(mode: str, local_dir: str, resume_from: str | None = None) -> dict[str, Any]:
    return {
        "resume_mode": mode,
        "default_local_dir": local_dir,
        "resume_from_path": resume_from,
        "default_hdfs_dir": None,
        "del_local_ckpt_after_load": False,
    }


def _layout(root: Path, folders: tuple[str, ...], tracker: str | None) -> None:
    """A checkpoint directory: ``folders`` under it (a name ending in ``.file`` is made a file of
    that name without the suffix), and the tracker file's text."""
    root.mkdir(parents=True, exist_ok=True)
    for name in folders:
        if name.endswith(".file"):
            (root / name.removesuffix(".file")).write_text("not a folder")
        else:
            (root / name / "actor").mkdir(parents=True)
    if tracker is not None:
        (root / TRACKER).write_text(tracker)


# (what, resume_mode, folders, tracker text, default_local_dir as given, resume_from_path)
CASES = [
    ("latest folder named by the tracker", "auto", ("global_step_2", "global_step_4"), "2", "ckpt", None),
    ("tracker with a newline", "auto", ("global_step_4",), "4\n", "ckpt", None),
    ("no tracker: from scratch", "auto", ("global_step_4",), None, "ckpt", None),
    ("tracker naming a missing folder", "auto", ("global_step_2",), "4", "ckpt", None),
    ("tracker naming a file", "auto", ("global_step_4.file",), "4", "ckpt", None),
    ("no checkpoint directory at all", "auto", None, None, "ckpt", None),
    ("relative directory, verl's default kind", "auto", ("global_step_3",), "3", "rel:ckpt", None),
    ("relative directory with ./", "auto", ("global_step_3",), "3", "rel:./ckpt", None),
    ("relative directory with ..", "auto", ("global_step_3",), "3", "rel:sub/../ckpt", None),
    ("disable ignores the tracker", "disable", ("global_step_4",), "4", "ckpt", None),
    ("resume_path, absolute", "resume_path", ("global_step_2", "global_step_4"), "4", "ckpt", "abs:global_step_2"),
    ("resume_path, relative", "resume_path", ("global_step_2",), "2", "ckpt", "rel:ckpt/global_step_2"),
    ("resume_path to a missing folder", "resume_path", (), None, "ckpt", "abs:global_step_9"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "mode", "folders", "tracker", "local_dir", "resume_from"),
    CASES,
    ids=[case[0] for case in CASES],
)
def test_ebpos_lookup_gives_the_folder_verls_trainers_load(
    tmp_path, monkeypatch, what, mode, folders, tracker, local_dir, resume_from
):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)  # a path through sub/.. resolves only where sub is
    monkeypatch.chdir(work)  # relative paths are taken against the working directory
    root = work / "ckpt"
    if folders is not None:
        _layout(root, folders, tracker)
    given = local_dir.removeprefix("rel:") if local_dir.startswith("rel:") else str(root)
    if resume_from is not None:
        resume_from = (
            resume_from.removeprefix("rel:")
            if resume_from.startswith("rel:")
            else str(root / resume_from.removeprefix("abs:"))
        )
    config = _trainer_config(mode, given, resume_from)
    ours = resume_folder(OmegaConf.create(config))
    for trainer_class in _trainer_classes():
        assert ours == _verls_folder(trainer_class, config), (what, trainer_class.__name__)
    if mode == "auto" and tracker is not None and "missing" not in what and "file" not in what:
        assert ours is not None  # the table holds real resumes, not only "from scratch"


def test_a_tracker_that_is_not_a_step_number_stops_both(tmp_path):
    _layout(tmp_path, ("global_step_2",), "two")
    config = _trainer_config("auto", str(tmp_path))
    with pytest.raises(ValueError):
        resume_folder(OmegaConf.create(config))
    for trainer_class in _trainer_classes():
        with pytest.raises(ValueError):
            _verls_folder(trainer_class, config)


def test_the_smokes_interrupted_run_folder_is_one_verl_resumes(tmp_path, monkeypatch):
    """``ebpo verl smoke``'s resumed run (``trainer.resume_mode=auto``): the run folder holding
    what run A saved up to step 2, with verl's tracker file — verl's trainers resume from its
    ``global_step_2``, started in that folder with the relative ``default_local_dir``."""
    from ebpo.lab.verl_cpu.smoke import CHECKPOINT_DIR, new_run_dir

    saved = tmp_path / "full" / "checkpoints" / "global_step_2"
    (saved / "actor").mkdir(parents=True)
    run_dir = tmp_path / "resumed"
    new_run_dir(run_dir, interrupted_at=saved)
    monkeypatch.chdir(run_dir)
    config = _trainer_config("auto", CHECKPOINT_DIR)
    expected = str(run_dir / CHECKPOINT_DIR / "global_step_2")
    assert resume_folder(OmegaConf.create(config)) == expected
    for trainer_class in _trainer_classes():
        assert _verls_folder(trainer_class, config) == expected
    assert (saved / "actor").is_dir()  # run A's folder was copied, not moved
