"""What this machine lacks to launch a verl config (issue #45 items 5 and 6): a real ``ebpo verl``
launch stops in one line, exit 2, before Ray starts, when the recipe cannot run here as written;
``ebpo verl doctor --address`` answers in one line when nothing listens there. A head node of a
cluster (an address given, or the cluster ``ray start`` started here) is not refused for the GPUs
it does not have itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ebpo.commands.verl import machine
from ebpo.commands.verl.address import cluster_address
from ebpo.commands.verl.machine import launch_problems
from tests.processes import free_port

pytestmark = pytest.mark.verl


@pytest.fixture
def no_cluster(tmp_path, monkeypatch):
    """No RAY_ADDRESS and a Ray temp dir of our own: no ``ray start`` cluster found here (another
    process on this machine may have one in /tmp/ray)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))
    return tmp_path / "raytmp"


@pytest.fixture
def listening(fake_gcs):
    """Something on the loopback that answers the address check as Ray's GCS does."""
    return fake_gcs


def _config(tmp_path: Path, **trainer) -> object:
    """A composed-config stand-in with existing data files and a Hub model id."""
    train, val = tmp_path / "train.parquet", tmp_path / "val.parquet"
    train.write_bytes(b"")
    val.write_bytes(b"")
    return OmegaConf.create(
        {
            "trainer": {"device": "cuda", "nnodes": 1, "n_gpus_per_node": 8, **trainer},
            "data": {"train_files": str(train), "val_files": [str(val)]},
            "actor_rollout_ref": {"model": {"path": "Qwen/Qwen3-8B"}},
            "ray_kwargs": {"ray_init": {"num_cpus": None}},
        }
    )


@pytest.mark.parametrize(("have", "nodes", "refused"), [(8, 1, False), (4, 1, True), (8, 4, True)])
def test_gpus_asked_for_are_counted_against_this_machine(
    tmp_path, monkeypatch, no_cluster, have, nodes, refused
):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: have)
    problems = launch_problems(_config(tmp_path, nnodes=nodes))
    assert bool(problems) == refused, problems
    if refused:
        (line,) = problems
        assert f"asks for {8 * nodes} GPUs" in line and f"this machine has {have}" in line


@pytest.mark.parametrize(
    ("key", "value"), [("n_gpus_per_node", -1), ("n_gpus_per_node", 0), ("nnodes", -4),
                       ("nnodes", "abc"), ("n_gpus_per_node", 1.5), ("nnodes", None)],
)  # fmt: skip
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_counts_that_are_not_positive_are_refused(
    tmp_path, monkeypatch, no_cluster, key, value, device
):
    """``trainer.n_gpus_per_node=-1`` passed the GPU check (4 × −1 ≤ 0) and hung in Ray (issue
    #53 item 1): a count that is not a positive whole number is a problem on any device."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    (line,) = launch_problems(_config(tmp_path, device=device, **{key: value}))
    assert line == f"trainer.{key}={value!r} is not a positive whole number"


def test_a_cpu_run_is_not_counted(tmp_path, monkeypatch, no_cluster):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert launch_problems(_config(tmp_path, device="cpu")) == []


def test_a_cluster_address_lifts_the_gpu_count(tmp_path, monkeypatch, no_cluster, listening):
    """``+ray_kwargs.ray_init.address`` or RAY_ADDRESS: the GPUs are the cluster's."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    config = _config(tmp_path, nnodes=4)
    config.ray_kwargs.ray_init.address = listening
    assert launch_problems(config) == []
    config.ray_kwargs.ray_init.address = None
    monkeypatch.setenv("RAY_ADDRESS", listening)
    assert launch_problems(config) == []


