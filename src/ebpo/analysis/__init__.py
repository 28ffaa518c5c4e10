"""The analysis of users' own finished runs: what their trainers wrote, read without the trainers.

* :mod:`ebpo.analysis.replay` — ``ebpo replay``: a finished run's rewards through every estimator.

Nothing here imports a trainer framework (trl, verl, accelerate, transformers, ray, hydra) or an
integration: a verl run is analysed on a laptop without verl.
"""
