"""Simulation lab for ``ebpo simulate``: see, rather than take on faith, when EBPO helps.

No language model is involved; every experiment is a function returning plain Python data (lists
of row dictionaries, NumPy arrays) so that ``ebpo bench``, the docs and the tests can reuse them.

Experiments
-----------
* :func:`baseline_quality` (:mod:`~ebpo.lab.simulation.baseline`) — prompt success rates ``θ ~``
  a Beta mixture (:mod:`~ebpo.lab.simulation.scenarios`), Bernoulli rewards, groups of ``G``. For
  every estimator: MSE of its baseline against ``θ``, the fraction of groups with no signal and
  the variance of the advantages, next to Theorem 3.3's Bayes risk
  ``R(w) = (1 − w)²σ²/G + w²τ²``, minimised at ``w = S`` with ``R(S) = (1 − S)σ²/G``.
* :func:`saturation` (:mod:`~ebpo.lab.simulation.saturation`) — all-zero ("saturated failure")
  groups: which estimators still give them a signal (Theorem 3.2: EBPO's raw advantage is
  ``−S·μ``), and what batch normalisation does to it (centring turns the penalty into
  ``−S·r̄_batch``: it only exists relative to the rest of the batch).
* :func:`run_bandit` (:mod:`~ebpo.lab.simulation.bandit`) and the studies built on it
  (:func:`learning_rate_study`, :func:`prior_study` in :mod:`~ebpo.lab.simulation.sweeps`) — a
  many-armed contextual bandit trained by REINFORCE with each estimator's advantages: learning
  curves per estimator and ``G`` at each estimator's own best learning rate (chosen on validation
  seeds) and at an equal one; history / batch / EMA priors on a policy that improves;
  topic-ordered vs shuffled data vs per-cluster priors (Proposition 3.8).

Estimators are named by *specs* (:mod:`~ebpo.lab.simulation.specs`): an estimator name of
:func:`ebpo.estimators.available_estimators` (e.g. ``"ebpo_batch"``), with
optional overrides ``"<name>:option=value,..."`` (e.g. ``"ebpo:prior=ema,half_life=5"``).
:mod:`~ebpo.lab.simulation.report` renders the rows as Markdown tables.
"""

from ebpo.lab.simulation.bandit import (
    ORDERS,
    Bandit,
    BanditConfig,
    data_stream,
    make_bandit,
    run_bandit,
)
from ebpo.lab.simulation.baseline import (
    BASELINE_ESTIMATORS,
    ORACLE,
    baseline_quality,
    closed_form_mse,
)
from ebpo.lab.simulation.common import SIGNAL_TOL
from ebpo.lab.simulation.report import markdown_table
from ebpo.lab.simulation.saturation import SATURATION_ESTIMATORS, penalty_curve, saturation
from ebpo.lab.simulation.scenarios import (
    SCENARIOS,
    BetaMixture,
    mixture_moments,
    sample_success_rates,
    theorem_3_3,
)
from ebpo.lab.simulation.specs import (
    accepts_normalize,
    build_estimator,
    parse_estimator_spec,
    reports_shrinkage,
    with_normalize,
)
from ebpo.lab.simulation.sweeps import PRIOR_VARIANTS, learning_rate_study, prior_study

__all__ = [
    "BASELINE_ESTIMATORS",
    "ORACLE",
    "ORDERS",
    "PRIOR_VARIANTS",
    "SATURATION_ESTIMATORS",
    "SCENARIOS",
    "SIGNAL_TOL",
    "Bandit",
    "BanditConfig",
    "BetaMixture",
    "accepts_normalize",
    "baseline_quality",
    "build_estimator",
    "closed_form_mse",
    "data_stream",
    "learning_rate_study",
    "make_bandit",
    "markdown_table",
    "mixture_moments",
    "parse_estimator_spec",
    "penalty_curve",
    "prior_study",
    "reports_shrinkage",
    "run_bandit",
    "sample_success_rates",
    "saturation",
    "theorem_3_3",
    "with_normalize",
]
