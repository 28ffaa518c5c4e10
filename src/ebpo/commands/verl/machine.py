"""Can THIS machine launch a composed verl config as written? Checked before ``main_ppo`` starts Ray.

A configuration can be valid (``ebpo verl --dry-run`` composes and validates it) and still unable
to run here: the paper's recipes ask for 4 nodes × 8 GPUs, read parquet files that
``ebpo verl prepare-data`` has not written yet, or name a model folder that is not on this
machine. ``main_ppo`` finds out minutes later, after Ray has started (and times out waiting for
GPUs that never come, leaving a Hydra ``outputs/`` folder behind). :func:`launch_problems` lists
those problems from the composed config; ``ebpo verl`` refuses to launch on any of them (one line,
exit 2) and the dry run shows them as warnings.

What counts as "here" follows what ``main_ppo``'s ``ray.init`` will do (:func:`cluster_address`):
join the Ray cluster named by ``RAY_ADDRESS`` or ``ray_kwargs.ray_init.address`` — or, with
neither, the cluster ``ray start`` last started on this machine (Ray's ``ray_current_cluster``
file: a head node of a cluster) — or else start a one-machine Ray instance. On a cluster the GPUs
are the cluster's, not this machine's: only a cluster nobody answers at is refused
(:func:`check_reachable`).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import torch

__all__ = ["REACH_TIMEOUT", "check_reachable", "cluster_address", "launch_problems"]

#: seconds a TCP connect to a Ray cluster's address may take before nothing is said to answer
REACH_TIMEOUT = 5.0


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port``, ``ray://host:port`` or ``[::1]:port``; None for forms
    without a port (``auto``, ``local``)."""
    text = address.split("://", 1)[-1].strip()
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout: float = REACH_TIMEOUT) -> None:
    """Refuse, in one line naming ``address``, a Ray address where nothing accepts a TCP
    connection within ``timeout`` seconds — before ``ray.init``, which retries such an address
    for minutes. Addresses without a port (``auto``) are left to Ray.

    Raises:
        ValueError: nothing answers at ``address``.
    """
    parsed = _host_port(address)
    if parsed is None:
        return
    host, port = parsed
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except TimeoutError:
        why = f"no answer within {timeout:g} s"
    except OSError as error:
        why = error.strerror or type(error).__name__
    raise ValueError(
        f"nothing answers at the Ray address {address} ({why}): start the cluster there "
        f"(`ray start --head --port {port}` on that machine) or give the address its head node "
        "printed"
    )


def cluster_address(config_address: str | None) -> str | None:
    """The Ray cluster ``main_ppo``'s ``ray.init(address=config_address)`` joins, or None when it
    starts its own one-machine instance: ``RAY_ADDRESS`` (Ray lets it win), the address, or — for
    none or ``auto`` — the cluster ``ray start`` last started here (``ray_current_cluster``)."""
    address = os.environ.get("RAY_ADDRESS") or config_address or None
    if address == "local":
        return None
    if address not in (None, "auto"):
        return address
    try:
        # Ray's own lookup (a private helper; ray comes with verl, imported by then)
        from ray._private.utils import read_ray_address

        found = read_ray_address()
    except Exception:  # another Ray version: no lookup, as if no cluster ran here
        found = None
    return found or address


def launch_problems(config: Any) -> list[str]:
    """Why ``main_ppo`` cannot run ``config`` (the composed DictConfig) from this machine, one
    phrase each: GPUs it asks for and this machine has not (unless it joins a cluster), a cluster
    address nothing answers at, data files unset or missing, a local model path missing."""
    ray_init = config.get("ray_kwargs", {}).get("ray_init", {}) or {}
    cluster = cluster_address(ray_init.get("address"))
    problems = []
    if cluster is None:
        gpus = _gpu_problem(config.trainer)
        problems += [gpus] if gpus else []
    else:
        try:
            check_reachable(cluster)
        except ValueError as error:
            problems.append(str(error))
    problems += _data_problems(config.data)
    model = _model_problem(config.actor_rollout_ref.model.get("path"))
    return problems + ([model] if model else [])


def _gpu_problem(trainer: Any) -> str | None:
    """GPUs a one-machine run asks for (``trainer.nnodes × trainer.n_gpus_per_node`` on
    ``trainer.device=cuda``) beyond ``torch.cuda.device_count()``; other devices are not
    counted here."""
    if str(trainer.get("device", "cuda")) != "cuda":
        return None
    nodes, per_node = int(trainer.get("nnodes") or 0), int(trainer.get("n_gpus_per_node") or 0)
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
