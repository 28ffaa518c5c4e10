"""The CPU lab: a built-in task on which RL really learns, the ``ebpo train`` job, and the paired
``ebpo bench`` that compares estimators on it.

=====================  ==================================================================
module                 concept
=====================  ==================================================================
``task``               the arithmetic task family: problems, splits, stream, reward
``job_data``           what a job trains and evaluates on (built-in task or a dataset)
``policy``             the tiny model, pretrained models, the cached supervised warm start
``evaluate``           Pass@1 on a fixed problem set, per problem / topic / tier
``rundir``             the run directory: manifest, replace / resume decisions, metrics file
``callbacks``          progress bar, metrics, periodic evaluation, stop-on-signal (TRL callback)
``plots``              a run's plots
``job``                ``TrainJobConfig`` and ``run_train_job``: the job, top to bottom
``stats``              Student-t intervals, paired differences, steps-to-target
``bench``              the paired bench: methods, matrix, cells, shards
``bench_report``       the bench's aggregation, tables, ``paired.csv`` and plots
=====================  ==================================================================
"""

from ebpo.lab.job import BUILTIN_MODEL, TrainJobConfig, run_train_job

__all__ = ["BUILTIN_MODEL", "TrainJobConfig", "run_train_job"]
