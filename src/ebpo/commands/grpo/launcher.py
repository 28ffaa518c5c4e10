"""``ebpo grpo``'s launcher keys: what ``trl grpo`` hands to ``accelerate launch``, and the launch.

``trl grpo`` (TRL 1.16, ``trl/cli/commands/training.py``) parses its arguments with the script's
parser, takes what that parser does not know — YAML keys and command-line flags alike — as
arguments of ``accelerate launch`` (``num_processes``, ``multi_gpu``, ``config_file``, ...; TRL's own
``accelerate_config`` names a file or one of TRL's profiles, ``trl/accelerate_configs/``:
``multi_gpu``, ``zero1``-``zero3``, ``fsdp1``, ``fsdp2``), and runs accelerate's launcher on its
script with the user's arguments minus those flags; the script re-reads the YAML and ignores the
launcher keys. ``ebpo grpo`` does the same with ``-m ebpo grpo`` as the script
(:func:`launcher_arguments`, :func:`script_arguments`, :func:`plan`, :func:`launch`), reusing
TRL's ``resolve_accelerate_config_argument`` and accelerate's own parser and ``launch_command``.

Where it differs from ``trl grpo``, on purpose:

* A key that is neither a field nor an ``accelerate launch`` option is refused in one line naming
  it (TRL hands it to accelerate, whose parser stops with a usage message).
* A YAML flag (``multi_gpu: true``) is the flag; ``false`` leaves it out (TRL passes
  ``--multi_gpu True``, and ``True`` becomes the script accelerate runs).
* Several processes on CPUs: where accelerate would start ONE process although ``num_processes``
  asks for more — no GPU (or ``--cpu``) and nothing saying how to distribute — ``ebpo grpo`` starts
  them with accelerate's multi-process launcher (torchrun) and ``ACCELERATE_USE_CPU=1``: N
  processes, gloo (``accelerate launch --cpu`` would need MPI for more than one).
* Without any launcher key, no accelerate default config file and at most one accelerator device,
  ``accelerate launch`` would start one plain process: ``ebpo grpo`` runs in its own process
  instead (same result; ``trl grpo`` always starts a second interpreter).
* Inside a launch (``accelerate launch -m ebpo grpo``, torchrun, or a process ``ebpo grpo``
  started) the launcher keys are checked and ignored, as TRL's script ignores them.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, NoReturn

from accelerate.commands.config import default_config_file
from accelerate.commands.launch import launch_command, launch_command_parser
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from trl.cli.accelerate_config import resolve_accelerate_config_argument

from ebpo.commands.grpo.launch_values import (
    accelerator_count,
    check_accelerate_config,
    check_process_counts,
    flag_value,
)
from ebpo.estimators import available_estimators, estimator_options
from ebpo.estimators.ebpo import RENAMED_OPTIONS

__all__ = [
    "LAUNCHED_ENV",
    "LAUNCHER_PID_ENV",
    "Launch",
    "accelerator_count",
    "die_with_launcher",
    "holds_output_dir",
    "launch",
    "launch_config",
    "launcher_arguments",
    "launches_on_cpus",
    "process_counts",
    "plan",
    "script_arguments",
    "trl_profiles",
    "under_launcher",
]

#: set in the environment of the processes ``ebpo grpo`` launches (they must not launch again)
LAUNCHED_ENV = "EBPO_GRPO_LAUNCHED"
#: the pid of the ``ebpo grpo`` that launched a process (it holds ``output_dir`` for them all)
LAUNCHER_PID_ENV = "EBPO_GRPO_LAUNCHER_PID"
#: ``prctl`` option: the signal a process gets when its parent dies (linux/prctl.h)
_PR_SET_PDEATHSIG = 1
#: TRL's name for an accelerate config (a file or a profile of ``trl/accelerate_configs``)
ACCELERATE_CONFIG = "--accelerate_config"
#: ``accelerate launch`` options that would replace what ``ebpo grpo`` launches
NOT_LAUNCHER_KEYS = ("-m", "--module", "--no_python", "-h", "--help")
#: environment variables that say this process was started by a launcher
_LAUNCHER_MARKS = (LAUNCHED_ENV, "LOCAL_RANK", "ACCELERATE_DYNAMO_USE_FULLGRAPH")
#: what ``ebpo grpo`` puts after accelerate's own arguments
MODULE_ARGS = ("-m", "ebpo", "grpo")


@dataclass(frozen=True)
class Launch:
    """An ``accelerate launch`` of ``-m ebpo grpo``: its arguments (TRL's ``--accelerate_config``
    resolved), each process's arguments after ``grpo``, and what to add to their environment."""

    args: list[str]
    script_argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def command(self) -> str:
        """The equivalent command line (for messages and the dry run)."""
        env = " ".join(
            f"{k}={v}" for k, v in self.env.items() if k not in (LAUNCHED_ENV, LAUNCHER_PID_ENV)
        )
        words = [env, "accelerate launch", *self.args, *MODULE_ARGS, *self.script_argv]
        return " ".join(w for w in words if w)


