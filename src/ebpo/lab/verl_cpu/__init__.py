"""verl's own training loop (``RayPPOTrainer.fit()``) with ebpo inside, on a CPU; run by ``ebpo verl smoke``.

verl 0.9.1 has no CPU path (its issue #3266): the resource pools ask Ray for GPUs, the only
platforms are CUDA / NPU / ROCm (NCCL), and rollout goes through vLLM / SGLang / TRT-LLM servers.
This package plugs CPU pieces into verl's extension points and leaves verl's loop alone:

* :mod:`~ebpo.lab.verl_cpu.platform` — a ``PlatformRegistry`` platform (``torch.cpu``, gloo);
* :mod:`~ebpo.lab.verl_cpu.worker` — the actor-rollout worker (transformers generate, log-probs,
  AdamW on verl's ``core_algos`` policy loss, checkpoints);
* :mod:`~ebpo.lab.verl_cpu.rollout` — the ``agent_loop_manager_class`` (rollout + verl's reward
  loop workers) and the ``checkpoint_manager_class`` (nothing to sync: shared weights);
* :mod:`~ebpo.lab.verl_cpu.trainer` — ``CPURayPPOTrainer(RayPPOTrainer)``, overriding
  ``init_workers`` (the recipes' pattern), with a CPU resource pool;
* :mod:`~ebpo.lab.verl_cpu.assets` — the arithmetic task through ``ebpo verl prepare-data`` and
  the warm-started tiny model;
* :mod:`~ebpo.lab.verl_cpu.run` — verl's config with the CPU overrides, Ray, one ``fit()`` in a
  ``TaskRunner`` Ray actor (as ``main_ppo``);
* :mod:`~ebpo.lab.verl_cpu.settings`, :mod:`~ebpo.lab.verl_cpu.smoke` — the smoke and its checks.

It lives in ``ebpo.lab`` (not ``ebpo.integrations.verl``) because it trains the lab's tiny model on
the lab's arithmetic task, which the integrations layer may not import. No verl function is
patched. Importing this package imports nothing from verl (the modules above do).
"""
