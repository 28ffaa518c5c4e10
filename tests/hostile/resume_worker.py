"""Worker for test_resume.py: kill ``ebpo train`` at every point of a checkpoint write, resume it,
and compare with the uninterrupted run.

    resume_worker.py PLAN.json RESULTS.json

PLAN: ``{"root": dir, "argv": [ebpo train options, without --output-dir], "saves": [1, 2],
"torn": true}``. The worker imports torch, transformers and TRL once and runs each job in a
forked child (a real process, ended by ``os._exit`` — what ``kill -9`` leaves on disk: no
handler, no ``finally``, no flush of Python buffers). It

1. runs the job uninterrupted, recording every write inside ``checkpoints/`` during each save:
   files opened for writing (audit hook ``open``), renames, removals (``os.remove``,
   ``shutil.rmtree``), directories made, and the writers that do not go through Python's ``open``
   (``torch.save``, safetensors' ``save_file``, the tokenizers library's ``tokenizer.json``),
   plus one event for the end of the save; it checks that every file of the checkpoint came from
   a recorded event (no writer is missed);
2. for each save ``s`` in ``saves`` and each event ``k`` of it: runs the job again and kills it
   when event ``k`` is about to happen (everything before it written, nothing of it); with
   ``torn``, also a variant that first truncates the file written just before (a kill in the
   middle of that write);
3. runs ``ebpo train --resume`` on what is left, and records its exit code, stderr, and whether
   the final model, estimator state and per-step records equal the uninterrupted run's.

Runs in the test's environment (``EBPO_CACHE``, ``HF_HUB_OFFLINE`` are set by the test).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import os
import re
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
import transformers.modeling_utils
from safetensors.torch import load_file
from transformers import PreTrainedTokenizerFast

import ebpo.lab.train.job as job_module
from ebpo.cli import main
from ebpo.integrations.trl import EBPOTrainer
from ebpo.utils.checkpoints import MARKER

#: exit status of a killed child (what a shell reports for SIGKILL)
KILLED = 137
#: a job of a few seconds: what the CLI has no option for
TINY = {"tiny_layers": 1, "tiny_hidden_size": 32, "save_every": 1}


class Injector:
    """Numbers the writes inside ``checkpoints/`` during each save of a job and records them; in a
    kill run, ends the process when event ``kill_at`` (1-based) of save ``save`` is about to happen."""

    def __init__(self, checkpoints: Path) -> None:
        self.root = str(checkpoints.resolve()) + os.sep
        self.save: int | None = None  # the save to kill in
        self.kill_at: int | None = None
        self.torn = False
        self.saves = 0  # saves started
        self.inside = False  # inside a save
        self.count = 0  # events of the current save
        self.events: dict[int, list[list[str]]] = {}  # save -> [[kind, relative path], ...]
        self.last_written: str | None = None
        self.busy = False

    def event(self, kind: str, path: Any) -> None:
        if self.busy or not self.inside or not isinstance(path, (str, os.PathLike)):
            return
        full = os.path.abspath(os.fspath(path))
        if not (full + os.sep).startswith(self.root):
            return
        self.busy = True
        try:
            self.count += 1
            if self.saves == self.save and self.count == self.kill_at:
                self.die()
            self.events.setdefault(self.saves, []).append([kind, full[len(self.root) :]])
            self.last_written = full if kind in WRITES else None
        finally:
            self.busy = False

    def die(self) -> None:
        if self.torn and self.last_written and os.path.isfile(self.last_written):
            os.truncate(self.last_written, os.path.getsize(self.last_written) // 2)
        os._exit(KILLED)

    def audit(self, name: str, args: tuple[Any, ...]) -> None:
        if name == "open":
            path, mode, flags = args
            if isinstance(mode, str):
                writing = any(c in mode for c in "wax+")
            else:
                writing = bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
            if writing:
                self.event("write", path)
        elif name == "os.rename":
            self.event("rename", args[1])
        elif name in ("os.remove", "shutil.rmtree", "os.mkdir", "os.truncate"):
            self.event(name, args[0])

    def install(self, at_save_start: Any = None) -> None:
        """Hook the writers; ``at_save_start(save_number)`` runs before each save."""
        sys.addaudithook(self.audit)
        injector = self

        def wrap(kind: str, function: Any, path_of: Any) -> Any:
            @functools.wraps(function)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                injector.event(kind, path_of(*args, **kwargs))
                return function(*args, **kwargs)

            return wrapper

        torch.save = wrap("torch.save", torch.save, lambda obj, f, *a, **k: f)
        transformers.modeling_utils.safe_save_file = wrap(
            "safetensors",
            transformers.modeling_utils.safe_save_file,
            lambda tensors, filename, *a, **k: filename,
        )
        tokenizer_save = PreTrainedTokenizerFast._save_pretrained
        PreTrainedTokenizerFast._save_pretrained = wrap(  # type: ignore[method-assign]
            "tokenizer.json",
            tokenizer_save,
            lambda self, *a, **k: os.path.join(k.get("save_directory") or a[0], "tokenizer.json"),
        )
        save_checkpoint = EBPOTrainer._save_checkpoint

        def watched_save(trainer: Any, model: Any, trial: Any) -> None:
            injector.saves += 1
            if at_save_start is not None:
                at_save_start(injector.saves)
            injector.inside, injector.count = True, 0
            save_checkpoint(trainer, model, trial)
            injector.event("end of save", injector.root)  # a kill right after the save
            injector.inside = False

        EBPOTrainer._save_checkpoint = watched_save  # type: ignore[method-assign]


#: events that write a file (its content may be torn by a kill before the next event)
WRITES = ("write", "torch.save", "safetensors", "tokenizer.json")


def in_child(job: Any, out: Path) -> int:
    """Run ``job()`` in a forked child with stdout / stderr to ``out``.{out,err}; its exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            for fd, suffix in ((1, "out"), (2, "err")):
                handle = os.open(f"{out}.{suffix}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(handle, fd)
                os.close(handle)
            code = job()
        except BaseException:  # noqa: BLE001 (reported through the exit code and stderr)
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def cli(argv: list[str], run_dir: Path, *, resume: bool = False) -> int:
    """``ebpo train`` on the tiny job (TINY as flags; no plots: they take most of a tiny job's
    time and play no part in what is compared)."""
    job_module.plot_run = lambda *args, **kwargs: []
    tiny = [f"--{name.replace('_', '-')}={value}" for name, value in TINY.items()]
    return main(
        ["train", *argv, *tiny, "--output-dir", str(run_dir), *(["--resume"] if resume else [])]
    )


def record(argv: list[str], run_dir: Path) -> Any:
    """The uninterrupted run, with the events of every save written beside the run directory."""

    def job() -> int:
        injector = Injector(run_dir / "checkpoints")
        injector.install()
        code = cli(argv, run_dir)
        (run_dir.parent / f"{run_dir.name}.events.json").write_text(json.dumps(injector.events))
        return code

    return job


def kills(argv: list[str], run_dir: Path, save: int, points: list[tuple[str, int, bool]]) -> Any:
    """Run the job up to the start of save ``save``; there, for each ``(name, k, torn)`` of
    ``points``: put the run directory back as it was, fork a process that carries on and is killed
    at event ``k``, and copy what it left to ``run_dir.parent / name``. Exit codes go to
    ``<run_dir>.kills.json``."""
    snapshot = run_dir.with_name(f"{run_dir.name}.at-save")
    injector = Injector(run_dir / "checkpoints")

    def at_save_start(number: int) -> None:
        if number != save:
            return
        shutil.copytree(run_dir, snapshot, symlinks=True)
        codes = {}
        for name, k, torn in points:
            shutil.rmtree(run_dir)
            shutil.copytree(snapshot, run_dir, symlinks=True)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # carries on with the save, to be killed at event k
                injector.save, injector.kill_at, injector.torn = save, k, torn
                return
            _, status = os.waitpid(pid, 0)
            codes[name] = os.waitstatus_to_exitcode(status)
            shutil.copytree(run_dir, run_dir.parent / name, symlinks=True)
        Path(f"{run_dir}.kills.json").write_text(json.dumps(codes))
        os._exit(0)

    def job() -> int:
        injector.install(at_save_start)
        cli(argv, run_dir)
        return 98  # not killed: event k never came

    return job


def outcome(run_dir: Path) -> dict[str, Any]:
    """What must equal the uninterrupted run's: the final model, the estimator state, the steps."""
    model = load_file(str(run_dir / "final_model" / "model.safetensors"))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        "model": model,
        "estimator": json.loads((run_dir / "estimator_state.json").read_text()),
        "steps": [r["step"] for r in records if "reward" in r],
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    diffs = [key for key in ("estimator", "steps") if a[key] != b[key]]
    if a["model"].keys() != b["model"].keys() or not all(
        torch.equal(a["model"][k], b["model"][k]) for k in a["model"]
    ):
        diffs.append("model")
    return diffs


def uncovered(run_dir: Path, events: dict[int, list[list[str]]]) -> list[str]:
    """Files of the checkpoints that no recorded event wrote (a writer the injector misses). Only
    ``checkpoint-N/``: the log history and config the trainer leaves beside them at the end of
    ``train()`` are written after the last save, not by one."""
    written = {path for save in events.values() for kind, path in save if kind != "end of save"}
    checkpoints = run_dir / "checkpoints"
    files = {
        str(p.relative_to(checkpoints))
        for p in checkpoints.glob("checkpoint-*/**/*")
        if p.is_file()
    }
    return sorted(files - written)


def fingerprint(run_dir: Path) -> str:
    """The content of ``checkpoints/`` (temporary files' random parts left out): two kill points
    that leave the same fingerprint leave the same run directory, so one resume answers both."""
    digest = hashlib.sha256()
    checkpoints = run_dir / "checkpoints"
    for path in sorted(checkpoints.rglob("*")):
        name = re.sub(r"\.[0-9a-f]{8}\.tmp$", ".tmp", str(path.relative_to(checkpoints)))
        digest.update(name.encode() + b"\0")
        if path.is_file():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def damage(run_dir: Path, save: int, action: str, file: str | None) -> None:
    """Break the complete checkpoint ``checkpoint-<save>`` (or the checkpoints folder) as a hostile
    user, a failing disk or another program would."""
    checkpoints = run_dir / "checkpoints"
    target = checkpoints / f"checkpoint-{save}" / (file or MARKER)
    if action == "delete":
        target.unlink()
    elif action == "truncate":
        os.truncate(target, target.stat().st_size // 2)
    elif action == "append":
        with open(target, "ab") as f:
            f.write(b"\0" * 64)
    elif action == "write":  # replace the content (file and text given as "name=text")
        name, _, text = (file or "").partition("=")
        (checkpoints / f"checkpoint-{save}" / name).write_text(text)
    elif action == "unmark-all":
        for marker in checkpoints.glob(f"checkpoint-*/{MARKER}"):
            marker.unlink()
    elif action == "empty-newer":
        (checkpoints / f"checkpoint-{save + 1}").mkdir()
    elif action == "checkpoints-file":
        shutil.rmtree(checkpoints)
        checkpoints.write_text("not a directory\n")
    else:
        raise ValueError(f"unknown damage {action!r}")


def run(plan: dict[str, Any]) -> dict[str, Any]:
    """Kill at every event of the saves ``plan["saves"]`` (with torn variants if ``plan["torn"]``),
    and apply each of ``plan["damages"]`` (``{"id", "save", "action", "file"}``) to a run killed
    right after that save; resume each and compare."""
    root, argv = Path(plan["root"]), list(plan["argv"])
    reference = root / "reference"
    code = in_child(record(argv, reference), reference)
    if code != 0:
        return {
            "error": f"the uninterrupted run failed ({code}): {Path(f'{reference}.err').read_text()}"
        }
    events = {
        int(k): v for k, v in json.loads(Path(f"{reference}.events.json").read_text()).items()
    }
    expected = outcome(reference)
    results: dict[str, Any] = {
        "events": events,
        "uncovered": uncovered(reference, events),
        "cases": [],
    }
    damages = {d["id"]: d for d in plan.get("damages", [])}
    for save in sorted(set(plan["saves"]) | {d["save"] for d in damages.values()}):
        points = []
        if save in plan["saves"]:
            for k in range(1, len(events[save]) + 1):
                points.append((f"s{save}-k{k}", k, False))
                if plan["torn"] and k > 1 and events[save][k - 2][0] in WRITES:
                    points.append((f"s{save}-k{k}-torn", k, True))
        last = len(events[save])  # killed right after the save: the checkpoint is complete
        points += [(name, last, False) for name, d in damages.items() if d["save"] == save]
        work = root / f"s{save}"
        code = in_child(kills(argv, work, save, points), work)
        if code != 0:
            return {
                "error": f"the kill runs of save {save} failed ({code}): {Path(f'{work}.err').read_text()}"
            }
        killed = json.loads(Path(f"{work}.kills.json").read_text())
        resumed: dict[str, dict[str, Any]] = {}  # fingerprint -> result of its resume
        for name, k, _torn in points:
            run_dir = root / name
            if name in damages:
                damage(run_dir, save, damages[name]["action"], damages[name].get("file"))
            key = name if name in damages else fingerprint(run_dir)
            if key not in resumed:
                code = in_child(
                    lambda run_dir=run_dir: cli(argv, run_dir, resume=True), root / f"{name}.resume"
                )
                resumed[key] = {
                    "code": code,
                    "stderr": Path(f"{root / name}.resume.err").read_text(),
                    "diffs": same(outcome(run_dir), expected) if code == 0 else None,
                    "resumed_as": name,
                }
            kind, path = events[save][k - 1]
            case = {"id": name, "event": f"{kind} {path}", "killed": killed[name], **resumed[key]}
            results["cases"].append(case)
            if case["code"] == 2 or (case["code"] == 0 and not case["diffs"]):
                shutil.rmtree(run_dir, ignore_errors=True)  # failures stay for a look
    return results


if __name__ == "__main__":
    plan_path, results_path = sys.argv[1:3]
    gc.freeze()  # the children's garbage collections skip (and do not copy) what is imported
    Path(results_path).write_text(json.dumps(run(json.loads(Path(plan_path).read_text()))))