def trl_profiles() -> list[str]:
    """The accelerate configs TRL ships, by the name ``accelerate_config`` takes."""
    folder = resources.files("trl.accelerate_configs")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def launcher_arguments(
    config_rest: Sequence[str], cli_rest: Sequence[str], source: str
) -> list[str]:
    """``accelerate launch`` arguments from what ``trl grpo``'s parser left over: ``config_rest``
    (``["--key", "value", ...]`` from the YAML file ``source``, as TRL builds it) and ``cli_rest``
    (command-line tokens). TRL's ``--accelerate_config`` becomes ``--config_file PATH``.

    Raises:
        ValueError: a key or flag that is neither a field nor a launcher option (all of them named),
            a YAML flag that is not true / false, a launcher option ``ebpo grpo`` sets itself, a
            bad value (accelerate's parser), an unknown ``accelerate_config``.
    """
    options = _parser()._option_string_actions
    launch_args: list[str] = []
    unknown_keys: list[str] = []
    for key, value in zip(config_rest[::2], config_rest[1::2], strict=True):
        action = options.get(key)
        if key != ACCELERATE_CONFIG and action is None:
            unknown_keys.append(key[2:])
            continue
        _check_settable(key, f"{key[2:]} in {source}")
        if action is not None and action.nargs == 0:  # a flag: true gives it, false leaves it out
            if value not in ("True", "False"):
                raise ValueError(
                    f"{key[2:]} in {source} is a flag of accelerate launch: write it as a YAML "
                    f"boolean, unquoted ({key[2:]}: true or {key[2:]}: false), got {_as_written(value)}"
                )
            launch_args += [key] if value == "True" else []
        else:
            launch_args += [key, value]
    if unknown_keys:
        raise ValueError(_unknown(f"key(s) {unknown_keys} in {source}", unknown_keys))
    launch_args += _cli_launcher_arguments(list(cli_rest), options)
    return _resolve_accelerate_config(launch_args)


def script_arguments(argv: Sequence[str], cli_rest: Sequence[str]) -> list[str]:
    """``argv`` without the launcher tokens ``cli_rest`` (an ordered subsequence of it): what each
    launched process gets, as ``trl grpo`` hands its script the arguments minus the launcher's."""
    rest = iter(cli_rest)
    pending = next(rest, None)
    kept = []
    for token in argv:
        if pending is not None and token == pending:
            pending = next(rest, None)
        else:
            kept.append(token)
    return kept


