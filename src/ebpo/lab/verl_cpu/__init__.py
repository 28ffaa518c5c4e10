"""verl's training loop with ebpo inside, on a CPU; run by ``ebpo verl smoke``.

verl 0.9.1 has no CPU path (its issue #3266): the resource pools ask Ray for GPUs, the only
platforms are CUDA / NPU / ROCm (NCCL), its worker cannot start its process group on a CPU, and
rollout goes through vLLM / SGLang / TRT-LLM servers. This package plugs CPU pieces into verl's
extension points and leaves verl's loop alone. Three subpackages, one per trainer over what both
share, and the smoke on top:

:mod:`~ebpo.lab.verl_cpu.shared` — what both trainers use:

* :mod:`~ebpo.lab.verl_cpu.shared.run_spec` — one run as a value (``RunSpec``: files, sizes, where
  it resumes) and the overrides every CPU run adds to verl's config;
* :mod:`~ebpo.lab.verl_cpu.shared.platform` — a ``PlatformRegistry`` platform (``torch.cpu``, gloo);
* :mod:`~ebpo.lab.verl_cpu.shared.worker` — the actor worker: log-probs, AdamW on verl's
  ``core_algos`` policy loss, data parallel over gloo, checkpoints, weight sync, a trace;
* :mod:`~ebpo.lab.verl_cpu.shared.sampling` — seeded sampling; :mod:`~ebpo.lab.verl_cpu.shared.resources`
  — the CPU resource pool;
* :mod:`~ebpo.lab.verl_cpu.shared.assets` (the arithmetic task through ``ebpo verl prepare-data``,
  the warm-started tiny model), :mod:`~ebpo.lab.verl_cpu.shared.task` (its cells),
  :mod:`~ebpo.lab.verl_cpu.shared.results` (traces, metrics, manifests: what a run left behind).

:mod:`~ebpo.lab.verl_cpu.v1` — verl's default path (``python -m verl.trainer.main_ppo`` →
``TaskRunnerV1`` → TransferQueue → ``PPOTrainerSync.fit()``), every piece registered by
:mod:`~ebpo.lab.verl_cpu.v1.plugin`:

* :mod:`~ebpo.lab.verl_cpu.v1.trainer` — ``PPOTrainerSync`` with CPU workers (``register_trainer``);
* :mod:`~ebpo.lab.verl_cpu.v1.serving` — the rollout replica and its generation server
  (``RolloutReplicaRegistry``);
* :mod:`~ebpo.lab.verl_cpu.v1.agent_loop` — verl's single-turn agent loop with a request id naming
  the sample; :mod:`~ebpo.lab.verl_cpu.v1.replay` — verl's replay buffer, rows in dataset order;
* :mod:`~ebpo.lab.verl_cpu.v1.launch` — the ``main_ppo`` command line and its process, watched
  (listening sockets, leftovers); :mod:`~ebpo.lab.verl_cpu.v1.fit` — one run and its results.

:mod:`~ebpo.lab.verl_cpu.legacy` — the deprecated ``RayPPOTrainer.fit()`` (``--trainer legacy``):

* :mod:`~ebpo.lab.verl_cpu.legacy.trainer` — ``CPURayPPOTrainer(RayPPOTrainer)``, overriding
  ``init_workers`` (the recipes' pattern); :mod:`~ebpo.lab.verl_cpu.legacy.rollout` — its
  ``agent_loop_manager_class`` and ``checkpoint_manager_class``;
* :mod:`~ebpo.lab.verl_cpu.legacy.run` — verl's config with the CPU overrides, Ray, one ``fit()``
  in a ``TaskRunner`` Ray actor; :mod:`~ebpo.lab.verl_cpu.legacy.fit` — one run and its results.

The smoke: :mod:`~ebpo.lab.verl_cpu.settings` (its options, checked before anything slow is
imported), :mod:`~ebpo.lab.verl_cpu.smoke` (its runs) and :mod:`~ebpo.lab.verl_cpu.checks` (what
it checks on them).

It lives in ``ebpo.lab`` (not ``ebpo.integrations.verl``) because it trains the lab's tiny model on
the lab's arithmetic task, which the integrations layer may not import. No verl function is
patched. Importing this package, or one of its subpackages, imports nothing from verl (their
modules do).
"""
