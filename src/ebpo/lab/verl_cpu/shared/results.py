"""What one CPU ``fit()`` left behind, for either trainer: the rows the actor trained on at each
step (:class:`StepTrace`), verl's logged metrics and the estimator state (:class:`RunResult`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CONSOLE_LOG",
    "MANIFEST_FILE",
    "METRICS_LOG",
    "ROLLOUT_DIR",
    "TRACE_ENV",
    "RunResult",
    "TRACE_DIR",
    "StepTrace",
    "console_to",
    "read_logged_metrics",
    "read_manifest",
    "read_trace",
]

#: written by the v1 CPU trainer next to the trace: which classes ran (see trainer_v1)
MANIFEST_FILE = "trainer_manifest.json"
#: the directory of the trace and the manifest (set by the smoke in every Ray worker; unset: none)
TRACE_ENV = "EBPO_CPU_TRACE_DIR"
#: verl's rollout dump of a run (``trainer.rollout_data_dir``: ``{step}.jsonl``), in its run dir
ROLLOUT_DIR = "rollouts"
#: the trace and the manifest of a run (:data:`TRACE_ENV`), in its run dir
TRACE_DIR = "trace"
#: verl's console output of a run, in its run dir
CONSOLE_LOG = "verl_console.log"
#: verl's file logger writes here (``VERL_FILE_LOGGER_PATH``), in the run dir
METRICS_LOG = "verl_metrics.jsonl"


@dataclass
class StepTrace:
    """What the actor was updated with at one step, rows in the order verl sent them (for the v1
    path: rank 0's rows, then rank 1's; with verl's sub-steps, ``parameter_sync_step`` > 1, the
    first sub-step's ranks, then the next one's): ``[bs, T]`` advantages and response masks,
    ``[bs]`` outcome rewards, the dataset row id, verl's group id, the sample index and the
    sub-step of each row."""

    step: int
    advantages: Any
    response_mask: Any
    rewards: Any
    prompt_ids: list[str]
    uids: list[str]
    session_ids: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)  # the data-parallel rank of each row
    sub_steps: list[int] = field(default_factory=list)  # verl's sub-step of each row (0 without)
    #: per sub-step: max |log π_rollout − log π_old| over the rows (None: no rollout log-probs)
    rollout_gaps: list[float | None] = field(default_factory=list)

    def sub_step_rows(self) -> list[Any]:
        """``[bs]`` bool masks of the rows of each sub-step, in order: one estimator call each."""
        import torch  # heavy optional import

        index = torch.tensor(self.sub_steps or [0] * len(self.uids))
        return [index == k for k in sorted(set(index.tolist()))]

    @property
    def padding(self) -> Any:
        """``[bs]`` bool: verl's padding rows (uid ``pad…``)."""
        import torch  # heavy optional import

        return torch.tensor([uid.startswith("pad") for uid in self.uids])


@dataclass
class RunResult:
    """What one ``fit()`` left behind."""

    run_dir: str
    trace: list[StepTrace]
    metrics: dict[int, dict[str, float]]  # step -> what verl's file logger wrote
    estimator_state: dict[str, Any]
    seconds: float
    checkpoints: list[str] = field(default_factory=list)
    console: str = ""  # verl's console output (a file), if captured
    launch: Any = None  # the v1 path's Launch (listeners, leftovers, exit code)

    @property
    def ok(self) -> bool:
        return self.launch is None or self.launch.returncode == 0

    @property
    def rollout_dir(self) -> Path:
        """Where verl dumped this run's rollouts (``trainer.rollout_data_dir``): what ``ebpo
        replay`` reads."""
        return Path(self.run_dir) / ROLLOUT_DIR


def read_logged_metrics(path: str) -> dict[int, dict[str, float]]:
    """``{step: data}`` from verl's ``FileLogger`` JSONL (one ``{"step", "data"}`` object a line);
    a step logged twice (validation before training, then the step) is merged."""
    out: dict[int, dict[str, float]] = {}
    if not Path(path).exists():
        return out
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                record = json.loads(line)
                out.setdefault(int(record["step"]), {}).update(record["data"])
    return out


def read_trace(directory: str) -> list[StepTrace]:
    """The per-step, per-rank records the CPU worker wrote (``step_<N>_sub_<k>_rank_<r>.pt``),
    concatenated in sub-step then rank order, steps in order."""
    import torch  # heavy optional import
    import torch.nn.functional as F  # heavy optional import

    by_step: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(Path(directory).glob("step_*_rank_*.pt")):
        record = torch.load(path, weights_only=False)
        by_step.setdefault(int(record["step"]), []).append(record)
    traces = []
    for step, records in sorted(by_step.items()):
        records.sort(key=lambda r: (r.get("sub_step", 0), r["rank"]))
        width = max(r["advantages"].shape[1] for r in records)

        def cat(name: str, records: list[dict[str, Any]] = records, width: int = width) -> Any:
            return torch.cat([F.pad(r[name], (0, width - r[name].shape[1])) for r in records])

        traces.append(
            StepTrace(
                step=step,
                advantages=cat("advantages"),
                response_mask=cat("response_mask"),
                rewards=torch.cat([r["rewards"] for r in records]),
                prompt_ids=[p for r in records for p in r["prompt_ids"]],
                uids=[u for r in records for u in r["uids"]],
                session_ids=[s for r in records for s in r["session_ids"]],
                ranks=[r["rank"] for r in records for _ in r["uids"]],
                sub_steps=[r.get("sub_step", 0) for r in records for _ in r["uids"]],
                rollout_gaps=_gaps_per_sub_step(records),
            )
        )
    return traces


def _gaps_per_sub_step(records: list[dict[str, Any]]) -> list[float | None]:
    gaps: dict[int, float | None] = {}
    for record in records:
        k, gap = record.get("sub_step", 0), record.get("rollout_gap")
        seen = gaps.get(k)
        gaps[k] = gap if seen is None else (seen if gap is None else max(seen, gap))
    return [gaps[k] for k in sorted(gaps)]


def read_manifest(directory: str) -> dict[str, Any]:
    """The v1 trainer's manifest (empty if it was not written)."""
    path = Path(directory) / MANIFEST_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


@contextlib.contextmanager
def console_to(path: str | None) -> Iterator[None]:
    """verl prints its console logger and progress to stdout: into ``path`` (None: leave it)."""
    if path is None:
        yield
        return
    with open(path, "w", encoding="utf-8") as handle, contextlib.redirect_stdout(handle):
        yield
