"""A finished run as ``ebpo compare`` sees it: what it is (estimator, seed, settings) and what it
logged (metric -> step -> value), read from its own files without its trainer.

* **TRL** (``ebpo grpo`` / ``EBPOTrainer``, ``trl grpo`` / ``GRPOTrainer``): ``trainer_state.json``'s
  ``log_history`` in the folder (``ebpo grpo`` / ``EBPOTrainer`` leave it there at the end of
  training) or, when the folder has none, in its last ``checkpoint-N`` (plain TRL writes it only
  into checkpoints: a ``trl grpo`` run with ``save_strategy: "no"`` has no log, and is refused
  saying so). Settings, seed and estimator from
  ``training_args.bin`` read without unpickling (:mod:`.pickle_fields`): ``EBPOConfig``'s
  ``advantage_estimator``; a ``GRPOConfig`` is plain TRL, i.e. GRPO.
* **verl**: the JSON lines of verl's file logger (``{"step": N, "data": {...}}``; the path of
  ``VERL_FILE_LOGGER_PATH``), the file or a folder holding one such ``.jsonl``. Settings from
  Hydra's ``.hydra/config.yaml`` beside it (``algorithm.adv_estimator``); the seed from the
  ``*seed`` keys of ``.hydra/overrides.yaml`` (the ones the user set).
* **ebpo train**: ``run.json``'s config (estimator, seed, settings), ``metrics.jsonl`` and the
  held-out Pass@1 of ``eval_before.json`` (step 0) and ``eval_after.json`` (last step) as
  ``heldout/pass@1``.

Every log is read by :class:`.history.History` (steps whole numbers, a metric logged twice at a
step with two values a conflict). An argument ``LABEL=PATH`` names what the files do not say:
``ESTIMATOR=PATH``, ``ESTIMATOR@SEED=PATH`` or ``@SEED=PATH``. Every JSON / YAML file is read by
:mod:`ebpo.utils.structured_input`; a file that is cut short or not what it should be is a
ValueError naming it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebpo.analysis.compare.history import History
from ebpo.analysis.compare.pickle_fields import Opaque, pickled_fields
from ebpo.utils.checks import is_real
from ebpo.utils.structured_input import parse_json, read_json_file, read_yaml_file

__all__ = ["KINDS", "MAX_LINE", "SEED_DIGITS", "Run", "parse_run_argument", "read_run"]

KINDS = ("trl", "verl", "ebpo-train")
#: the longest line of a JSON-lines log read (a verl step's metrics: a few kB)
MAX_LINE = 16 * 2**20
#: the most digits of a seed read from a run's files (numpy's and torch's seeds are 64-bit at most)
SEED_DIGITS = 20
_SEED = re.compile(rf"[+-]?[0-9]{{1,{SEED_DIGITS}}}")
#: ``ESTIMATOR@SEED=`` / ``ESTIMATOR=`` / ``@SEED=`` before a path
_LABEL = re.compile(
    r"^(?P<estimator>[A-Za-z0-9_.+-]*)(?:@(?P<seed>[A-Za-z0-9_.+-]+))?=(?P<path>.+)$"
)


@dataclass
class Run:
    """One run: ``metrics[name][step] = value`` (NaN where the log held null, NaN or text),
    ``conflicts[name][step]`` the two values of a metric logged twice at a step
    (:mod:`.history`); ``settings`` the flattened configuration, values as text, compared across
    runs; ``unread`` why a file that says the estimator or seed could not be read."""

    path: Path
    kind: str
    estimator: str | None
    seed: str | None
    settings: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, dict[int, float]] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    conflicts: dict[str, dict[int, tuple[float, float]]] = field(default_factory=dict)
    unread: str | None = None

    def keep(self, history: History) -> None:
        """Take the metrics and conflicts of ``history``."""
        self.metrics, self.conflicts = history.metrics(), history.conflicts

    @property
    def name(self) -> str:
        return f"{self.estimator} seed {self.seed}"


def parse_run_argument(argument: str) -> tuple[str | None, str | None, Path]:
    """``(estimator or None, seed or None, path)`` of ``[ESTIMATOR][@SEED]=PATH`` or ``PATH``
    (an existing path with ``=`` in its name stays a path)."""
    match = _LABEL.match(argument)
    if match is None or Path(argument).exists():
        return None, None, Path(argument)
    return match["estimator"] or None, match["seed"], Path(match["path"])


def read_run(argument: str) -> Run:
    """The run ``argument`` names (``[LABEL=]PATH``); ValueError naming the path when it is no
    run of a known kind, a file of it is damaged, or its estimator or seed cannot be read and
    the label does not give them."""
    estimator, seed, path = parse_run_argument(argument)
    where = f"run {str(path)!r}"
    if not path.exists():
        raise ValueError(f"{where}: no such file or folder")
    try:
        run = _read(path, where)
    except OSError as error:
        raise ValueError(f"{where} cannot be read ({error.strerror or error})") from error
    run.estimator = estimator or run.estimator
    run.seed = seed if seed is not None else run.seed
    for what, value in (("estimator", run.estimator), ("seed", run.seed)):
        if value is None:
            why = f" ({run.unread})" if run.unread else ""
            raise ValueError(
                f"{where}: its files do not say its {what}{why}; label it on the command line "
                f"as ESTIMATOR@SEED={path}"
            )
    if not run.metrics:
        raise ValueError(f"{where} logged no metric")
    return run


def _read(path: Path, where: str) -> Run:
    if path.is_file():
        if path.name == "trainer_state.json":
            return _trl_run(path.parent, path, where)
        return _verl_run(path, where)
    if (path / "run.json").is_file():
        return _train_run(path, where)
    state = _trainer_state(path)
    if state is not None:
        return _trl_run(path, state, where)
    logs = [p for p in sorted(path.glob("*.jsonl")) if _is_verl_log(p)]
    if len(logs) == 1:
        return _verl_run(logs[0], where)
    if not logs and (path / "training_args.bin").is_file():
        raise ValueError(
            f"{where}: a TRL run without its log: TRL writes trainer_state.json (log_history) "
            "only into its checkpoints, and this run saved none; train with save_strategy "
            '"steps" or "epoch" (not "no"), or with ebpo grpo, which leaves trainer_state.json '
            "in output_dir at the end whatever the save strategy"
        )
    found = (
        f"{len(logs)} verl metric logs" if logs else "no trainer_state.json, run.json or verl log"
    )
    raise ValueError(f"{where}: not a finished TRL, verl or ebpo train run ({found})")


# ====================================================================== TRL
def _trainer_state(folder: Path) -> Path | None:
    """``folder/trainer_state.json``, else that of the last ``checkpoint-N`` holding one."""
    if (folder / "trainer_state.json").is_file():
        return folder / "trainer_state.json"
    checkpoints = [
        (int(p.name.split("-")[1]), p)
        for p in folder.glob("checkpoint-*")
        if re.fullmatch(r"checkpoint-\d+", p.name) and (p / "trainer_state.json").is_file()
    ]
    return max(checkpoints)[1] / "trainer_state.json" if checkpoints else None


def _trl_run(folder: Path, state_path: Path, where: str) -> Run:
    state = read_json_file(state_path, f"{where}: {str(state_path)!r}")
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise ValueError(f"{where}: {str(state_path)!r} has no log_history list")
    run = Run(folder, "trl", None, None, files=[state_path])
    logged = History()
    for number, entry in enumerate(history):
        place = f"{where}: {str(state_path)!r} log_history entry {number}"
        if not isinstance(entry, dict) or "step" not in entry:
            raise ValueError(f"{place} has no step")
        logged.add(entry["step"], entry, place)
    run.keep(logged)
    arguments = next(
        (p for p in (folder / "training_args.bin", state_path.parent / "training_args.bin")
         if p.is_file()),
        None,
    )  # fmt: skip
    estimator_state = state_path.parent / "ebpo_estimator_state.json"
    if estimator_state.is_file():
        saved = read_json_file(estimator_state, f"{where}: {str(estimator_state)!r}")
        if isinstance(saved, dict) and isinstance(saved.get("estimator"), str):
            run.estimator = saved["estimator"]
    if arguments is not None:
        try:
            class_name, fields = pickled_fields(arguments)
        except ValueError as error:  # the label on the command line says what it cannot
            detail = str(error).removeprefix(repr(str(arguments))).lstrip(": ")
            run.unread = f"cannot read {arguments.name}: {detail}"
            return run
        run.files.append(arguments)
        run.settings = {k: _text(v) for k, v in fields.items() if not k.startswith("_")}
        if "seed" in fields and is_real(fields["seed"]):
            run.seed = str(fields["seed"])
        if isinstance(fields.get("advantage_estimator"), str):
            run.estimator = fields["advantage_estimator"]
        elif run.estimator is None and class_name.endswith("GRPOConfig"):
            run.estimator = "grpo"  # plain TRL: its GRPO
    return run


# ====================================================================== verl
def _is_verl_log(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as f:
        first = f.readline(1_000_000)
    try:
        record = parse_json(first)
    except ValueError:
        return False
    return isinstance(record, dict) and "step" in record and isinstance(record.get("data"), dict)


def _verl_run(path: Path, where: str) -> Run:
    run = Run(path, "verl", None, None, files=[path])
    logged = History()
    for number, record in _json_lines(path, f"{where}: {str(path)!r}"):
        place = f"{where}: {str(path)!r} line {number}"
        if not (isinstance(record, dict) and "step" in record):
            raise ValueError(f"{place} is not {{'step', 'data'}}")
        data = record.get("data")
        if not isinstance(data, dict):
            raise ValueError(f"{place} has no data object")
        logged.add(record["step"], data, place)
    run.keep(logged)
    hydra = next((d for d in (path.parent / ".hydra", path.parent / "hydra" / ".hydra")
                  if (d / "config.yaml").is_file()), None)  # fmt: skip
    if hydra is not None:
        config = read_yaml_file(hydra / "config.yaml", f"{where}: {str(hydra / 'config.yaml')!r}")
        run.files.append(hydra / "config.yaml")
        run.settings = _flatten(config if isinstance(config, dict) else {})
        run.estimator = run.settings.get("algorithm.adv_estimator")
        run.seed, run.unread = _verl_seed(hydra / "overrides.yaml", where)
    return run


def _verl_seed(overrides: Path, where: str) -> tuple[str | None, str | None]:
    """``(seed, why not)``: the values of the ``*seed`` keys the user set (``key=value`` lines of
    overrides.yaml), each a whole number of at most :data:`SEED_DIGITS` digits; else no seed and
    what the file holds instead (a label on the command line gives the seed then)."""
    if not overrides.is_file():
        return None, None
    lines = read_yaml_file(overrides, f"{where}: {str(overrides)!r}")
    seeds = sorted(
        line.lstrip("+~").split("=", 1)
        for line in (lines if isinstance(lines, list) else [])
        if isinstance(line, str) and "=" in line and "seed" in line.split("=", 1)[0].split(".")[-1]
    )
    for key, value in seeds:
        if not _SEED.fullmatch(value):
            shown = (
                repr(value)
                if len(value) <= 40
                else f"{value[:20]!r}... ({len(value):,} characters)"
            )
            return None, (f"{overrides.parent.name}/overrides.yaml sets {key} to {shown}, not a "
                          f"whole number of at most {SEED_DIGITS} digits")  # fmt: skip
    if not seeds:
        return None, None
    return (seeds[0][1] if len(seeds) == 1 else ",".join(f"{k}={v}" for k, v in seeds)), None


# ====================================================================== ebpo train
def _train_run(folder: Path, where: str) -> Run:
    manifest = read_json_file(folder / "run.json", f"{where}: run.json")
    config = manifest.get("config") if isinstance(manifest, dict) else None
    if not (isinstance(manifest, dict) and manifest.get("format") == "ebpo-run" and config):
        raise ValueError(f"{where}: run.json is not an ebpo train manifest")
    run = Run(folder, "ebpo-train", None, None, files=[folder / "run.json"])
    run.settings = _flatten(config)
    run.estimator = run.settings.get("estimator")
    run.seed = run.settings.get("seed")
    metrics = folder / "metrics.jsonl"
    logged = History()
    if metrics.is_file():
        run.files.append(metrics)
        for number, record in _json_lines(metrics, f"{where}: metrics.jsonl"):
            place = f"{where}: {str(metrics)!r} line {number}"
            if not (isinstance(record, dict) and "step" in record):
                raise ValueError(f"{place} is not a record with a step")
            logged.add(record["step"], record, place)
    final = manifest.get("global_step")
    for name, step in (("eval_before.json", 0), ("eval_after.json", final)):
        if (folder / name).is_file() and step is not None:  # no global_step: a run unfinished
            evaluation = read_json_file(folder / name, f"{where}: {name}")
            if isinstance(evaluation, dict) and "overall" in evaluation:
                run.files.append(folder / name)
                place = f"{where}: {str(folder / name)!r} (run.json's global_step)"
                logged.add(step, {"heldout/pass@1": evaluation["overall"]}, place)
    run.keep(logged)
    return run


# ====================================================================== shared
def _json_lines(path: Path, where: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON-lines file, read a line at a time
    (a line of more than :data:`MAX_LINE` bytes refused); a last line that does not parse is
    dropped (no newline after it: the writer was stopped mid-line), any other raises."""
    with open(path, "rb") as f:
        for number in itertools.count(1):
            raw = f.readline(MAX_LINE + 1)
            if not raw:
                return
            if len(raw) > MAX_LINE:
                raise ValueError(f"{where} line {number}: more than {MAX_LINE:,} bytes")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{where} line {number} is not UTF-8 text ({error.reason})"
                ) from None
            if not line.strip():
                continue
            try:
                yield number, parse_json(line, f"{where} line {number}")
            except ValueError:
                if not line.endswith("\n"):
                    return
                raise


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = _text(value)
    return out


def _text(value: Any) -> str:
    """A setting as comparable text: plain values as JSON would write them, others by repr."""
    if isinstance(value, Opaque):
        return repr(value)
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "null"
    return str(value) if isinstance(value, (int, float, str)) else repr(value)
