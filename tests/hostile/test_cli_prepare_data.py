"""Hostile output folders for ``ebpo grpo prepare-data`` (issue 53, item 2): every output path is
checked before the first write, so each row ends in one line, exit code 2, with nothing written
or changed; a user's file is never replaced; our own staging leftovers are cleared, a look-alike
of the user's is kept."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import ebpo
from ebpo.cli import main
from ebpo.integrations.verl.data_folder import LIST_NAME
from ebpo.utils.file_sets import MARK
from tests.hostile.harness import CliCase, check_cli_error, ids, snapshot

pytest.importorskip("datasets")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"
#: offline: the fixture rows as DAPO-Math-17K and AIME 2024
PREPARE = ["grpo", "prepare-data", "--train-file", str(FIXTURES / "dapo-math-17k.parquet"),
           "--eval", "aime-2024", "--eval-file", f"aime-2024={FIXTURES / 'aime-2024.parquet'}",
           "--topic-method", "none"]  # fmt: skip
R = r"^ebpo grpo: error: --out-dir: "


def made(files: dict[str, str] = (), links: dict[str, str] = (), folders: tuple[str, ...] = ()):
    """Setup: ``files`` (path -> text), ``links`` (path -> target) and ``folders`` below tmp."""

    def setup(tmp: Path) -> None:
        for folder in folders:
            (tmp / folder).mkdir(parents=True, exist_ok=True)
        for name, text in dict(files).items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        for name, target in dict(links).items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, tmp / name)

    return setup


def case(id: str, setup, match: str, out: str = "out") -> CliCase:
    return CliCase(id, [*PREPARE, "--out-dir", out], match, setup=setup)


CASES = [
    case("out/trl a file", made({"out/trl": "mine"}),
         R + r"'out/trl' is a file, where prepare-data makes a folder: move it away$"),
    case("out/trl/file a file", made({"out/trl/file": "mine"}),
         R + r"'out/trl/file' is a file, where prepare-data makes a folder"),
    case("out/aime24.parquet a folder", made(folders=("out/aime24.parquet",)),
         R + r"'out/aime24.parquet' is a folder, where prepare-data writes a file$"),
    case("a user's file at a link's place", made({"out/trl/file/train.parquet": "mine"}),
         R + r"'out/trl/file/train.parquet' is a file, not prepare-data's link to "
         r"\.\./\.\./dapo_math_17k\.file\.parquet: move it away$"),
    case("a user's link at a link's place",
         made({"mine.parquet": "mine"}, {"out/trl/file/train.parquet": "../../../mine.parquet"}),
         R + r"'out/trl/file/train.parquet' is a symbolic link to '\.\./\.\./\.\./mine\.parquet', "
         r"not prepare-data's link"),
    case("out/trl a link elsewhere", made(folders=("elsewhere",), links={"out/trl": "../elsewhere"}),
         R + r"'out/trl' is a symbolic link to '\.\./elsewhere', where prepare-data makes a "
         r"folder \(relative links inside would point elsewhere\)"),
    case("a user's own training file", made({"out/dapo_math_17k.file.parquet": "mine"}),
         R + r"'out/dapo_math_17k\.file\.parquet' exists and is not a file ebpo prepare-data "
         rf"wrote \({LIST_NAME} does not list it\): move it away, or write to another --out-dir$"),
    case("a list of ours that does not name the file",
         made({"out/aime24.parquet": "mine",
               f"out/{LIST_NAME}": json.dumps({"format": "ebpo-prepare-data", "files": []})}),
         R + r"'out/aime24\.parquet' exists and is not a file ebpo prepare-data wrote"),
    case("a file of the user's named as our list", made({f"out/{LIST_NAME}": "mine"}),
         R + rf"'out/{LIST_NAME}' is a file, not prepare-data's list of the files it wrote: move "
         "it away$"),
    CliCase("an output inside the installed package",
            [*PREPARE, "--out-dir", str(Path(ebpo.__file__).parent / "hostile-prepare-data")],
            r"^ebpo grpo: error: --out-dir '.*hostile-prepare-data' lies inside the "
            r"installed ebpo package"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile_prepare_data_output(case, tmp_path, monkeypatch):
    check_cli_error(case, tmp_path, monkeypatch)
    assert not (Path(ebpo.__file__).parent / "hostile-prepare-data").exists()


def test_an_immutable_trl_folder_is_refused_before_the_first_write(tmp_path, monkeypatch):
    (tmp_path / "out" / "trl").mkdir(parents=True)
    if subprocess.run(["chattr", "+i", str(tmp_path / "out" / "trl")], check=False).returncode:
        pytest.skip("chattr +i is not allowed here")
    try:
        check_cli_error(
            case("immutable out/trl", None, R + r"'out/trl' is a folder this process cannot write "
                 r"in \(its permissions, or an immutable or read-only folder\)$"),
            tmp_path, monkeypatch,
        )  # fmt: skip
    finally:
        subprocess.run(["chattr", "-i", str(tmp_path / "out" / "trl")], check=True)


def test_a_second_run_replaces_its_own_files_and_clears_a_killed_runs_staging(
    tmp_path, monkeypatch, capsys
):
    """The files and links of an earlier run are ours (the list, the links' targets): a second run
    replaces them. A killed run's staging folder (marked as ours) is removed; a look-alike of the
    user's (no mark) is kept, whatever it holds."""
    monkeypatch.chdir(tmp_path)
    assert main([*PREPARE, "--out-dir", "out"]) == 0
    out = tmp_path / "out"
    listed = json.loads((out / LIST_NAME).read_text())["files"]
    assert listed == ["aime24.parquet", "dapo_math_17k.file.parquet",
                      "dapo_math_17k.shuffle.parquet"]  # fmt: skip
    killed = out / ".prepare-data.0123456789abcdef.new"
    killed.mkdir()
    (killed / MARK).write_text("{}")
    (killed / "dapo_math_17k.file.parquet").write_bytes(b"PAR1 half")
    mine = out / ".prepare-data.fedcba9876543210.new"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (out / "notes.txt").write_text("mine")  # beside the outputs: left alone
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert main([*PREPARE, "--out-dir", "out"]) == 0
    assert (
        "removed 1 temporary file(s) left by an interrupted prepare-data" in capsys.readouterr().out
    )
    assert not killed.exists() and (mine / "notes.txt").read_text() == "mine"
    after = snapshot(tmp_path)
    assert sorted(set(before) - set(after)) == [
        str(killed.relative_to(tmp_path)), str((killed / MARK).relative_to(tmp_path)),
        str((killed / "dapo_math_17k.file.parquet").relative_to(tmp_path)),
    ]  # fmt: skip
    assert set(after) - set(before) == set()
    for order in ("file", "shuffle"):
        link = out / "trl" / order / "train.parquet"
        assert os.readlink(link) == f"../../dapo_math_17k.{order}.parquet" and link.is_file()
