"""Is the plug-in registered where verl computes advantages? Checked on every node of a Ray cluster.

verl computes advantages in its ``TaskRunnerV1`` Ray actor, which lands on any node of the
cluster, and ``import verl`` swallows plug-in import errors at DEBUG level: a node without ebpo (or
with a broken install) shows only as ``Unknown advantage estimator`` after the workers, the
rollout servers and the first rollout have started. :func:`check_nodes` connects to the cluster
as a driver (a child process, ended at a deadline: see there), runs :data:`PROBE` (``import
verl`` alone, as verl's actors do, then a look at verl's registry) once on every alive node,
pinned there, and reports per node;
:func:`first_failure` is the one line that names the first node where the estimators are missing.

The probe is sent as source code and compiled on the node, so it runs even where ebpo cannot be
imported (and then says so). ``ebpo verl doctor --address ADDRESS`` and ``ebpo verl`` (before it
launches ``main_ppo`` on a cluster) run it; without a cluster, the doctor's fresh-interpreter
probe is the same check on this machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ebpo.commands.verl.address import check_reachable
from ebpo.integrations.verl.advantage import plugin_names

__all__ = [
    "ADVANTAGE_MODULE",
    "JOIN_TIMEOUT",
    "PROBE",
    "NodeReport",
    "check_nodes",
    "drive",
    "first_failure",
    "fresh_process_report",
    "registered_everywhere",
    "run_probe",
]

ADVANTAGE_MODULE = "ebpo.integrations.verl.advantage"

#: runs in a fresh process or a Ray worker; leaves its findings in ``report``
PROBE = textwrap.dedent(
    f"""
    import importlib.metadata, socket, traceback
    report = {{"hostname": socket.gethostname(), "error": None, "registered": {{}}}}
    try:
        import verl
        from verl.trainer.ppo import core_algos
        names = {tuple(plugin_names())!r}
        report["verl"] = verl.__version__
        report["registered"] = {{
            n: getattr(core_algos.ADV_ESTIMATOR_REGISTRY.get(n), "__module__", None) for n in names
        }}
        try:
            report["ebpo"] = importlib.metadata.version("ebpo")
        except importlib.metadata.PackageNotFoundError:
            report["ebpo"] = None
        if not all(m == {ADVANTAGE_MODULE!r} for m in report["registered"].values()):
            ours = [ep for ep in importlib.metadata.entry_points(group="verl.plugins") if ep.name == "ebpo"]
            if not ours:
                report["error"] = "no 'ebpo' entry point in group verl.plugins (is ebpo[verl] installed?)"
            else:
                try:
                    ours[0].load()
                    report["error"] = (
                        "the entry point loads, but `import verl` did not load it "
                        "(VERL_USE_EXTERNAL_PLUGINS?)"
                    )
                except Exception:
                    report["error"] = traceback.format_exc()
    except Exception:
        report["error"] = traceback.format_exc()
    """
)


def run_probe(source: str = PROBE) -> dict[str, Any]:
    """Run ``source`` in this process and return its ``report``."""
    return dict(_remote_probe()(source))


def _remote_probe() -> Any:
    """``run_probe`` compiled outside any module (so Ray pickles it by value: it must run on a
    node where ebpo itself cannot be imported)."""
    namespace: dict[str, Any] = {"__name__": "ebpo_probe"}
    exec(
        "def probe(source):\n"
        "    namespace = {'__name__': 'ebpo_probe'}\n"
        "    exec(compile(source, '<ebpo verl probe>', 'exec'), namespace)\n"
        "    return dict(namespace['report'])\n",
        namespace,
    )
    return namespace["probe"]


def fresh_process_report(
    timeout: float = 300.0, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The probe's report from a fresh interpreter on this machine (as a Ray worker starts),
    with ``env`` added to its environment.

    Raises:
        RuntimeError: the interpreter timed out or died without a report.
    """
    code = PROBE + "\nimport json\nprint('EBPO_PROBE ' + json.dumps(report))\n"
    full_env = {**os.environ, **dict(env or {})}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
        )
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"the probe timed out after {timeout:.0f} s") from error
    lines = [line for line in proc.stdout.splitlines() if line.startswith("EBPO_PROBE ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the probe failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return dict(json.loads(lines[-1].removeprefix("EBPO_PROBE ")))


def registered_everywhere(report: Mapping[str, Any]) -> bool:
    """Whether a probe report shows every ebpo name registered with ebpo's functions."""
    registered = report.get("registered") or {}
    return bool(registered) and all(m == ADVANTAGE_MODULE for m in registered.values())


@dataclass(frozen=True)
class NodeReport:
    """What the probe found on one node."""

    node_id: str
    address: str
    hostname: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"node {self.address} ({self.hostname}, id {self.node_id[:12]}): {self.detail}"


def _report(
    node: Mapping[str, Any], found: Mapping[str, Any] | None, error: str | None
) -> NodeReport:
    address = str(node.get("NodeManagerAddress", "?"))
    node_id = str(node.get("NodeID", "?"))
    if error is not None:
        return NodeReport(node_id, address, "?", False, f"the probe could not run: {error}")
    assert found is not None
    registered = found.get("registered") or {}
    ok = registered_everywhere(found)
    if ok:
        detail = (
            f"verl {found.get('verl')}, ebpo {found.get('ebpo')}: "
            f"{', '.join(sorted(registered))} registered"
        )
    else:
        missing = sorted(n for n, m in registered.items() if m != ADVANTAGE_MODULE) or list(
            plugin_names()
        )
        cause = (found.get("error") or "").strip().splitlines()
        detail = f"{', '.join(missing)} NOT registered after `import verl`" + (
            f": {cause[-1]}" if cause else ""
        )
    return NodeReport(node_id, address, str(found.get("hostname", "?")), ok, detail)


#: seconds the driver may take to start and join the cluster before the check gives up on it
JOIN_TIMEOUT = 60.0
#: seconds the driver is given to end on SIGTERM before it is killed
_GRACE = 5.0

#: the driver: run in a child process, with the spec as its argument
_DRIVER = "import sys; from ebpo.commands.verl.nodes import drive; drive(sys.argv[1])"


def drive(spec: str) -> None:
    """The driver process of :func:`check_nodes`: join the cluster, print ``EBPO_JOINED`` (or
    ``EBPO_JOIN_FAILED`` and the error in one line), probe every alive node, print
    ``EBPO_NODES`` and the reports as JSON, leave."""
    import ray  # optional heavy dependency (verl extra)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    options = json.loads(spec)
    try:
        ray.init(
            address=options["address"],
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            namespace="ebpo-verl-doctor",
            runtime_env={"env_vars": options["env_vars"]},
        )
    except Exception as error:  # Ray's refusal of the address, in its words
        text = " ".join(str(error).split()) or type(error).__name__
        print(f"EBPO_JOIN_FAILED {type(error).__name__}: {text[:500]}", flush=True)
        return
    print("EBPO_JOINED", flush=True)
    try:
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        probe = ray.remote(num_cpus=0, max_retries=0)(_remote_probe())
        refs = [
            probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            ).remote(PROBE)
            for node in nodes
        ]
        deadline = time.monotonic() + options["timeout"]
        found: list[tuple[Mapping[str, Any], Any, str | None]] = []
        for node, ref in zip(nodes, refs, strict=True):
            try:
                left = max(0.0, deadline - time.monotonic())
                found.append((node, ray.get(ref, timeout=left), None))
            except Exception as error:  # the task failed or timed out on that node
                said = str(error).strip().splitlines()
                found.append((node, None, said[-1] if said else type(error).__name__))
        print("EBPO_NODES " + json.dumps(found, default=str), flush=True)
    finally:
        ray.shutdown()


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) while the driver runs, so that it is ended with us (Python's
    default SIGTERM ends this process at once and would leave the driver behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _end(process: subprocess.Popen[str]) -> None:
    """End the driver and everything it started (its own session): SIGTERM, then SIGKILL."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=_GRACE)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _next_line(lines: queue.Queue[str | None], deadline: float) -> str | None:
    """The driver's next line starting with ``EBPO_``; None at its end or at ``deadline``."""
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=min(left, 0.5))  # short waits: signals are handled between
        except queue.Empty:
            continue
        if line is None or line.startswith("EBPO_"):
            return line
    return None


