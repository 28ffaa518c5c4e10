"""The analysis of users' own finished runs: what their trainers wrote, read without the trainers.

* :mod:`ebpo.analysis.replay` — ``ebpo replay``: a finished run's rewards through every estimator.
* :mod:`ebpo.analysis.compare` — ``ebpo compare``: estimators against a baseline over paired seeds.
* :mod:`ebpo.analysis.paired` — paired differences, Student-t intervals, p-values, Holm's
  correction, steps-to-target (``ebpo bench`` uses them too).

Nothing here imports a trainer framework (trl, verl, accelerate, transformers, ray, hydra) or an
integration: a verl run is analysed on a laptop without verl.
"""
