"""Can THIS machine launch a composed verl config as written? Checked before ``main_ppo`` starts Ray.

A configuration can be valid (``ebpo verl --dry-run`` composes and validates it) and still unable
to run here: the paper's recipes ask for 4 nodes × 8 GPUs, read parquet files that
``ebpo verl prepare-data`` has not written yet, or name a model folder that is not on this
machine. ``main_ppo`` finds out minutes later, after Ray has started (and times out waiting for
GPUs that never come, leaving a Hydra ``outputs/`` folder behind). :func:`launch_problems` lists
those problems from the composed config; ``ebpo verl`` refuses to launch on any of them (one line,
exit 2) and the dry run shows them as warnings.

What counts as "here" follows what ``main_ppo``'s ``ray.init`` will do
(:func:`~ebpo.commands.verl.address.cluster_address`):
join the Ray cluster named by ``RAY_ADDRESS`` or ``ray_kwargs.ray_init.address`` — or, with
neither, the cluster ``ray start`` last started on this machine (Ray's ``ray_current_cluster``
file: a head node of a cluster) — or else start a one-machine Ray instance. On a cluster the GPUs
are the cluster's, not this machine's: only an address that is malformed, where no cluster is found
or where nothing answers as Ray does is refused
(:func:`~ebpo.commands.verl.address.check_reachable`). The node and GPU counts are checked either
way.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ebpo.commands.verl.address import check_reachable, cluster_address

__all__ = ["launch_problems"]


def launch_problems(config: Any) -> list[str]:
    """Why ``main_ppo`` cannot run ``config`` (the composed DictConfig) from this machine, one
    phrase each: node or GPU counts that are not positive whole numbers, GPUs it asks for and
    this machine has not (unless it joins a cluster), a cluster address that is malformed, found
    nowhere or not answering as Ray, data files unset or missing, a local model path missing."""
    ray_init = config.get("ray_kwargs", {}).get("ray_init", {}) or {}
    address = ray_init.get("address")
    cluster = cluster_address(address)
    counts = _counts(config.trainer)
    problems = [counts] if isinstance(counts, str) else []
    if cluster is None:
        gpus = _gpu_problem(config.trainer, counts) if isinstance(counts, tuple) else None
        problems += [gpus] if gpus else []
    else:
        try:
            check_reachable(address or cluster, _address_source(address))
        except ValueError as error:
            problems.append(str(error))
    problems += _data_problems(config.data)
    model = _model_problem(config.actor_rollout_ref.model.get("path"))
    return problems + ([model] if model else [])


def _address_source(address: Any) -> str:
    """Where the cluster address ``main_ppo`` joins comes from, for the messages."""
    if address:
        return "ray_kwargs.ray_init.address"
    if os.environ.get("RAY_ADDRESS"):
        return "RAY_ADDRESS"
    return "the cluster `ray start` recorded here (ray_current_cluster)"


def _counts(trainer: Any) -> tuple[int, int] | str:
    """``(trainer.nnodes, trainer.n_gpus_per_node)``, or why they are not positive whole numbers
    (verl sizes its resource pool with them and waits forever for a pool of 0 or fewer)."""
    counts = []
    for key in ("nnodes", "n_gpus_per_node"):
        value = trainer.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"trainer.{key}={value!r} is not a positive whole number"
        counts.append(value)
    return counts[0], counts[1]


def _gpu_problem(trainer: Any, counts: tuple[int, int]) -> str | None:
    """GPUs a one-machine run asks for (``trainer.nnodes × trainer.n_gpus_per_node`` on
    ``trainer.device=cuda``) beyond ``torch.cuda.device_count()``; other devices are not
    counted here."""
    if str(trainer.get("device", "cuda")) != "cuda":
        return None
    nodes, per_node = counts
    have = torch.cuda.device_count()
    if nodes * per_node <= have:
        return None
    return (
        f"it asks for {nodes * per_node} GPUs (trainer.nnodes={nodes} × "
        f"trainer.n_gpus_per_node={per_node}) and this machine has {have} "
        "(torch.cuda.device_count()) — on a Ray cluster give its address "
        "(+ray_kwargs.ray_init.address=HOST:PORT or RAY_ADDRESS), or set trainer.nnodes and "
        "trainer.n_gpus_per_node to what is here"
    )


def _exists(path: str) -> bool:
    return os.path.exists(path) or os.path.exists(os.path.expanduser(path))


def _data_problems(data: Any) -> list[str]:
    problems = []
    for key in ("train_files", "val_files"):
        files = data.get(key)
        files = [files] if isinstance(files, str) else list(files or [])
        missing = [str(f) for f in files if "://" not in str(f) and not _exists(str(f))]
        if not files:
            problems.append(f"data.{key} is not set (`ebpo verl prepare-data` writes the files)")
        elif missing:
            problems.append(
                f"data.{key} not found here: {', '.join(missing)} (`ebpo verl prepare-data "
                "--out-dir DIR` writes them; a recipe reads them from --data-dir)"
            )
    return problems


def _model_problem(path: Any) -> str | None:
    """A model path that can only be a local folder (absolute, ``./``, ``~``, or more than one
    ``/``: a Hub id is ``org/name``) and is not there."""
    if not path:
        return "actor_rollout_ref.model.path is not set"
    text = str(path)
    local = "://" not in text and (
        os.path.isabs(text) or text.startswith((".", "~")) or text.count("/") > 1
    )
    if local and not _exists(text):
        return (
            f"actor_rollout_ref.model.path={text} does not exist here (a local path; a Hub model "
            "is named org/name)"
        )
    return None
