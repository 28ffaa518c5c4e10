"""The CPU lab: a built-in task on which RL really learns, the ``ebpo train`` job, and the paired
``ebpo bench`` that compares estimators on it.

Importing the package imports none of its modules (``ebpo.lab.task`` or ``ebpo.lab.simulation``
do not pull TRL); import what you use, e.g. ``from ebpo.lab.job import TrainJobConfig,
run_train_job``.

=====================  ==================================================================
module                 concept
=====================  ==================================================================
``task``               the arithmetic task family: problems, splits, stream, reward
``job_data``           what a job trains and evaluates on (built-in task or a dataset)
``policy``             the tiny model, pretrained models, the cached supervised warm start
``evaluate``           Pass@1 on a fixed problem set, per problem / topic / tier
``rundir``             the run directory: manifest, replace / resume decisions, metrics file
``runlock``            the OS file lock that keeps one process per run directory
``callbacks``          progress bar, metrics, periodic evaluation, stop-on-signal (TRL callback)
``plots``              a run's plots
``job_config``         ``TrainJobConfig``: a job's options, defaults and validation
``processes``          the processes of a launch: rank, and exchanges that carry failures
``job_policy``         a job's policy: loaded, warm-started once (by the main process)
``job``                ``run_train_job``: the job, top to bottom
``stats``              Student-t intervals, paired differences, steps-to-target
``bench_methods``      the bench's rows: methods (estimator variant, TRL preset, data order)
``bench_config``       the bench's matrix (``BenchConfig``) and its cells (``CellSpec``)
``bench_cells``        running one cell (a train job), finished cells on disk
``bench``              the paired bench: shards, the loop over cells, then the report
``bench_summary``      what the finished cells say: chosen rates, paired differences, levels
``bench_report``       the results folder: ``paired.csv``, tables, ``results.md``, plots
``simulation``         simulated experiments without a model (``ebpo simulate``)
=====================  ==================================================================
"""
