"""``ebpo grpo``'s output folder with real processes (issue #38 items 2, 4, 7, 8, 10).

* A 2-process launch holds its ``output_dir`` for the whole run: its ranks share the launcher's
  claim (they train), a second ``ebpo grpo`` on the folder exits 2 naming the launcher's pid.
* ``kill -9`` of the launcher takes its ranks with it (they were re-parented and trained on).
* A run killed during its first checkpoint left only an interrupted save: a resume says there is
  nothing to resume and what to do; a plain rerun starts again from step 0 (the same run as a fresh
  one) and removes the interrupted save; ``resume_from_checkpoint: true`` in the YAML resumes from
  the newest checkpoint; our stale temporary files are removed by the run that holds the folder,
  a user's file beside them is kept.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.utils.launch import free_port  # noqa: E402
from ebpo.utils.run_lock import LOCK, check_not_in_use  # noqa: E402
from tests.commands.grpo.grpo_files import write_model_and_prompts  # noqa: E402
from tests.hostile.harness import assert_user_error, run_cli  # noqa: E402

pytestmark = [pytest.mark.trl, pytest.mark.slow]

RECIPE = """\
model_name_or_path: {root}/model
datasets:
  - path: json
    data_files: {root}/data.jsonl
reward_funcs: [{reward}]
num_generations: 2
per_device_train_batch_size: 4
max_completion_length: 8
max_steps: {steps}
save_steps: 1
learning_rate: 1.0e-3
beta: 0.0
logging_steps: 1
report_to: none
use_cpu: true
bf16: false
seed: 0
output_dir: {out}
"""

#: a reward that says which process calls it, then waits until the test says go
BLOCKING_REWARD = """\
import os
import time
from pathlib import Path


def blocking_reward(completions, **kwargs):
    folder = Path(os.environ["EBPO_TEST_PIDS"])
    (folder / str(os.getpid())).write_text("")
    while not (folder / "go").exists():
        time.sleep(0.2)
    return [0.0] * len(completions)
"""

#: the longest any wait below may take before the test fails (a bound for a loaded machine, not
#: a measurement)
PATIENCE_S = 600


def wait_for(
    condition, what: str, launcher: subprocess.Popen | None = None, patience: float = PATIENCE_S
) -> None:
    deadline = time.monotonic() + patience
    while not condition():
        if launcher is not None and launcher.poll() is not None:
            raise AssertionError(f"the launcher ended ({launcher.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {patience} s")
        time.sleep(0.2)


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = write_model_and_prompts(
        tmp_path_factory.mktemp("grpo_run_dir"), 8, num_layers=1, hidden_size=32, seed=0
    )
    (root / "lib").mkdir()
    (root / "lib" / "grpo_blocking_reward.py").write_text(BLOCKING_REWARD)
    return root


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_launch_holds_its_folder_and_its_ranks_die_with_it(root, monkeypatch):
    out, pids = root / "launched", root / "pids"
    pids.mkdir()
    config = root / "launched.yaml"
    config.write_text(
        RECIPE.format(root=root, reward="grpo_blocking_reward.blocking_reward", steps=2, out=out)
        + f"num_processes: 2\nmain_process_port: {free_port()}\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(root / "lib"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "EBPO_TEST_PIDS": str(pids),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    launcher = subprocess.Popen(
        [sys.executable, "-m", "ebpo", "grpo", "--config", str(config)],
        env=env,
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    ranks: list[int] = []
    try:
        # both ranks reached their first reward: they passed the folder checks while the
        # launcher held the folder (the claim is shared)
        wait_for(lambda: len(list(pids.iterdir())) == 2, "2 ranks in the reward", launcher)
        ranks = [int(p.name) for p in pids.iterdir()]
        assert launcher.pid not in ranks and all(running(pid) for pid in ranks)
        assert (out / LOCK).read_text().strip() == str(launcher.pid)

        monkeypatch.chdir(root)
        second = run_cli(["grpo", "--config", str(config), "--seed", "1"])
        assert_user_error(
            second,
            rf"^ebpo grpo: error: output_dir '{out}' is in use by another ebpo process "
            rf"\(pid {launcher.pid}\); wait for it to end or choose another directory$",
        )

        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        # the kernel kills them at once; without that they trained on for minutes (checked)
        wait_for(lambda: not any(running(pid) for pid in ranks), "end of the ranks", patience=120)
        check_not_in_use(out)  # the kernel released the lock with its holder
        assert not list(out.glob("checkpoint-*"))  # nobody trained on
    finally:
        (pids / "go").write_text("")
        for pid in [launcher.pid, *ranks]:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        launcher.wait()
        launcher.stderr.close()


def estimator_states(out: Path) -> list[dict]:
    return [
        json.loads((out / f"checkpoint-{step}" / "ebpo_estimator_state.json").read_text())
        for step in (1, 2)
    ]


def test_a_run_with_only_an_interrupted_save_has_a_way_forward(root, monkeypatch):
    monkeypatch.chdir(root)
    reward = "ebpo.integrations.trl.math_reward"
    fresh, out = root / "fresh", root / "killed"
    fresh_yaml, killed_yaml = root / "fresh.yaml", root / "killed.yaml"
    fresh_yaml.write_text(RECIPE.format(root=root, reward=reward, steps=2, out=fresh))
    killed_yaml.write_text(RECIPE.format(root=root, reward=reward, steps=2, out=out))
    assert run_cli(["grpo", "--config", str(fresh_yaml)]).code == 0

    # what a kill during the first save leaves: ebpo's first file, one of its temporaries
    save = out / "checkpoint-1"
    save.mkdir(parents=True)
    (save / "ebpo_estimator_state.json").write_text("{}")
    (save / ".ebpo_generation_state.json.0123abcd.tmp").write_text("{")
    for resume in ("true", str(save)):
        refused = run_cli(
            ["grpo", "--config", str(killed_yaml), "--resume_from_checkpoint", resume]
        )
        assert_user_error(
            refused,
            r"holds only interrupted saves: nothing to resume; a plain rerun starts again from "
            r"step 0 \(it removes them\)$",
            label=resume,
        )
    rerun = run_cli(["grpo", "--config", str(killed_yaml)])
    assert rerun.code == 0, rerun.err
    assert (
        f"{save} is incomplete (" in rerun.err and "training starts again from step 0" in rerun.err
    )
    assert estimator_states(out) == estimator_states(fresh)  # the same run as a fresh one
    assert not list(out.rglob("*.tmp")) and not (out / LOCK).exists()

    # a kill's temporary file of ours in a complete checkpoint, and a user's file beside it
    ours = out / "checkpoint-2" / ".ebpo_estimator_state.json.89abcdef.tmp"
    users = out / "checkpoint-2" / ".notes.0123abcd.tmp"
    ours.write_text("{")
    users.write_text("mine")
    resumed_yaml = root / "resumed.yaml"
    resumed_yaml.write_text(
        RECIPE.format(root=root, reward=reward, steps=3, out=out) + "resume_from_checkpoint: true\n"
    )
    resumed = run_cli(["grpo", "--config", str(resumed_yaml)])
    assert resumed.code == 0, resumed.err
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    assert not ours.exists() and users.read_text() == "mine"
