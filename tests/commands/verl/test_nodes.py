"""The plug-in checked where verl runs it (issue #27): on a local 2-node Ray cluster
(``ray.cluster_utils.Cluster``, CPU only, 127.0.0.1), ``ebpo verl doctor --address`` and ``ebpo
verl``'s pre-launch check probe every node; a node whose ``import verl`` does not register ebpo's
estimators (here: ``VERL_USE_EXTERNAL_PLUGINS=none`` in that node's environment, as a node without
the entry point behaves) fails in one line naming it. Everything the cluster starts listens on
127.0.0.1 and is gone afterwards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

pytestmark = [pytest.mark.verl, pytest.mark.slow]

CLUSTER = textwrap.dedent(
    """
    import json, os, sys
    from ray.cluster_utils import Cluster
    temp = os.path.join(os.environ["RAY_TMPDIR"], "ray")  # where Ray writes ray_current_cluster
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "temp_dir": temp},
    )
    good = cluster.head_node.node_id
    bad = cluster.add_node(num_cpus=1, env_vars={"VERL_USE_EXTERNAL_PLUGINS": "none"}).node_id
    print(json.dumps({"address": cluster.address, "good": good, "bad": bad}), flush=True)
    sys.stdin.read()  # until the test closes our stdin
    cluster.shutdown()
    """
)
#: Ray takes 127.0.0.1 as the node address (see ebpo.lab.verl_cpu.v1.launch)
LOCAL = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="module")
def cluster():
    from ebpo.lab.verl_cpu.v1.launch import _Watcher

    # Ray's files in a folder of the module's own (RAY_TMPDIR, read by every process below),
    # not in /tmp/ray, which may not exist and would outlive the tests
    temp = tempfile.mkdtemp(prefix="ebpo-rc-", dir="/tmp")
    os.mkdir(os.path.join(temp, "ray"))
    env = {**os.environ, **LOCAL, "RAY_TMPDIR": temp}
    process = subprocess.Popen(
        [sys.executable, "-c", CLUSTER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    watcher = _Watcher(process.pid)
    watcher.start()
    try:
        info = json.loads(process.stdout.readline())
        yield info, env, watcher
    finally:
        watcher.sample()
        watcher.stopped.set()
        watcher.join()
        process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        # nothing of the cluster may outlive it (Ray's processes fate-share with the script)
        leftovers = watcher.kill_leftovers()
        shutil.rmtree(temp, ignore_errors=True)
        assert not leftovers, f"left running after the cluster shut down: {leftovers}"


def test_doctor_names_the_node_without_the_plugin(cluster):
    info, env, _ = cluster
    out = subprocess.run(
        [sys.executable, "-m", "ebpo", "verl", "doctor", "--address", info["address"]],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = out.stdout.splitlines()
    assert out.returncode == 1, out.stdout + out.stderr
    node_lines = [line for line in lines if line.startswith(("[ok  ] node", "[FAIL] node"))]
    assert len(node_lines) == 2, lines
    (good,) = [line for line in node_lines if info["good"][:12] in line]
    (bad,) = [line for line in node_lines if info["bad"][:12] in line]
    assert good.startswith("[ok  ]") and "ebpo, ebpo_batch, ebpo_bb" in good
    assert "grpo_bn, jspo, jspo_plus_plus, krpo" in good and "spo registered" in good
    assert bad.startswith("[FAIL]") and "NOT registered after `import verl`" in bad
    (verdict,) = [line for line in lines if line.startswith("verl plug-in is BROKEN")]
    assert info["bad"][:12] in verdict and "127.0.0.1" in verdict


def test_ebpo_verl_checks_the_cluster_before_launching(cluster, tmp_path):
    """``ebpo verl`` pointed at the cluster (``+ray_kwargs.ray_init.address``) stops with the same
    one line, and launches nothing. The paper's recipe, with its data files here: its 4 × 8 GPUs
    are the cluster's, not this machine's, so the dry run's checks pass (issue #45 item 5)."""
    from ebpo.integrations.verl.recipes import train_file, val_files

    info, env, _ = cluster
    data = tmp_path / "data"
    data.mkdir()
    for path in [train_file(str(data), "file"), *val_files(str(data))]:
        open(path, "wb").close()
    script = textwrap.dedent(
        f"""
        from ebpo.commands.verl import launcher
        from ebpo.integrations.verl.recipes import recipe_overrides
        launcher.subprocess.call = lambda *a, **k: print("LAUNCHED") or 0
        overrides = recipe_overrides(
            "ebpo", data_dir={str(data)!r},
            extra=["+ray_kwargs.ray_init.address={info["address"]}"],
        )
        raise SystemExit(launcher.run(overrides))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode != 0 and "LAUNCHED" not in out.stdout
    assert "PluginUnavailable: ebpo's verl plug-in is not usable on node 127.0.0.1" in out.stderr
    assert info["bad"][:12] in out.stderr


def test_the_cpu_loop_starts_its_own_ray_beside_a_cluster(cluster):
    """While a cluster runs on this machine (Ray's ``ray_current_cluster`` file names it, and a
    plain ``ray.init(num_cpus=…)`` would join it and refuse ``num_cpus``), the CPU loop's
    ``ray_session`` starts a new local instance of its own: one node, its 2 CPUs."""
    _, env, _ = cluster
    script = textwrap.dedent(
        """
        import ray
        from ebpo.lab.verl_cpu.legacy.run import ray_session
        with ray_session(num_cpus=2):
            print(len(ray.nodes()), ray.cluster_resources()["CPU"])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["1", "2.0"]


def test_the_cluster_listened_on_loopback_only_and_is_gone(cluster):
    """Runs last in this module (pytest keeps the file order): the watcher saw both nodes'
    processes; every listening socket was on 127.0.0.1."""
    _, _, watcher = cluster
    watcher.sample()
    kinds = {x.process for x in watcher.listeners}
    assert "gcs_server" in kinds and "raylet" in kinds
    foreign = [x for x in watcher.listeners if x.address not in ("127.0.0.1", "::ffff:127.0.0.1")]
    assert not foreign, foreign
    raylets = [pid for pid, (_, name) in watcher.seen.items() if name == "raylet"]
    assert len(raylets) == 2  # two nodes
