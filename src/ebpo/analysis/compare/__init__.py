"""``ebpo compare``: does an estimator train better than the baseline on the user's own task, by
how much, beyond seed noise? Finished TRL, verl and ``ebpo train`` runs, read without their
trainers, paired by seed; per step the paired mean difference with its 95 % Student-t interval,
at the end the difference at the last common step, in the area under the curve and in the steps
to the baseline's final value, with the count of intervals and what Holm's correction leaves.

* :mod:`.runs` — a run's estimator, seed, settings and logged metrics (:mod:`.history`: one
  reader of the logs of every kind; :mod:`.pickle_fields`: ``training_args.bin`` without
  unpickling, bounded);
* :mod:`.pairing` — pairs by seed, the settings check, the metrics and their common steps;
* :mod:`.differences` — the paired statistics (:mod:`ebpo.analysis.paired`);
* :mod:`.report`, :mod:`.plots` — compare.json / compare.csv / the verdict, the PNGs (the output
  folder: :mod:`ebpo.commands.compare` over :mod:`ebpo.utils.output_folder`);
* :mod:`.engine` — the steps in order.
"""

from ebpo.analysis.compare.engine import compare_runs, read_runs

__all__ = ["compare_runs", "read_runs"]
