"""What both trainers of the CPU loop use: the run spec and the overrides every run shares
(:mod:`~ebpo.lab.verl_cpu.shared.run_spec`), the CPU platform, the actor worker, seeded sampling,
the CPU resource pool, the task and tiny model (:mod:`~ebpo.lab.verl_cpu.shared.assets`) and what
a run leaves behind (:mod:`~ebpo.lab.verl_cpu.shared.results`). Imports nothing (each Ray process
imports the platform module through here)."""
