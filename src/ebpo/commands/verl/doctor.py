"""``ebpo verl doctor``: make a broken plug-in install loud.

verl loads ``verl.plugins`` entry points inside ``import verl`` and logs load errors at DEBUG
level only, so a broken install silently leaves ``algorithm.adv_estimator=ebpo`` unknown — and
verl reports that deep inside a Ray actor, minutes into a job. The doctor checks, in order:

1. verl imports and its version (≥ 0.9 for entry points, ≥ 0.9.1 for checkpoint callbacks);
2. the ``verl.plugins`` entry point ``ebpo`` is declared in the installed metadata and
   ``VERL_USE_EXTERNAL_PLUGINS`` lets verl load it;
3. in a FRESH interpreter (as a Ray worker starts), ``import verl`` alone registers every name of
   :func:`~ebpo.integrations.verl.advantage.plugin_names` (``ebpo``, ``ebpo_batch``, ``jspo``,
   ...) with ebpo's functions; if not, the entry point is loaded by hand there to
   show the real traceback;
4. verl's ``compute_advantage`` runs with each of these estimators on a tiny batch with a padding row;
5. the checkpoint callback class loads through verl's own loader.

With ``--address`` (:func:`run_node_checks`), check 3 runs on every node of that Ray cluster
instead (:mod:`~ebpo.commands.verl.nodes`): verl's ``TaskRunnerV1``, which computes the
advantages, lands on any of them.

These checks stop at verl's ``compute_advantage``. ``ebpo verl smoke`` (:data:`SMOKE_HINT`) goes
further: verl's default training path (``python -m verl.trainer.main_ppo``: ``TaskRunnerV1``,
TransferQueue, ``PPOTrainerSync.fit()``) on this CPU with the plug-in inside — validation, reward,
metrics, checkpoint and an exact resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points

import numpy as np
import torch

from ebpo.commands.verl.launcher import CALLBACK_FQN, PLUGIN_MODULE, entry_point_active
from ebpo.commands.verl.nodes import ADVANTAGE_MODULE, fresh_process_report
from ebpo.integrations.verl import advantage
from ebpo.integrations.verl.advantage import plugin_names
from ebpo.integrations.verl.state import EstimatorStore

__all__ = ["SMOKE_HINT", "Check", "run_checks", "run_node_checks"]

#: printed after the doctor's checks: the next, deeper check of an install
SMOKE_HINT = (
    "next: `ebpo verl smoke` runs verl's default path (python -m verl.trainer.main_ppo: "
    "TaskRunnerV1, TransferQueue, PPOTrainerSync.fit) on this CPU with the plug-in inside "
    "(validation, compute_score, metrics, checkpoint, exact resume; a few minutes)"
)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fatal: bool = True  # a failing non-fatal check is a warning


def _verl_version() -> Check:
    try:
        import verl  # optional heavy dependency (verl extra); its failure is what this check reports
    except Exception as error:  # ImportError, or verl's own import-time failures
        return Check("import verl", False, f"{type(error).__name__}: {error} (install ebpo[verl])")
    from packaging.version import Version  # comes with verl

    version = Version(verl.__version__)
    if version < Version("0.9.0"):
        return Check(
            "verl version",
            False,
            f"verl {version} has no verl.plugins entry points: set VERL_USE_EXTERNAL_MODULES="
            "ebpo.integrations.verl.plugin for the driver and the Ray workers (ebpo verl does it)",
            fatal=False,
        )
    return Check("verl version", True, f"verl {version}")


def _entry_point() -> Check:
    ours = [ep for ep in entry_points(group="verl.plugins") if ep.name == "ebpo"]
    if not ours:
        return Check(
            "entry point",
            False,
            "no 'ebpo' entry point in group verl.plugins: reinstall ebpo[verl]",
        )
    if ours[0].value != PLUGIN_MODULE:
        return Check(
            "entry point",
            False,
            f"entry point 'ebpo' points at {ours[0].value!r}, expected {PLUGIN_MODULE!r}",
        )
    if not entry_point_active():
        return Check(
            "entry point",
            False,
            "VERL_USE_EXTERNAL_PLUGINS excludes 'ebpo': verl will not load the plug-in on import",
        )
    return Check("entry point", True, f"verl.plugins: ebpo = {PLUGIN_MODULE}")


def _fresh_process(timeout: float) -> Check:
    name = "fresh `import verl` registers"
    try:
        report = fresh_process_report(timeout)
    except RuntimeError as error:
        return Check(name, False, str(error))
    registered = report["registered"]
    if registered and all(module == ADVANTAGE_MODULE for module in registered.values()):
        return Check(name, True, ", ".join(sorted(registered)))
    detail = f"registry after `import verl`: {registered}"
    if report.get("error"):
        detail += "\n" + report["error"]
    return Check(name, False, detail)


#: options for the doctor's tiny batch: EBPO with the batch prior (two groups are its whole world)
DOCTOR_OPTIONS = {"ebpo": {"prior": "batch"}}
#: the estimators the doctor runs: one per estimator class the plug-in registers (its named
#: methods share the class's code path)
DOCTOR_ESTIMATORS = tuple(sorted(set(plugin_names().values())))


def _compute_advantage() -> Check:
    name = f"compute_advantage({', '.join(DOCTOR_ESTIMATORS)})"
    try:
        from omegaconf import OmegaConf  # optional heavy dependencies (verl extra)
        from verl import DataProto
        from verl.trainer.ppo.ray_trainer import compute_advantage

        # imports verl and registers the estimators: a failure here is what this check reports
        import ebpo.integrations.verl.plugin  # noqa: F401

        mask = torch.tensor(
            [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0], [0, 0, 0]], dtype=torch.float32
        )
        rewards = torch.zeros_like(mask)
        rewards[[0, 2], [1, 2]] = 1.0
        uid = np.array(["a", "b", "a", "b", "pad"], dtype=object)
        # the prompts' tokens (left-padded, as verl's rollout gives them): SPO keys on them
        prompts = torch.tensor([[0, 7], [8, 9], [0, 7], [8, 9], [0, 0]])
        attention_mask = torch.cat([(prompts != 0).float(), mask], dim=-1)
        # A private store: the doctor must not leave state in the process-wide one.
        saved, advantage.STORE = advantage.STORE, EstimatorStore()
        try:
            for estimator in DOCTOR_ESTIMATORS:
                data = DataProto.from_dict(
                    tensors={
                        "token_level_rewards": rewards,
                        "response_mask": mask,
                        "prompts": prompts,
                        "attention_mask": attention_mask,
                    },
                    non_tensors={"uid": uid},
                )
                options = {**DOCTOR_OPTIONS.get(estimator, {}), "log_to_trainer": False}
                config = OmegaConf.create({"adv_estimator": estimator, "ebpo": options})
                adv = compute_advantage(data, adv_estimator=estimator, config=config).batch[
                    "advantages"
                ]
                if (
                    not torch.isfinite(adv).all()
                    or (adv[4] != 0).any()
                    or (adv * (1 - mask) != 0).any()
                ):
                    return Check(name, False, f"{estimator}: unexpected advantages {adv.tolist()}")
        finally:
            advantage.STORE = saved
        return Check(name, True, "tiny batch with a padding row: OK")
    except Exception as error:
        return Check(name, False, f"{type(error).__name__}: {error}")


def _callback() -> Check:
    try:
        from verl.utils.import_utils import load_class_from_fqn  # optional heavy dependency

        load_class_from_fqn(CALLBACK_FQN, "CheckpointCallback")
    except Exception as error:
        return Check(
            "checkpoint callback",
            False,
            f"{type(error).__name__}: {error} (verl >= 0.9.1 needed to persist the prior)",
            fatal=False,
        )
    return Check("checkpoint callback", True, "trainer.checkpoint_callback_class loads")


def run_checks(*, fresh_process: bool = True, timeout: float = 300.0) -> list[Check]:
    """All checks, stopping early when verl itself cannot be imported."""
    checks = [_verl_version()]
    if checks[0].name == "import verl":
        return checks
    checks.append(_entry_point())
    if fresh_process:
        checks.append(_fresh_process(timeout))
    checks.append(_compute_advantage())
    checks.append(_callback())
    return checks


def run_node_checks(address: str, *, timeout: float = 300.0) -> list[Check]:
    """The registration check on every node of the Ray cluster at ``address`` (one check per
    node; a node where the probe cannot run fails too).

    Raises:
        ValueError: no cluster at ``address`` could be joined (a user error: one line).
    """
    from ebpo.commands.verl.nodes import check_nodes  # connects to Ray (verl extra)

    try:
        reports = check_nodes(address, timeout=timeout)
    except RuntimeError as error:  # the driver died: a broken Ray here, not the address
        return [Check(f"Ray cluster at {address}", False, str(error))]
    if not reports:
        return [Check(f"Ray cluster at {address}", False, "no alive node")]
    return [
        Check(
            f"node {r.address} ({r.hostname}, id {r.node_id[:12]}): `import verl` registers",
            r.ok,
            r.detail,
        )
        for r in reports
    ]
