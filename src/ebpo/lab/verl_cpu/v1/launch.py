"""``python -m verl.trainer.main_ppo`` on a CPU, as a user types it, watched from outside.

:func:`v1_overrides` is the command line: verl's own ``ppo_trainer.yaml`` defaults (so
``trainer.use_v1=True`` and the v1 ``sync`` loop) plus the keys that plug the CPU pieces into
verl's hooks (:mod:`~ebpo.lab.verl_cpu.v1.plugin`) and size a tiny run
(:class:`~ebpo.lab.verl_cpu.shared.run_spec.RunSpec`). :func:`run_main_ppo` runs it in
a subprocess of its own session — ``main_ppo.main`` composes the config with Hydra, runs verl's
``validate_config``, starts Ray (``ray_kwargs.ray_init``) and the ``TaskRunnerV1`` actor — and
meanwhile records every TCP port that the process tree listens on (Ray's head, its agents, the
workers, TransferQueue's ZMQ servers, gloo). When the run ends, fails or times out, every process
of the tree still alive is killed and reported.

Everything listens on 127.0.0.1 because Ray is told to treat this machine as a single-node
cluster (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``): Ray then takes 127.0.0.1 as the node address
(by default it takes the address of the first network interface) and binds its gRPC servers to
it; TransferQueue binds its ZMQ sockets, and verl its gloo rendezvous, to the node address.

Sizes of the actors (logical Ray CPUs, see :data:`RAY_CPUS`): TransferQueue starts a controller
and ``num_data_storage_units`` storage actors (verl's default: 8) that each ask Ray for one CPU,
on top of verl's TaskRunner, agent-loop, reward and load-balancer actors. On a Ray instance sized to
the machine's 2 cores, ``tq.init`` therefore waits forever for CPUs (``PENDING_CREATION`` actors,
nothing logged). The smoke runs one storage unit and gives Ray 8 logical CPUs; the processes
still share the 2 cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ebpo.lab.verl_cpu.shared.run_spec import LOOP_OVERRIDES, RunSpec

__all__ = [
    "LOCAL_ADDRESSES",
    "RAY_CPUS",
    "Launch",
    "Listener",
    "run_main_ppo",
    "v1_overrides",
]

#: logical CPUs of the run's Ray instance (see module docstring)
RAY_CPUS = 8
#: the addresses a listening socket of the run may have
LOCAL_ADDRESSES = frozenset({"127.0.0.1", "::ffff:127.0.0.1", "::1"})
PLUGIN_MODULE = "ebpo.lab.verl_cpu.v1.plugin"
REPLAY_MODULE = "ebpo.lab.verl_cpu.v1.replay"
#: the process environment of the run, forwarded to every Ray worker
RUN_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "VERL_PLATFORM": "ebpo_cpu",
    "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE,
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "GLOO_SOCKET_IFNAME": "lo",
}
#: the overrides of every CPU run of verl's default path (sizes and files come separately)
V1_OVERRIDES = (
    *LOOP_OVERRIDES,
    "trainer.n_gpus_per_node=2",
    "trainer.v1.trainer_mode=ebpo_cpu_sync",
    f"trainer.v1.sampler.custom_sampler.path=pkg://{REPLAY_MODULE}",
    "trainer.v1.sampler.custom_sampler.name=OrderedReplayBuffer",
    "+trainer.v1.sampler.sampler_kwargs.poll_interval=0.2",
    "actor_rollout_ref.rollout.name=ebpo_cpu",
    # one rollout replica over both actor ranks: one server
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.full_determinism=True",
    "actor_rollout_ref.rollout.calculate_log_probs=True",
    "actor_rollout_ref.rollout.agent.default_agent_loop=ebpo_cpu_single_turn",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    # a new local Ray instance even when this machine runs a cluster or RAY_ADDRESS is set
    "+ray_kwargs.ray_init.address=local",
    f"ray_kwargs.ray_init.num_cpus={RAY_CPUS}",
    "+ray_kwargs.ray_init.include_dashboard=False",
    f"+ray_kwargs.ray_init.object_store_memory={200 * 1024**2}",
)


def _env_override(key: str, value: str) -> str:
    """``+ray_kwargs.ray_init.runtime_env.env_vars.KEY='value'`` (quoted: Ray wants strings)."""
    return f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}='{value}'"


def v1_overrides(
    spec: RunSpec,
    *,
    ray_temp_dir: str,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """The ``main_ppo`` overrides of the CPU run ``spec`` (see module docstring): one PPO
    mini-batch a sub-step (a step without ``parameter_sync_step``), in one micro-batch (log-probs
    of the actor and of a reference policy too); ``env`` is added to every Ray worker's
    environment; the spec's ``extra`` comes last (and wins). The CPU trainer runs verl's ``sync``
    mode, so its sub-steps are ``trainer.v1.sync.parameter_sync_step``."""
    sub_steps = spec.parameter_sync_step
    return [
        *V1_OVERRIDES,
        *spec.overrides(),
        *([f"+trainer.v1.sync.parameter_sync_step={sub_steps}"] if sub_steps > 1 else []),
        f"actor_rollout_ref.actor.ppo_mini_batch_size={spec.batch_size // sub_steps}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={spec.rows}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={spec.rows}",
        # the reference policy's log-probs (recipes with a KL loss), in one micro-batch too
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={spec.rows}",
        f"+ray_kwargs.ray_init._temp_dir={ray_temp_dir}",
        f"hydra.run.dir={os.path.join(spec.run_dir, 'hydra')}",
        *(_env_override(key, value) for key, value in {**RUN_ENV, **dict(env or {})}.items()),
        *spec.extra,
    ]


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket of the run: the process name and the local address."""

    process: str
    address: str
    port: int


