"""The lab: products that train, compare and simulate estimators on a CPU, each a subpackage run by
one ``ebpo`` command, on two shared pieces.

=====================  ==========================================================================
package                what it is, and the command that runs it
=====================  ==========================================================================
``train``              the main job: warm start, held-out Pass@1, RL on TRL with one estimator,
                       a run directory with metrics, plots and checkpoints (``ebpo train``)
``bench``              the paired comparison of estimators, every cell a train job; paired
                       differences to GRPO with Student-t intervals (``ebpo bench``)
``simulation``         simulated experiments without a language model (``ebpo simulate``)
``verl_cpu``           verl's own training loop with ebpo inside, on CPU workers (``ebpo verl smoke``)
``replay``             a finished run's own rewards (verl's rollout dumps, tables) through every
                       estimator, step by step (``ebpo replay``)
``cpu_task``           shared: the built-in arithmetic task and its tiny model with a cached warm start
``runs``               shared: a run directory (manifest, metrics file), its lock (one process per
                       directory), and the processes of a launch (exchanges that carry failures)
=====================  ==========================================================================

The products do not import each other, except that the bench runs train jobs; every product may
import the shared pieces, which import no product (import-linter contracts in ``pyproject.toml``).
Importing a package imports none of its modules: import what you use, e.g.
``from ebpo.lab.train.job import TrainJobConfig, run_train_job``.
"""
