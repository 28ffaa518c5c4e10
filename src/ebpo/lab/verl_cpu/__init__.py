"""verl's training loop with ebpo inside, on a CPU; run by ``ebpo verl smoke``.

verl 0.9.1 has no CPU path (its issue #3266): the resource pools ask Ray for GPUs, the only
platforms are CUDA / NPU / ROCm (NCCL), its worker cannot start its process group on a CPU, and
rollout goes through vLLM / SGLang / TRT-LLM servers. This package plugs CPU pieces into verl's
extension points and leaves verl's loop alone.

verl's default path (v1: ``python -m verl.trainer.main_ppo`` → ``TaskRunnerV1`` → TransferQueue →
``PPOTrainerSync.fit()``), every piece registered by :mod:`~ebpo.lab.verl_cpu.plugin`:

* :mod:`~ebpo.lab.verl_cpu.platform` — a ``PlatformRegistry`` platform (``torch.cpu``, gloo);
* :mod:`~ebpo.lab.verl_cpu.trainer_v1` — ``PPOTrainerSync`` with CPU workers
  (``register_trainer``), :mod:`~ebpo.lab.verl_cpu.resources` — the CPU resource pool;
* :mod:`~ebpo.lab.verl_cpu.worker` — the actor worker (both trainers): log-probs, AdamW on verl's
  ``core_algos`` policy loss, data parallel over gloo, checkpoints, weight sync, a trace;
* :mod:`~ebpo.lab.verl_cpu.serving` — the rollout replica and its generation server
  (``RolloutReplicaRegistry``); :mod:`~ebpo.lab.verl_cpu.sampling` — seeded sampling;
* :mod:`~ebpo.lab.verl_cpu.agent_loop` — verl's single-turn agent loop with a request id naming the
  sample; :mod:`~ebpo.lab.verl_cpu.replay` — verl's replay buffer, rows in dataset order;
* :mod:`~ebpo.lab.verl_cpu.launch` — the ``main_ppo`` command line and its process, watched
  (listening sockets, leftovers).

The legacy path (``RayPPOTrainer.fit()``, ``--trainer legacy``):

* :mod:`~ebpo.lab.verl_cpu.trainer` — ``CPURayPPOTrainer(RayPPOTrainer)``, overriding
  ``init_workers`` (the recipes' pattern); :mod:`~ebpo.lab.verl_cpu.rollout` — its
  ``agent_loop_manager_class`` and ``checkpoint_manager_class``;
* :mod:`~ebpo.lab.verl_cpu.run` — verl's config with the CPU overrides, Ray, one ``fit()`` in a
  ``TaskRunner`` Ray actor.

Shared: :mod:`~ebpo.lab.verl_cpu.assets` (the arithmetic task through ``ebpo verl prepare-data``,
the warm-started tiny model), :mod:`~ebpo.lab.verl_cpu.results` (traces, metrics, manifests),
:mod:`~ebpo.lab.verl_cpu.settings`, :mod:`~ebpo.lab.verl_cpu.checks` and
:mod:`~ebpo.lab.verl_cpu.smoke` (the smoke and its checks).

It lives in ``ebpo.lab`` (not ``ebpo.integrations.verl``) because it trains the lab's tiny model on
the lab's arithmetic task, which the integrations layer may not import. No verl function is
patched. Importing this package imports nothing from verl (the modules above do).
"""