def check_nodes(
    address: str,
    *,
    env_vars: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    join_timeout: float = JOIN_TIMEOUT,
) -> list[NodeReport]:
    """The probe on every alive node of the Ray cluster at ``address`` (see module docstring), in
    a job whose workers get ``env_vars`` (as verl's job would: e.g. ``VERL_USE_EXTERNAL_MODULES``).

    The driver runs in a child process (:func:`drive`), given ``join_timeout`` seconds to join
    and ``timeout`` more to probe, and ended at the deadline, on Ctrl-C or on SIGTERM: Ray's
    client retries an address it cannot join forever, in C++ that holds the interpreter. The
    cluster itself is left as it was.

    Raises:
        ValueError: the address is wrong (:func:`~ebpo.commands.verl.address.check_reachable`),
            or no cluster could be joined there in time (one line).
        RuntimeError: the driver died without a report.
    """
    check_reachable(address)
    spec = json.dumps({"address": address, "env_vars": dict(env_vars or {}), "timeout": timeout})
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # the address given wins
    process = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, spec],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    tail: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
            tail[:] = [*tail[-20:], line.rstrip()]
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        with _sigterm_raises():
            joined = _next_line(lines, time.monotonic() + join_timeout)
            if joined is None and process.poll() is None:
                raise ValueError(
                    f"no Ray cluster could be joined at {address} within {join_timeout:g} s "
                    "(what answers there speaks gRPC, but ray.init did not get in: is it the "
                    "head node's GCS port, and does this machine reach the node address the "
                    "cluster gives?)"
                )
            if joined is not None and joined.startswith("EBPO_JOIN_FAILED "):
                raise ValueError(
                    f"cannot join the Ray cluster at {address}: "
                    + joined.removeprefix("EBPO_JOIN_FAILED ")
                )
            report = _next_line(lines, time.monotonic() + timeout + 30.0) if joined else None
    finally:
        _end(process)
    if report is None or not report.startswith("EBPO_NODES "):
        raise RuntimeError(
            f"the Ray driver probing {address} ended without a report (exit {process.returncode})"
            + (f": {tail[-1]}" if tail else "")
        )
    return [_report(*found) for found in json.loads(report.removeprefix("EBPO_NODES "))]


def first_failure(reports: Sequence[NodeReport]) -> str | None:
    """One line naming the first node where ebpo's estimators are not registered, or None."""
    for report in reports:
        if not report.ok:
            return f"ebpo's verl plug-in is not usable on {report.line()}"
    return None
