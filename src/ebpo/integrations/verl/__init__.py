"""EBPO as a verl plug-in (verl ≥ 0.9; 0.6–0.8 through ``VERL_USE_EXTERNAL_MODULES``).

Modules (importing this package imports nothing from verl):

* :mod:`~ebpo.integrations.verl.plugin` — the ``verl.plugins`` entry point: registers ``ebpo``,
  ``ebpo_bb``, ``jspo`` and ``jspo_plus_plus`` in verl's advantage-estimator registry (idempotent);
* :mod:`~ebpo.integrations.verl.advantage` — the registered functions (config → options, padding
  rows, grouping by uid, token broadcast, metrics side channel);
  :mod:`~ebpo.integrations.verl.call_stack` — what they read from verl's frames (the trainer and
  its ``metrics`` dict, agent sessions' keys, SPO's prompt tokens);
* :mod:`~ebpo.integrations.verl.state` — the per-process estimator store (the state of the
  stateful estimators: EBPO's running prior, JSPO++'s smoothing), its persistence and the metrics
  JSONL;
* :mod:`~ebpo.integrations.verl.checkpoint` — ``EBPOCheckpointCallback`` (save with each
  checkpoint, restore on resume); :mod:`~ebpo.integrations.verl.resume` — which checkpoint folder
  a resume reads (no verl import);
* :mod:`~ebpo.integrations.verl.reward` — ``compute_score`` for
  ``reward.custom_reward_function.path=pkg://ebpo.integrations.verl.reward``;
* :mod:`~ebpo.integrations.verl.curriculum_sampler` — the sampler and dataset class that keep a
  curriculum order in verl's dataloader (``pkg://ebpo.integrations.verl.curriculum_sampler``);
* :mod:`~ebpo.integrations.verl.recipes` — the paper's recipes as verl overrides;
  :mod:`~ebpo.integrations.verl.data_prep` — DAPO-Math-17K and the evaluation sets as verl rows.

The command line (``ebpo verl``: launcher, doctor, node probes, ``prepare-data``) lives in
:mod:`ebpo.commands.verl`.

See ``recipes/verl/README.md`` for usage.
"""
