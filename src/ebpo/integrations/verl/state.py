"""Where the running EBPO prior (and every stateful estimator's state, e.g. JSPO++'s smoothing) lives
inside a verl job, and how it is saved, restored and logged.

verl computes advantages in ONE process: the single controller (``TaskRunnerV1`` Ray actor in
0.9.x), which also runs the trainer's ``fit`` loop and builds the checkpoint callback. A
module-level :data:`STORE` in that process therefore holds every estimator the plug-in created,
keyed by ``(estimator name, options)``, so that:

* the advantage function (:mod:`ebpo.integrations.verl.advantage`) finds the same running prior
  from step to step;
* the checkpoint callback (:mod:`ebpo.integrations.verl.checkpoint`) serialises it into each
  ``global_step_N/`` directory as :data:`STATE_FILENAME` and restores it when verl resumes;
* the statistics of each call reach a JSONL file in the run directory (and, when the caller is
  verl's trainer, its ``metrics`` dict, hence verl's tracking backends).

Nothing here imports verl: the store is plain Python, testable without Ray.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from ebpo.estimators import AdvantageEstimator, make_estimator
from ebpo.estimators.ebpo import RENAMED_OPTIONS
from ebpo.estimators.state import current_option_names
from ebpo.utils.files import write_json
from ebpo.utils.structured_input import read_json_file

__all__ = [
    "METRICS_FILENAME",
    "STATE_FILENAME",
    "STATE_FORMAT",
    "STORE",
    "EstimatorStore",
    "estimator_key",
    "non_finite_entry",
]

logger = logging.getLogger(__name__)

STATE_FILENAME = "ebpo_estimator_state.json"
METRICS_FILENAME = "ebpo_metrics.jsonl"
STATE_FORMAT = 1


def estimator_key(name: str, options: Mapping[str, Any]) -> str:
    """Stable key of one estimator configuration (canonical JSON of name and options)."""
    return json.dumps({"name": name, "options": dict(options)}, sort_keys=True, default=str)


class EstimatorStore:
    """Estimators by configuration, their persistence and their metrics sink.

    One instance (:data:`STORE`) per process. Thread-safe for the few operations verl may run
    concurrently (an async checkpoint save while the next step computes advantages).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._estimators: dict[str, tuple[str, dict[str, Any], AdvantageEstimator]] = {}
        self.run_dir: str | None = None  # default home of the metrics JSONL (set by the callback)
        self.restored_from: str | None = None
        self._restored: set[str] = set()  # keys of the estimators the last load() restored
        self._called: set[str] = set()  # keys already seen by first_call()
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ estimators
    def get(self, name: str, options: Mapping[str, Any]) -> AdvantageEstimator:
        """The estimator for this configuration, created on first use."""
        key = estimator_key(name, options)
        with self._lock:
            entry = self._estimators.get(key)
            if entry is None:
                self._warn_if_restored_elsewhere(name, key)
                entry = (name, dict(options), make_estimator(name, **options))
                self._estimators[key] = entry
            return entry[2]

    def _warn_if_restored_elsewhere(self, name: str, key: str) -> None:
        # A resumed run whose options changed would silently start from an empty prior.
        if self.restored_from and any(n == name for n, _, _ in self._estimators.values()):
            logger.warning(
                "ebpo: restored estimator state from %s does not match the current options of %r "
                "(%s); starting that estimator from empty statistics",
                self.restored_from,
                name,
                key,
            )

    def first_call(self, name: str, options: Mapping[str, Any]) -> bool:
        """True the first time it is asked for this configuration in this process (until
        :meth:`clear`)."""
        key = estimator_key(name, options)
        with self._lock:
            if key in self._called:
                return False
            self._called.add(key)
            return True

    def was_restored(self, name: str, options: Mapping[str, Any]) -> bool:
        """Whether the estimator of this configuration came from a state file (:meth:`load`)."""
        return estimator_key(name, options) in self._restored

    def __len__(self) -> int:
        return len(self._estimators)

    def clear(self) -> None:
        """Forget every estimator and the sink configuration (tests, a new run in the same process)."""
        with self._lock:
            self._estimators.clear()
            self.run_dir = None
            self.restored_from = None
            self._restored.clear()
            self._called.clear()
            self._warned.clear()

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state of every estimator in the store."""
        with self._lock:
            return {
                "format": STATE_FORMAT,
                "estimators": [
                    {"name": name, "options": options, "state": est.state_dict()}
                    for name, options, est in self._estimators.values()
                ],
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the store's estimators by those in ``state`` (each rebuilt from its options)."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValueError(
                f"state must be a dict with format={STATE_FORMAT} and a list of estimators, got "
                f"{type(state).__name__} with format {state.get('format') if isinstance(state, Mapping) else None!r}"
            )
        rebuilt: dict[str, tuple[str, dict[str, Any], AdvantageEstimator]] = {}
        for entry in state.get("estimators", []):
            try:
                # a state file written before an option was renamed names it the old way
                name, options = (
                    entry["name"],
                    current_option_names(entry["options"], RENAMED_OPTIONS),
                )
            except (KeyError, TypeError) as error:
                raise ValueError(
                    f"each saved estimator needs 'name', 'options' and 'state'; got {entry!r}"
                ) from error
            est = make_estimator(name, **options)
            est.load_state_dict(entry["state"])
            rebuilt[estimator_key(name, options)] = (name, options, est)
        with self._lock:
            self._estimators = rebuilt
            self._restored = set(rebuilt)

    def save(self, directory: str | os.PathLike[str]) -> str:
        """Write :data:`STATE_FILENAME` into ``directory`` atomically; returns the file path.

        Raises:
            ValueError: the state holds a NaN or an infinity (naming where): such a prior would
                poison every step after a resume, so it is never written (nothing is written).
        """
        path = os.path.join(directory, STATE_FILENAME)
        state = self.state_dict()
        where = non_finite_entry(state)
        if where is not None:
            raise ValueError(
                f"refusing to save EBPO estimator state to {path}: {where} is not finite "
                "(a NaN/inf prior would poison every step after a resume)"
            )
        write_json(path, state, indent=1)  # temporary file + rename: never a truncated state file
        return path

    def load(self, directory: str | os.PathLike[str]) -> bool:
        """Restore from ``directory/STATE_FILENAME``; False (store untouched) if there is none.

        Raises:
            ValueError: the file is not JSON, holds a NaN/inf, or does not describe estimators
                of this version; the message names the file. The store is left untouched.
        """
        path = os.path.join(directory, STATE_FILENAME)
        if not os.path.exists(path):
            return False
        try:
            state = read_json_file(path)  # size, depth, repeated keys bounded
            where = non_finite_entry(state)
            if where is not None:
                raise ValueError(f"{where} is not finite; a saved prior is never NaN or infinite")
            self.load_state_dict(state)
        except ValueError as error:  # json.JSONDecodeError is a ValueError too
            raise ValueError(f"cannot restore EBPO estimator state from {path}: {error}") from error
        self.restored_from = str(directory)
        return True

    # ------------------------------------------------------------------ metrics
    def metrics_path(self, explicit: str | None) -> str | None:
        """``explicit`` if given, else ``run_dir/METRICS_FILENAME`` once a run directory is known."""
        if explicit:
            return str(explicit)
        if self.run_dir:
            return os.path.join(self.run_dir, METRICS_FILENAME)
        return None

    def log_metrics(
        self, record: Mapping[str, Any], explicit_path: str | None = None
    ) -> str | None:
        """Append ``record`` as one JSON line; returns the path written, or None without a sink."""
        path = self.metrics_path(explicit_path)
        if path is None:
            self.warn_once(
                "no-sink",
                "ebpo: no metrics file configured (set algorithm.ebpo.metrics_file or "
                "trainer.checkpoint_callback_class=ebpo.integrations.verl.checkpoint.EBPOCheckpointCallback)",
                level=logging.INFO,
            )
            return None
        line = json.dumps({"time": time.time(), **{k: _jsonable(v) for k, v in record.items()}})
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        with self._lock, open(path, "a") as handle:
            handle.write(line + "\n")
        return path

    def warn_once(self, key: str, message: str, *args: Any, level: int = logging.WARNING) -> bool:
        """Log ``message`` the first time ``key`` is seen in this process (until :meth:`clear`)."""
        with self._lock:
            if key in self._warned:
                return False
            self._warned.add(key)
        logger.log(level, message, *args)
        return True


def non_finite_entry(value: Any, where: str = "state") -> str | None:
    """The path (``state.estimators[0].state...``) of the first NaN/inf number in ``value``, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} = {value}"
    if isinstance(value, Mapping):
        items = ((f"{where}.{key}", item) for key, item in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{where}[{i}]", item) for i, item in enumerate(value))
    else:
        return None
    for path, item in items:
        found = non_finite_entry(item, path)
        if found is not None:
            return found
    return None


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


#: The process-wide store used by the registered verl estimators.
STORE = EstimatorStore()
