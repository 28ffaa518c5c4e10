"""ebpo.lab.runs.processes: the exchanges of a job's processes end the same way on every process when
one fails (two real processes, gloo), and are plain calls with one process."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

pytest.importorskip("accelerate")

from ebpo.lab.runs.processes import Processes  # noqa: E402
from tests.processes import free_port  # noqa: E402


def outcome(action) -> list:
    """``["value", v]`` or ``[error type, message, errno, filename]``."""
    try:
        return ["value", action()]
    except Exception as error:
        return [
            type(error).__name__,
            str(error),
            getattr(error, "errno", None),
            getattr(error, "filename", None),
        ]


def worker(rank: int, port: int, out: str) -> None:
    os.environ.update(
        {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2"}
    )
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    processes = Processes.from_environment()
    processes.start()
    seen = {"count": processes.count}

    def fails_on(failing_rank: int, error: Exception):
        def action(*release):
            if processes.rank == failing_rank:
                raise error
            return processes.rank

        return action

    seen["agree ok"] = outcome(lambda: processes.agree(lambda: processes.rank * 10))
    seen["agree, rank 1 fails"] = outcome(
        lambda: processes.agree(fails_on(1, ValueError("options: bad on rank 1")))
    )
    seen["on_main ok"] = outcome(lambda: processes.on_main(lambda: {"from": processes.rank}))
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/runs/x")
    seen["on_main fails"] = outcome(lambda: processes.on_main(fails_on(0, full)))

    marker = Path(out).with_name("released")

    def first_then_fail(release):
        marker.write_text("locked")
        release()
        time.sleep(0.2)
        raise ValueError("main failed after the release")

    def then():
        return marker.read_text()  # the main process released this process only after writing

    seen["main_first, main fails after release"] = outcome(
        lambda: processes.main_first(first_then_fail, then)
    )
    seen["main_first, main fails before release"] = outcome(
        lambda: processes.main_first(fails_on(0, KeyError("boom")), then)
    )
    seen["main_first ok"] = outcome(
        lambda: processes.main_first(lambda release: "trained", lambda: "loaded")
    )
    seen["any"] = outcome(lambda: list(processes.any(processes.rank == 1, False)))
    seen["gather"] = outcome(lambda: processes.gather(processes.rank))
    processes.stop()
    seen["group after stop"] = dist.is_initialized()
    Path(out).write_text(json.dumps(seen))


def test_the_exchanges_of_two_processes(tmp_path):
    outs = [tmp_path / f"rank{r}.json" for r in (0, 1)]
    port = free_port()
    context = mp.get_context("spawn")
    children = [
        context.Process(target=worker, args=(rank, port, str(outs[rank]))) for rank in (0, 1)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=120)
    assert [child.exitcode for child in children] == [0, 0]
    main, other = (json.loads(out.read_text()) for out in outs)
    assert main["count"] == other["count"] == 2
    assert main["agree ok"] == ["value", 0] and other["agree ok"] == ["value", 10]
    # one process's user error is every process's, word for word
    bad = ["ValueError", "options: bad on rank 1", None, None]
    assert main["agree, rank 1 fails"] == other["agree, rank 1 fails"] == bad
    assert main["on_main ok"] == other["on_main ok"] == ["value", {"from": 0}]
    # a full disk stays an OSError with its errno and file (ebpo train's one line about it)
    full = ["OSError", "[Errno 28] No space left on device: '/runs/x'", errno.ENOSPC, "/runs/x"]
    assert main["on_main fails"] == other["on_main fails"] == full
    assert main["main_first, main fails after release"] == [
        "ValueError",
        "main failed after the release",
        None,
        None,
    ]
    assert (
        other["main_first, main fails after release"]
        == main["main_first, main fails after release"]
    )
    # anything else: the main process's own error there, a RuntimeError naming it elsewhere
    assert main["main_first, main fails before release"][:2] == ["KeyError", "'boom'"]
    assert other["main_first, main fails before release"][:2] == [
        "RuntimeError",
        "process 0 of the launch failed: KeyError: 'boom'",
    ]
    assert main["main_first ok"] == ["value", "trained"]
    assert other["main_first ok"] == ["value", "loaded"]
    assert main["any"] == other["any"] == ["value", [True, False]]
    assert main["gather"] == other["gather"] == ["value", [0, 1]]
    assert main["group after stop"] is other["group after stop"] is False


def test_one_process_runs_each_action_once_and_raises_its_own_error():
    processes = Processes()
    assert processes.main and processes.count == 1
    calls = []
    assert processes.main_first(lambda release: release() or calls.append("first") or 1, None) == 1
    assert processes.on_main(lambda: calls.append("main") or 2) == 2
    assert processes.agree(lambda: 3) == 3
    assert processes.any(True, False) == (True, False)
    assert processes.gather("x") == ["x"]
    assert calls == ["first", "main"]
    with pytest.raises(KeyError):
        processes.on_main(lambda: {}["missing"])
    processes.start()  # no process group for one process
    assert not dist.is_initialized()
    processes.stop()
