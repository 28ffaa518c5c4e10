"""``ebpo replay``: a finished run's own rewards through every estimator — would EBPO have helped?

It reads the rollouts a run wrote (verl's ``trainer.rollout_data_dir`` dumps, or a table of prompt
id, reward and step from any trainer), forms each step's groups as the trainer did, and feeds the
steps in order to GRPO and the other estimators asked for, the stateful ones keeping their state
from step to step. Per step and for the run it reports the all-fail and all-pass groups, the
responses each estimator gives a signal (and those GRPO leaves at zero), shrinkage, advantage
moments and the difference to GRPO; docs/replay.md shows a replay and how to read it.

=============  ===============================================================================
module         what it holds
=============  ===============================================================================
``rows``       the rules of a row (the three columns, a checked block of rows, the reward,
               step and key checks)
``readers``    three columns of one file (JSON lines, CSV, Parquet), in chunks, every value
               checked; errors name the file and line
``sources``    the user's paths → files in step order → one :class:`StepBatch` per step (verl's
               uid reduced to the prompt, sessions counted once, padding rows dropped)
``engine``     :class:`Replay` (the estimators, fed step by step) and the per-step and run
               measurements (:func:`summarize`)
``report``     ``replay.json`` (schema, format version), ``replay.csv``, the console table, the
               verdict line
``plots``      the PNGs
=============  ===============================================================================

It imports the estimators, the utilities and pyarrow (the ``data`` extra), never a trainer: a
replay of a verl run needs no verl.
"""