def under_launcher(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process was started by a launcher (accelerate, torchrun, ``ebpo grpo``)."""
    environ = os.environ if environ is None else environ
    return any(mark in environ for mark in _LAUNCHER_MARKS)


def plan(
    launch_args: Sequence[str],
    script_argv: Sequence[str],
    environ: Mapping[str, str] | None = None,
) -> Launch | None:
    """The launch ``trl grpo`` would make with ``launch_args``, or None when this process should run
    the training itself: inside a launch already, or when accelerate would start one plain process
    (no launcher argument, no accelerate default config file, at most one accelerator device)."""
    environ = os.environ if environ is None else environ
    if under_launcher(environ):
        return None
    args = list(launch_args)
    has_default_config = os.path.isfile(default_config_file)
    if not args and not has_default_config and accelerator_count() <= 1:
        return None
    env = {LAUNCHED_ENV: "1"}
    parsed = _parse(args)
    distributes = any(
        getattr(parsed, name)
        for name in ("multi_gpu", "use_deepspeed", "use_fsdp", "use_megatron_lm", "tpu")
    )
    no_config = parsed.config_file is None and (parsed.cpu or not has_default_config)
    on_cpus = parsed.cpu or accelerator_count() == 0
    if (
        no_config
        and not distributes
        and on_cpus
        and (parsed.num_processes or 1) > 1
        and (parsed.num_machines or 1) == 1
        and parsed.mpirun_hostfile is None
    ):
        # accelerate would start ONE process here (its CPU launcher needs MPI for more): start N
        # with the multi-process launcher, each on the CPU (gloo)
        args = [a for a in args if a != "--cpu"] + ["--multi_gpu"]
        env["ACCELERATE_USE_CPU"] = "1"
    return Launch(args=args, script_argv=list(script_argv), env=env)


def launch(plan: Launch) -> int:
    """Run ``plan`` with accelerate's ``launch_command`` (as ``trl grpo`` does); the exit code of the
    launched processes (the first failing one's)."""
    args = _parser().parse_args([*plan.args, *MODULE_ARGS, *plan.script_argv])
    env = {**plan.env, LAUNCHER_PID_ENV: str(os.getpid())}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # every launcher copies this process's environment
    try:
        launch_command(args)
    except subprocess.CalledProcessError as error:  # the single-process launcher
        return error.returncode or 1
    except ChildFailedError as error:  # torchrun: the launched processes' failures
        return next((f.exitcode for f in error.failures.values() if f.exitcode), 1)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return 0


def holds_output_dir(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process holds ``output_dir`` for the run (:mod:`ebpo.utils.run_lock`): yes,
    unless ``ebpo grpo`` launched it (its launcher holds the folder for every rank, which shares
    that claim) or another launcher did and it is not the launch's first process (``RANK`` 0)."""
    environ = os.environ if environ is None else environ
    return LAUNCHED_ENV not in environ and environ.get("RANK", "0") == "0"


def die_with_launcher(environ: Mapping[str, str] | None = None) -> None:
    """In a process that ``ebpo grpo`` launched: have it killed (SIGKILL) when the process that
    started it dies, however that dies (``kill -9`` of ``ebpo grpo`` included), so that no rank
    trains on alone, re-parented, writing into the run. Linux: the kernel's parent-death signal
    (``prctl(PR_SET_PDEATHSIG)``); elsewhere a daemon thread watching the parent. A launcher that
    died before the request was made ends this process at once. Nothing outside such a process."""
    environ = os.environ if environ is None else environ
    if LAUNCHED_ENV not in environ or LAUNCHER_PID_ENV not in environ:
        return
    parent = os.getppid()
    if not _parent_death_signal():
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    # the launcher died before the request (the launcher may be pid 1 itself, in a container)
    if os.getppid() != parent or not _alive(int(environ[LAUNCHER_PID_ENV])):
        os.kill(os.getpid(), signal.SIGKILL)


def _parent_death_signal() -> bool:
    """Ask the kernel for SIGKILL when the parent dies; whether it was granted (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0)


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process of that number: alive
        return True
    return True


# ---------------------------------------------------------------------- helpers
def _parser() -> argparse.ArgumentParser:
    """accelerate's own ``accelerate launch`` parser, raising ValueError instead of exiting."""
    parser = launch_command_parser()

    def error(message: str) -> NoReturn:
        raise ValueError(f"accelerate launch: {message}")

    parser.error = error
    return parser


def _parse(args: Sequence[str]) -> argparse.Namespace:
    return _parser().parse_args([*args, *MODULE_ARGS])


def _check_settable(key: str, where: str) -> None:
    if key in NOT_LAUNCHER_KEYS:
        raise ValueError(
            f"{where}: ebpo grpo launches `-m ebpo grpo` itself; remove {key} (to launch another "
            "script, use accelerate launch directly)"
        )


def _cli_launcher_arguments(tokens: list[str], options: Mapping[str, Any]) -> list[str]:
    """Check command-line tokens the script's parser left: launcher options and their values
    (``--accelerate_config=X`` split in two, the form TRL's resolver reads)."""
    unknown: list[str] = []
    out: list[str] = []
    i = 0
    while i < len(tokens):
        name, has_value, value = tokens[i].partition("=")
        if not name.startswith("-"):
            raise ValueError(
                f"unexpected argument {tokens[i]!r}: ebpo grpo takes --flags (and --config FILE) only"
            )
        action: Any = options.get(name)  # None past here only for ACCELERATE_CONFIG
        if name != ACCELERATE_CONFIG and action is None:
            unknown.append(name)  # and its value, if one follows
            following = tokens[i + 1] if i + 1 < len(tokens) else "-"
            i += 1 if has_value or following.startswith("-") else 2
            continue
        _check_settable(name, name)
        takes_value = name == ACCELERATE_CONFIG or action.nargs != 0
        step = 1 if has_value or not takes_value else 2
        out += [name, value] if name == ACCELERATE_CONFIG and has_value else tokens[i : i + step]
        i += step
    if unknown:
        raise ValueError(_unknown(f"flag(s) {unknown}", unknown))
    return out


def _as_written(value: str) -> str:
    """A YAML value as TRL hands it on (``str(value)``): ``'true'`` came quoted, a string."""
    lowered = value.lower()
    if lowered in ("true", "false", "yes", "no", "on", "off"):
        return f"the string {value!r} (quoted in the file)"
    return repr(value)


def _unknown(what: str, names: Sequence[str] = ()) -> str:
    return (
        f"unknown {what}{_estimator_option_hint(names)}: neither an argument of trl grpo "
        "(GRPOConfig with EBPOConfig's fields, "
        "ModelConfig, the script's and the datasets' arguments) nor an option of accelerate launch; "
        "`ebpo grpo --help` lists the arguments, `accelerate launch --help` the launcher's options"
    )


def _estimator_option_hint(names: Sequence[str]) -> str:
    """Where the first of ``names`` that is an estimator's option (or its old name) belongs."""
    options = {o for name in available_estimators() for o in estimator_options(name)}
    for key in (name.lstrip("-") for name in names):
        new = RENAMED_OPTIONS.get(key, key)
        if new in options:
            renamed = f", renamed {new!r} since ebpo 0.1.0" if new != key else ""
            return (f" ({key!r} is an estimator's option{renamed}: it goes in estimator_options, "
                    f"e.g. estimator_options: {{{new}: ...}})")  # fmt: skip
    return ""


def _resolve_accelerate_config(args: list[str]) -> list[str]:
    """TRL's ``--accelerate_config NAME_OR_FILE`` → ``--config_file PATH``; then accelerate's parser
    checks every value."""
    try:
        resolved = resolve_accelerate_config_argument(args)
    except ValueError as error:
        raise ValueError(f"accelerate_config: {error} TRL's profiles: {trl_profiles()}") from error
    # before accelerate's parser: a count out of bounds is refused before anything is built for it
    check_process_counts(resolved, launch_config(resolved, ACCELERATE_CONFIG in args))
    _parse(resolved)
    return resolved


def launch_config(launch_args: Sequence[str], from_trl_name: bool = False) -> Any:
    """The accelerate config file of ``launch_args`` (``--config_file``) as accelerate's loader
    reads it, checked (:func:`.launch_values.check_accelerate_config`); None without one."""
    config_file = flag_value(launch_args, "--config_file")
    if config_file is None:
        return None
    return check_accelerate_config(
        config_file, "accelerate_config" if from_trl_name else "config_file"
    )


def process_counts(launch_args: Sequence[str]) -> tuple[dict[str, int], Any]:
    """``(num_processes / num_machines given, the accelerate config or None)`` of resolved
    ``accelerate launch`` arguments (:func:`launcher_arguments`' result)."""
    config = launch_config(launch_args)
    return check_process_counts(launch_args, config), config


def launches_on_cpus(launch_args: Sequence[str], config: Any) -> bool:
    """Whether the processes of ``launch_args`` run on CPUs: ``--cpu``, ``use_cpu`` in the
    accelerate config, or no accelerator on this machine."""
    return (
        "--cpu" in launch_args
        or bool(getattr(config, "use_cpu", False))
        or accelerator_count() == 0
    )
