"""ebpo.lab.train.warm_start: before a warm start trains (a first run), the job says that it
happens, roughly how long it takes and where it is kept; a cached one is loaded without it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from ebpo.lab.cpu_task import policy  # noqa: E402
from ebpo.lab.runs.processes import Processes  # noqa: E402
from ebpo.lab.train import warm_start as job_warm_start  # noqa: E402
from ebpo.lab.train.config import TrainJobConfig  # noqa: E402


def test_the_notice_scales_with_the_warm_starts_size():
    default = job_warm_start.warm_start_notice(TrainJobConfig(), Path("cache"))
    assert default.startswith("warm start: 2500 supervised steps first")
    assert "cached in cache for later runs" in default and " min on a free machine" in default
    short = job_warm_start.warm_start_notice(TrainJobConfig(warm_start_steps=3), Path("c"))
    assert short.endswith(": a few seconds")
    pretrained = TrainJobConfig(model="/models/m", warm_start_steps=10)
    assert "10 supervised steps of /models/m" in job_warm_start.warm_start_notice(
        pretrained, Path("c")
    )


@pytest.mark.parametrize("cached", [False, True])
def test_the_job_says_it_before_a_warm_start_trains(tmp_path, monkeypatch, capsys, cached):
    config = TrainJobConfig(warm_start_steps=5, cache_dir=str(tmp_path))
    if cached:
        path = policy.warm_start_path(tmp_path, job_warm_start.warm_start_recipe(config))
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")
    order = []
    monkeypatch.setattr(
        policy,
        "warm_start",
        lambda model, *a, **k: (order.append("warm start"), (model, cached))[1],
    )
    data = type("Data", (), {"warm_rows": lambda self: iter(())})()
    job_warm_start.warm_start(config, Processes(), data, "model", None)
    out = capsys.readouterr().out.splitlines()
    assert order == ["warm start"]
    said = [line for line in out if "supervised steps first" in line]
    assert len(said) == (0 if cached else 1)
    assert out[-1].startswith("warm start: " + ("loaded from cache" if cached else "trained"))
