"""Reading a saved estimator state back: the checks that refuse what no run writes.

An estimator's ``load_state_dict`` (the template in :class:`~ebpo.estimators.base.AdvantageEstimator`)
reads a state that went through a checkpoint, a JSON file or a user's hands. Every value is
checked before any of it is used, so that an edited or foreign state fails with a ``ValueError``
naming the key, and never leaves statistics that would poison later calls (a count past 2**53, a
mean whose next update overflows float64). Nothing here runs when advantages are computed.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from ebpo.estimators.validation import check_json_label
from ebpo.utils.checks import short_repr

__all__ = [
    "MAX_STATE_COUNT",
    "MAX_STATE_MEAN",
    "check_moments",
    "cluster_entries",
    "check_saved_options",
    "check_state_keys",
    "check_state_owner",
    "check_step_count",
    "current_option_names",
]

#: The largest count (of responses, groups or steps) a loaded state may hold: 2**53, the last
#: integer from which float64 still counts exactly (2**53 + 1 rounds back to 2**53, so a count
#: there stops growing, and the running sums lose the weight of every new observation). A run
#: would need 9e15 responses to get there: a state beyond it (``count: 1e308``, ``steps: 10**30``)
#: was not written by a run.
MAX_STATE_COUNT = 2**53

#: The largest |mean| (and standard deviation) a loaded state may describe. Folding a batch into
#: running moments adds ``δ²·w`` to M2, with ``δ`` the difference of the means and ``w`` up to the
#: batch size: at 1e150 that is 1e300 per unit of weight, which leaves room for batches of 1e8
#: responses; at 1e154 and beyond it overflows float64 on the first ordinary batch, so a state
#: there (``mean: 1e308``) would make every later call fail. Rewards the batch checks accept
#: (|r| below ~1e154) but that push a prior past this bound are refused at load with the rest.
MAX_STATE_MEAN = 1e150


def check_state_keys(path: str, state: Any, allowed: Sequence[str]) -> Mapping[str, Any]:
    """``state`` (the part of a saved state at the dotted key ``path``, e.g. ``global.rewards``;
    ``""``: the whole state) if it is a mapping holding no key but ``allowed``; ValueError naming
    the path and the keys expected otherwise. A key no ``state_dict()`` writes is refused rather
    than dropped: the state was edited, or written by something else."""
    where = path or "the state"
    if not isinstance(state, Mapping):
        raise ValueError(
            f"{where} must be a dict with keys {list(allowed)}, got {type(state).__name__} "
            f"{short_repr(state)}"
        )
    for key in state:
        if key not in allowed:
            dotted = f"{path}.{key}" if path else str(key)
            raise ValueError(
                f"unknown key {dotted!r} in the state (expected {list(allowed)} there)"
            )
    return state


def check_state_owner(name: str, state: Any) -> None:
    """``state`` must be a dict saved by the estimator called ``name``."""
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    if state.get("estimator") != name:
        raise ValueError(
            f"state belongs to estimator {state.get('estimator')!r}, cannot load it into {name!r}"
        )


def check_saved_options(estimator: Any, state: Mapping[str, Any], names: Sequence[str]) -> None:
    """Refuse a state of ``estimator`` (an :class:`~ebpo.estimators.base.AdvantageEstimator`)
    saved under different values of the options ``names`` (those that define what the saved
    statistics mean), and one whose options hold a name or a value the constructor refuses
    (``eps: NaN``: no run saved it)."""
    saved = state.get("options")
    if not isinstance(saved, Mapping):
        raise ValueError(
            "state has no 'options' dict (expected the one state_dict() writes, with "
            f"{list(names)}); got {saved!r}"
        )
    cls = type(estimator)
    try:  # the options our own state_dict() writes
        check_state_keys("options", saved, list(estimator.options()))
    except ValueError as error:
        raise ValueError(f"invalid {estimator.name} state: {error}") from error
    constructor_options = cls.option_defaults()
    for name, value in saved.items():
        if name not in constructor_options:  # recorded but fixed (ebpo_bb's prior_mean_from)
            continue
        try:  # the constructor's own check of the value (one option at a time: it names it)
            cls(**{name: value})
        except ValueError as error:
            raise ValueError(f"invalid {estimator.name} state: options.{name}: {error}") from error
    for name in names:
        ours = getattr(estimator, name)
        if name not in saved:
            raise ValueError(
                f"state does not record option {name!r}; this estimator has {name}={ours!r}"
            )
        if saved[name] != ours:
            raise ValueError(
                f"state was saved with {name}={saved[name]!r} but this estimator has "
                f"{name}={ours!r}; build the estimator with {name}={saved[name]!r} to load it"
            )


def check_step_count(steps: object) -> int:
    """``steps`` of a saved state: an integer in ``[0, MAX_STATE_COUNT]``; ValueError otherwise."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {_shown(steps)}")
    if steps > MAX_STATE_COUNT:
        raise ValueError(
            "steps must be at most 2**53 (the most float64 counts exactly; no run takes more "
            f"steps), got {_shown(steps)}"
        )
    return steps