@dataclass
class Launch:
    """What one ``main_ppo`` run left behind."""

    returncode: int
    seconds: float
    console: str
    listeners: set[Listener] = field(default_factory=set)
    leftovers: list[str] = field(default_factory=list)  # processes killed after the run ended
    timed_out: bool = False

    @property
    def foreign_listeners(self) -> list[Listener]:
        return sorted(
            (x for x in self.listeners if x.address not in LOCAL_ADDRESSES),
            key=lambda x: (x.address, x.port),
        )


class _Watcher(threading.Thread):
    """Samples the process tree of ``pid`` and its listening sockets until stopped."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        import psutil  # comes with ray

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.interval = interval
        self.seen: dict[int, tuple[float, str]] = {}  # pid -> (create_time, name)
        self.listeners: set[Listener] = set()
        self.stopped = threading.Event()

    def sample(self) -> None:
        psutil = self.psutil
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            tree = []
        for process in tree:
            try:
                self.seen.setdefault(process.pid, (process.create_time(), process.name()))
                for conn in process.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN and conn.laddr:
                        self.listeners.add(
                            Listener(process.name(), str(conn.laddr.ip), int(conn.laddr.port))
                        )
            except psutil.Error:
                continue

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.sample()

    def kill_leftovers(self) -> list[str]:
        """Kill every process seen in the tree that is still alive (same pid AND start time)."""
        psutil = self.psutil
        alive = []
        for pid, (created, name) in self.seen.items():
            try:
                process = psutil.Process(pid)
                if process.create_time() != created:
                    continue
                process.kill()
                alive.append(f"{name} (pid {pid})")
            except psutil.Error:
                continue
        return alive


def run_main_ppo(
    overrides: Sequence[str],
    *,
    cwd: str,
    console: str,
    timeout: float = 900.0,
    env: Mapping[str, str] | None = None,
    grace: float = 20.0,
    echo: bool = False,
) -> Launch:
    """Run ``python -m verl.trainer.main_ppo OVERRIDES`` (see module docstring); its output goes
    to ``console`` (and to stdout with ``echo``). Returns when it has ended and nothing of it is
    left running."""
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
    full_env = {**os.environ, **RUN_ENV, **dict(env or {})}
    start = time.perf_counter()
    with open(console, "w", encoding="utf-8") as out:
        out.write("+ " + " ".join(command) + "\n")
        out.flush()
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE if echo else out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        tee = None
        if echo:
            tee = threading.Thread(target=_tee, args=(process.stdout, out), daemon=True)
            tee.start()
        watcher = _Watcher(process.pid)
        watcher.start()
        timed_out = False
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        except BaseException:  # KeyboardInterrupt: take the run down with us
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        finally:
            watcher.stopped.set()
            watcher.join()
            # Ray's processes shut down on their own when the driver exits; give them a moment
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _any_alive(watcher):
                time.sleep(0.25)
            leftovers = watcher.kill_leftovers()
            if tee is not None:
                tee.join(timeout=grace)
    return Launch(
        returncode=process.returncode,
        seconds=time.perf_counter() - start,
        console=console,
        listeners=watcher.listeners,
        leftovers=leftovers,
        timed_out=timed_out,
    )


def _tee(source: Any, console: Any) -> None:
    """Copy the run's output to its console file and to stdout (``echo``)."""
    for raw in iter(source.readline, b""):
        line = raw.decode(errors="replace")
        console.write(line)
        sys.stdout.write(line)
    console.flush()


def _any_alive(watcher: _Watcher) -> bool:
    psutil = watcher.psutil
    for pid, (created, _) in watcher.seen.items():
        try:
            if psutil.Process(pid).create_time() == created:
                return True
        except psutil.Error:
            continue
    return False
