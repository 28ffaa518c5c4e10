"""Every Ray address ``ebpo verl doctor --address`` and ``ebpo verl`` are given is checked before
Ray is asked to join it (issues #52 item 1, #53 items 1 and 7): a malformed one, one where no
cluster is found, and one where something that is not Ray answers (a real HTTP server here) end
in one line and exit 2 — not in a hang inside ``ray.init`` or "verl plug-in is BROKEN"."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ebpo.cli import main
from ebpo.commands.verl import nodes
from ebpo.commands.verl.address import check_reachable, cluster_address, parse_address
from tests.processes import free_port

pytestmark = pytest.mark.verl

BAD_ADDRESSES = {
    ":0": "the port '0' is not a number from 1 to 65535",
    "not an address": "has no port",
    "ray://...": "has no port",
    "ray://:10001": "has no host",
    "h" * 10_000 + ":6379": "the host has 10000 characters",
    "127.0.0.1:²": "the port '²' is not a number from 1 to 65535",
    "127.0.0.1:0": "the port '0' is not a number from 1 to 65535",
    "127.0.0.1:65536": "the port '65536' is not a number",
    "::1": "an IPv6 address goes in brackets before its port, e.g. [::1]:6379",
    "": "is empty",
    "http://head:8265": "unknown scheme 'http'",
    "bad_host!:6379": "'bad_host!' is not a host name or an IP address",
}


@pytest.mark.parametrize(("address", "why"), list(BAD_ADDRESSES.items()))
def test_a_malformed_address_is_one_line_naming_it(address, why):
    with pytest.raises(ValueError, match="^--address ") as caught:
        parse_address(address, "--address")
    message = str(caught.value)
    assert why in message and "\n" not in message and len(message) < 400
    assert "--port 1" not in message and "invalid literal" not in message


@pytest.mark.parametrize(
    ("address", "parsed"),
    [("127.0.0.1:6379", ("127.0.0.1", 6379)), ("[::1]:6379", ("::1", 6379)),
     ("ray://head-0.cluster.local:10001", ("head-0.cluster.local", 10001)),
     ("  10.0.0.2:6380 ", ("10.0.0.2", 6380))],
)  # fmt: skip
def test_well_formed_addresses_parse(address, parsed):
    assert parse_address(address, "--address") == parsed


@pytest.mark.parametrize("address", [*BAD_ADDRESSES, "local"])
def test_doctor_refuses_a_bad_address_in_one_line_as_the_users_error(address, capsys):
    """Exit 2 and one stderr line naming --address, before any check runs: not the plug-in's
    fault ("BROKEN", exit 1), and ``--address ''`` is not silently ignored."""
    assert main(["verl", "doctor", "--address", address]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    (line,) = out.err.splitlines()
    assert line.startswith("ebpo verl doctor: error: --address ")


@pytest.fixture
def no_cluster(tmp_path, monkeypatch):
    """No RAY_ADDRESS and a Ray temp dir of our own: no `ray start` cluster recorded here."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))
    return tmp_path / "raytmp"


def test_auto_joins_only_a_cluster_recorded_here(no_cluster, http_server, monkeypatch):
    """``auto`` is RAY_ADDRESS or the cluster ``ray start`` recorded (ray_current_cluster) — not
    whichever Ray server another job runs here, as Ray's own ``auto`` falls back to."""
    with pytest.raises(ValueError, match=r"^--address auto: no Ray cluster found on this machine"):
        check_reachable("auto", "--address")
    (no_cluster / "ray").mkdir(parents=True)
    (no_cluster / "ray" / "ray_current_cluster").write_text(http_server + "\n")
    assert cluster_address("auto") == http_server
    with pytest.raises(ValueError, match=rf"^what answers at {http_server} \(--address auto\) is"):
        check_reachable("auto", "--address")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    assert cluster_address("auto") == "127.0.0.1:1"
    assert cluster_address("10.0.0.1:6379") == "10.0.0.1:6379"  # a given address wins


def test_what_is_not_ray_is_named(http_server, other_grpc, fake_gcs):
    with pytest.raises(ValueError, match=r"is not a Ray cluster: .*it answered b'"):
        check_reachable(http_server)
    with socket.create_server(("127.0.0.1", 0)) as quiet:  # accepts, never answers
        address = f"127.0.0.1:{quiet.getsockname()[1]}"
        with pytest.raises(ValueError, match=r"not a Ray cluster: .*no answer within 0.5 s"):
            check_reachable(address, timeout=0.5)
    with pytest.raises(ValueError, match=r"speaks gRPC, but not as Ray's GCS does \(gRPC UNIMPL"):
        check_reachable(other_grpc)
    check_reachable(fake_gcs)  # answers as Ray's GCS does: left to the join's deadline
    port = free_port()
    with pytest.raises(ValueError, match=rf"^nothing answers at the Ray address 127.0.0.1:{port} "):
        check_reachable(f"127.0.0.1:{port}")


def _ebpo(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"RAY_TMPDIR": str(cwd / "raytmp"), "EBPO_DEBUG": ""})
    return subprocess.Popen(
        [sys.executable, "-m", "ebpo", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_doctor_answers_an_http_server_in_one_line(tmp_path, http_server):
    """A real HTTP server at the address (a user who typed the dashboard's port): the doctor
    answers in one line, exit 2 (it hung in ray.init before)."""
    process = _ebpo(["verl", "doctor", "--address", http_server], tmp_path)
    try:
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 2, out + err
    (line,) = err.splitlines()
    assert line.startswith(f"ebpo verl doctor: error: what answers at {http_server} is not a Ray ")
    assert "BROKEN" not in out


@pytest.mark.slow
def test_a_cluster_that_cannot_be_joined_is_given_up_at_the_deadline(fake_gcs):
    """Something that speaks gRPC but never lets Ray in: the driver is ended at the join
    deadline, one line, and nothing of it is left running."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(
        ValueError, match=r"^no Ray cluster could be joined at 127\.0\.0\.1:\d+ within 10 s"
    ):
        nodes.check_nodes(fake_gcs, join_timeout=10)
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sent", "code"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)]
)
def test_a_signal_ends_the_doctor_and_its_driver(tmp_path, fake_gcs, sent, code):
    """SIGTERM or Ctrl-C (SIGINT) while the doctor waits for Ray to join: it ends at once (128 +
    SIGTERM; 130, "interrupted") and takes the driver process (its own session, which a
    terminal's Ctrl-C does not reach) with it."""
    process = _ebpo(["verl", "doctor", "--address", fake_gcs], tmp_path)
    watched = psutil.Process(process.pid)
    driver = None
    for _ in range(600):  # until the driver runs (the doctor imports verl first)
        found = [p for p in watched.children() if "nodes import drive" in " ".join(p.cmdline())]
        if found:
            driver = found[0]
            break
        time.sleep(0.5)
    assert driver is not None, process.communicate(timeout=60)
    process.send_signal(sent)
    try:
        process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == code
    assert not driver.is_running()
