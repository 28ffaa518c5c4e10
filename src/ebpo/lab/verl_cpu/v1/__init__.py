"""verl's default path on a CPU: ``python -m verl.trainer.main_ppo`` → ``TaskRunnerV1`` →
TransferQueue → ``PPOTrainerSync.fit()``, with the CPU pieces registered in verl's registries by
:mod:`~ebpo.lab.verl_cpu.v1.plugin`. Imports nothing (each Ray process imports the plug-in through
here)."""