def test_a_head_node_after_ray_start_is_not_refused(tmp_path, monkeypatch, no_cluster, listening):
    """No address at all, but ``ray start --head`` ran here: Ray's ``ray_current_cluster`` file
    names the cluster ``main_ppo``'s ``ray.init()`` joins, so this machine's GPUs do not count."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    config = _config(tmp_path, nnodes=4)
    assert launch_problems(config)  # no cluster yet: 32 GPUs asked, 0 here
    (no_cluster / "ray").mkdir(parents=True)
    (no_cluster / "ray" / "ray_current_cluster").write_text(listening + "\n")
    assert cluster_address(None) == listening
    assert launch_problems(config) == []


def test_a_cluster_nobody_answers_at_is_named(tmp_path, monkeypatch, no_cluster):
    address = f"127.0.0.1:{free_port()}"
    config = _config(tmp_path)
    config.ray_kwargs.ray_init.address = address
    (line,) = launch_problems(config)
    assert line.startswith(f"nothing answers at the Ray address {address} (")
    assert cluster_address("local") is None


def test_missing_or_unset_data_files_and_model_folder(tmp_path, monkeypatch, no_cluster):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    config = _config(tmp_path)
    config.data.train_files = None
    config.data.val_files = [str(tmp_path / "val.parquet"), str(tmp_path / "gone.parquet")]
    config.actor_rollout_ref.model.path = str(tmp_path / "models" / "qwen")
    problems = launch_problems(config)
    assert problems[0].startswith("data.train_files is not set")
    assert problems[1].startswith(f"data.val_files not found here: {tmp_path / 'gone.parquet'} (")
    assert problems[2].startswith(f"actor_rollout_ref.model.path={tmp_path / 'models' / 'qwen'}")
    assert len(problems) == 3


@pytest.mark.parametrize(
    ("path", "refused"),
    [("Qwen/Qwen3-8B", False), ("gpt2", False), ("hdfs://models/qwen", False),
     ("./qwen", True), ("~/no-such-model-here", True), ("models/qwen/final", True)],
)  # fmt: skip
def test_only_a_path_that_can_only_be_local_is_checked(tmp_path, monkeypatch, path, refused):
    monkeypatch.chdir(tmp_path)
    assert (machine._model_problem(path) is not None) == refused


def _ebpo(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    full.update({"RAY_TMPDIR": str(cwd.parent / "raytmp"), "EBPO_DEBUG": "", **env})
    return subprocess.run(
        [sys.executable, "-m", "ebpo", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_recipe_this_machine_cannot_run_stops_before_ray_starts(tmp_path):
    """The paper's recipe, as written (4 nodes × 8 GPUs, data not prepared), launched for real
    on this machine: one stderr line naming the GPUs and the data files, exit 2, main_ppo never
    started (its command line is printed just before), Ray never started (no session under
    RAY_TMPDIR) and nothing written in the working directory (no Hydra ``outputs/``)."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    run = _ebpo(["verl", "recipe", "ebpo"], cwd)
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(
        "ebpo verl recipe: error: this machine cannot run the configuration as written "
        "(nothing was launched): it asks for 32 GPUs (trainer.nnodes=4 × trainer.n_gpus_per_node=8)"
    )
    assert "data.train_files not found here: data/ebpo/dapo_math_17k.file.parquet" in lines[0]
    assert "verl.trainer.main_ppo" not in run.stdout
    assert list(cwd.iterdir()) == []
    assert not (tmp_path / "raytmp").exists()


def test_doctor_answers_in_one_line_when_nothing_listens(tmp_path):
    """``ebpo verl doctor --address`` at a port nobody listens on: one line naming the typed
    address, exit 2 — not Ray's connection retries."""
    address = f"127.0.0.1:{free_port()}"
    run = _ebpo(["verl", "doctor", "--address", address], tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stdout == ""
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"ebpo verl doctor: error: nothing answers at the Ray address {address}")


def test_a_recipe_with_a_negative_gpu_count_stops_before_ray_starts(tmp_path):
    """``ebpo verl recipe ebpo --data-dir D trainer.n_gpus_per_node=-1`` with the data there: one
    line naming the count, exit 2; Ray never started, no Hydra ``outputs/`` (issue #53 item 1)."""
    from ebpo.integrations.verl.recipes import train_file, val_files

    cwd, data = tmp_path / "work", tmp_path / "data"
    cwd.mkdir()
    data.mkdir()
    for path in [train_file(str(data), "file"), *val_files(str(data))]:
        open(path, "wb").close()
    args = ["verl", "recipe", "ebpo", "--data-dir", str(data), "trainer.n_gpus_per_node=-1"]
    run = _ebpo(args, cwd)
    assert run.returncode == 2, run.stdout + run.stderr
    (line,) = run.stderr.splitlines()
    assert "trainer.n_gpus_per_node=-1 is not a positive whole number" in line
    assert list(cwd.iterdir()) == [] and not (tmp_path / "raytmp").exists()


@pytest.mark.parametrize(
    ("address", "said"),
    [("auto", "ray_kwargs.ray_init.address auto: no Ray cluster found on this machine"),
     ("not an address", "ray_kwargs.ray_init.address 'not an address' has no port"),
     ("127.0.0.1:²", "the port '²' is not a number from 1 to 65535")],
)  # fmt: skip
def test_the_cluster_address_of_the_config_is_checked(tmp_path, no_cluster, address, said):
    config = _config(tmp_path)
    config.ray_kwargs.ray_init.address = address
    (line,) = launch_problems(config)
    assert said in line
