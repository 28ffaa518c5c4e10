"""``ebpo train``, the main job: a warm start of the policy (cached), held-out Pass@1 before, RL with
TRL's trainer and the chosen estimator, held-out Pass@1 after, all in one run directory that a
signal leaves resumable. Read :mod:`~ebpo.lab.train.job` top to bottom; its options are
:class:`~ebpo.lab.train.config.TrainJobConfig`, its data :mod:`~ebpo.lab.train.data`, its policy
:mod:`~ebpo.lab.train.warm_start`, what it does at every step :mod:`~ebpo.lab.train.callbacks`,
its evaluation :mod:`~ebpo.lab.train.evaluate` and its plots :mod:`~ebpo.lab.train.plots`.
"""