def check_moments(
    state: Any, name: str = "moments", *, whole_count: bool = False
) -> tuple[float, float, float]:
    """``(count, mean, m2)`` of saved running moments (``{"count", "mean", "m2"}``), refusing what
    no sequence of updates can produce: another key; a non-finite or negative count or M2, a
    count above :data:`MAX_STATE_COUNT` (or, with ``whole_count``, one that is not a whole
    number: what a stream without decay counts), or a mean or M2 without any observation; and
    moments so large that the next update would overflow float64: ``|mean|`` above
    :data:`MAX_STATE_MEAN`, or a variance ``m2 / count`` above its square. ``name`` (e.g.
    ``global.rewards``) names the statistic in the messages."""
    check_state_keys(name, state, ("count", "mean", "m2"))
    try:
        count, mean, m2 = (_as_float(state[key]) for key in ("count", "mean", "m2"))
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        raise ValueError(
            f"running moments state must have finite numbers 'count', 'mean', 'm2' ({name}); got {state!r}"
        ) from error
    if not all(math.isfinite(v) for v in (count, mean, m2)):
        raise ValueError(f"running moments state must be finite ({name}); got {state!r}")
    if count < 0 or m2 < 0:
        raise ValueError(
            f"running moments state must have count >= 0 and m2 >= 0 ({name}); got {state!r}"
        )
    if count > MAX_STATE_COUNT:
        raise ValueError(
            f"{name}.count = {count!r} is more than 2**53 (the most responses or "
            "groups float64 counts exactly); no run counts that far"
        )
    if whole_count and not count.is_integer():
        raise ValueError(
            f"{name}.count = {count!r} must be a whole number: without decay "
            "(prior 'history' or 'batch') every response and group counts 1"
        )
    if count == 0 and (mean != 0 or m2 != 0):
        raise ValueError(
            f"running moments state with count 0 must have mean 0 and m2 0 ({name}); got {state!r}"
        )
    if abs(mean) > MAX_STATE_MEAN:
        raise ValueError(
            f"{name}.mean = {mean!r} is too large: |mean| must be at most "
            f"{MAX_STATE_MEAN:g}, or the next update overflows float64 (every later call "
            "would fail)"
        )
    if count > 0 and not m2 / count <= MAX_STATE_MEAN**2:
        raise ValueError(
            f"{name}.m2 = {m2!r} is too large for count {count!r}: the "
            f"variance m2/count must be at most {MAX_STATE_MEAN**2:g}, or later updates "
            "overflow float64"
        )
    return count, mean, m2


def cluster_entries(entries: Any) -> list[tuple[Hashable, Any]]:
    """The ``(label, prior state)`` pairs of a saved ``clusters`` list (EBPO's
    ``[[label, prior state], ...]``): every entry a pair, every label JSON-safe
    (:func:`~ebpo.estimators.validation.check_json_label`) and none twice. JSON turns tuples into
    lists, at every depth: a label comes back as the tuple it was saved as."""
    if not isinstance(entries, list):
        raise ValueError(
            f"'clusters' must be a list of [label, prior state] pairs, got {type(entries).__name__}"
        )
    pairs: dict[Hashable, Any] = {}
    for entry in entries:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise ValueError(
                f"each entry of 'clusters' must be a [label, prior state] pair, got {entry!r}"
            )
        check_json_label("cluster", entry[0])
        label = _as_tuples(entry[0])
        if label in pairs:
            raise ValueError(f"cluster label {label!r} appears twice in 'clusters'")
        pairs[label] = entry[1]
    return list(pairs.items())


def current_option_names(options: Mapping[str, Any], renamed: Mapping[str, str]) -> dict[str, Any]:
    """``options`` (a saved state's, or saved estimator options) with the old names of
    ``renamed`` (old name -> new name, an estimator's ``renamed_options``) replaced by the new
    ones; ValueError when an old name's new name is there too (no state records both: which
    value is the run's?)."""
    both = [old for old, new in renamed.items() if old in options and new in options]
    if both:
        old = both[0]
        raise ValueError(
            f"the saved options hold both {old!r} (the option's name in ebpo 0.1.0) and "
            f"{renamed[old]!r} (its name now), with values {options[old]!r} and "
            f"{options[renamed[old]]!r}: a state records one of them; remove the other"
        )
    return {
        renamed[k] if k in renamed and renamed[k] not in options else k: v
        for k, v in options.items()
    }


def _as_tuples(label: Any) -> Hashable:
    return tuple(_as_tuples(item) for item in label) if isinstance(label, (list, tuple)) else label


def _shown(value: object) -> str:
    # repr() of an integer of more than 4,300 digits raises ValueError
    if isinstance(value, int) and not -(10**20) < value < 10**20:
        try:
            return f"an integer of {len(str(abs(value)))} digits"
        except ValueError:  # beyond Python's int-to-str limit
            return "an integer of more than 4,300 digits"
    return repr(value)


def _as_float(value: object) -> float:
    # float("3") and float(True) would accept a string or a bool; a saved moment is a number.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {type(value).__name__} {value!r}")
    return float(value)  # OverflowError for an int beyond float64 (10**400)
