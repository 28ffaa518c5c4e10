"""``ebpo simulate``: the command writes the chosen sections, is reproducible by seed and checks its
options before running anything."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from ebpo.cli import main


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny tensors: a second intra-op thread only adds contention on a shared CI machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_cli_quick_writes_results(tmp_path):
    assert (
        main(
            [
                "simulate",
                "--quick",
                "--experiments",
                "saturation,baseline",
                "--output-dir",
                str(tmp_path),
                "--seed",
                "1",
            ]
        )
        == 0
    )
    text = (tmp_path / "results.md").read_text()
    assert (
        "## 1. Baseline quality" in text
        and "## 2. Saturated failure" in text
        and "## 3." not in text
    )
    assert (tmp_path / "baseline_mse.png").stat().st_size > 0
    assert (tmp_path / "saturation_penalty.png").stat().st_size > 0


def test_cli_is_reproducible_by_seed(tmp_path):
    tables = []
    for run in ("a", "b"):
        out = tmp_path / run
        assert (
            main(
                [
                    "simulate",
                    "--quick",
                    "--experiments",
                    "saturation",
                    "--no-plots",
                    "--output-dir",
                    str(out),
                ]
            )
            == 0
        )
        tables.append((out / "results.md").read_text().split("\n", 3)[3])  # drop the timing line
    assert tables[0] == tables[1]


def test_cli_rejects_unknown_experiment(tmp_path, capsys):
    assert main(["simulate", "--experiments", "baseline,nope", "--output-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(
        "ebpo simulate: error: --experiments must be a comma-separated subset"
    )


def test_cli_checks_the_output_dir_before_running(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    for out, problem in (
        (tmp_path / "file", "is a file"),
        (tmp_path / "file" / "sub", "lies below"),
    ):
        assert (
            main(["simulate", "--quick", "--experiments", "saturation", "--output-dir", str(out)])
            == 2
        )
        err = capsys.readouterr().err
        assert (
            err.startswith("ebpo simulate: error: --output-dir")
            and problem in err
            and err.count("\n") == 1
        )
    assert [p.name for p in tmp_path.iterdir()] == ["file"] and (
        tmp_path / "file"
    ).read_text() == "x"


@pytest.mark.slow
def test_cli_quick_all_experiments(tmp_path):
    assert main(["simulate", "--quick", "--output-dir", str(tmp_path)]) == 0
    text = (tmp_path / "results.md").read_text()
    for heading in ("## 1.", "## 2.", "## 3.", "## 4."):
        assert heading in text
    assert len(list(tmp_path.glob("*.png"))) == 4


def test_cli_rejects_a_negative_seed(tmp_path, capsys):
    assert main(["simulate", "--seed", "-1", "--output-dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith(
        "ebpo simulate: error: --seed must be an integer >= 0, got -1"
    )
    assert list(tmp_path.iterdir()) == []


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("plots", [True, False])
def test_a_full_disk_is_one_line_and_leaves_the_old_files(tmp_path, capsys, monkeypatch, plots):
    """ENOSPC (injected at the fsync before each rename) was a traceback; the real thing, on a
    full tmpfs, is in tests/hostile/test_files.py."""
    pytest.importorskip("matplotlib")
    (tmp_path / "results.md").write_text("old results")
    (tmp_path / "saturation_penalty.png").write_bytes(b"old plot")
    monkeypatch.setattr(os, "fsync", _disk_full)
    argv = ["simulate", "--quick", "--experiments", "saturation", "--output-dir", str(tmp_path)]
    assert main(argv + ([] if plots else ["--no-plots"])) == 2
    first = "saturation_penalty.png" if plots else "results.md"
    err = capsys.readouterr().err  # the progress bar (tqdm, \r-separated), then the error
    assert err.splitlines()[-1] == (
        f"ebpo simulate: error: cannot write {str(tmp_path / first)!r}: No space left on device; "
        "the previous file, if any, is unchanged"
    )
    assert "Traceback" not in err
    assert (tmp_path / "results.md").read_text() == "old results"
    assert (tmp_path / "saturation_penalty.png").read_bytes() == b"old plot"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.md", "saturation_penalty.png"]


def test_the_quick_bandit_compares_spo(tmp_path):
    """SPO tracks prompts: the bandit gives it their keys, so it runs among the defaults."""
    argv = ["simulate", "--quick", "--experiments", "bandit", "--no-plots", "--output-dir"]
    assert main([*argv, str(tmp_path)]) == 0
    assert "| spo |" in (tmp_path / "results.md").read_text()
