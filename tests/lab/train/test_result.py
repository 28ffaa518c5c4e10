"""ebpo.lab.train.result: the one form of a job's result, whatever the run's end."""

from __future__ import annotations

from pathlib import Path

from ebpo.lab.train.result import TrainResult

EVALUATION = {"overall": 0.5, "topics": {"add": 0.5}, "problems": [{"id": "1"}]}


def test_a_completed_result_in_the_order_results_json_has():
    result = TrainResult(
        status="completed",
        run_dir=Path("/runs/a"),
        before=EVALUATION,
        global_step=8,
        warm_start_cached=True,
        wall_time_s=1.5,
        after={**EVALUATION, "overall": 0.75},
        plots=(Path("/runs/a/plots/reward.png"),),
    ).as_dict()
    assert list(result) == [
        "run_dir", "metrics_path", "before", "global_step", "warm_start_cached", "status",
        "after", "validation", "wall_time_s", "plots", "no_signal",
    ]  # fmt: skip
    assert result["metrics_path"] == "/runs/a/metrics.jsonl"
    assert result["before"] == {"overall": 0.5, "topics": {"add": 0.5}}  # no per-problem list
    assert result["after"]["overall"] == 0.75 and "problems" not in result["after"]
    assert result["validation"] is None and result["plots"] == ["/runs/a/plots/reward.png"]


def test_an_interrupted_result_has_no_after():
    result = TrainResult("interrupted", Path("r"), EVALUATION, 2, None, 0.1, no_signal="x")
    assert result.as_dict()["after"] is None and result.as_dict()["plots"] == []
    assert result.as_dict()["no_signal"] == "x"
