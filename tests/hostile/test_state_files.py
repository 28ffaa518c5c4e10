"""Hostile state files read through the API (issue #29 item 5): a checkpoint marker, a run
manifest, an estimator state nested thousands deep, or holding a key twice, raise (or report) one
line — never a RecursionError — and change nothing. The same files through ``ebpo train`` are
rows of test_cli_train_files.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ebpo.utils.checkpoints import MARKER, incomplete_reason, mark_complete, newest_complete
from ebpo.utils.files import read_json
from tests.hostile.harness import ApiCase, check_api_error, snapshot

DEEP = '{"a": ' * 5000 + "1" + "}" * 5000
REPEATED = '{"format": "ebpo-checkpoint", "version": 1, "version": 1, "files": {}}'


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """``checkpoint-1`` (complete) and ``checkpoint-2`` (complete until its marker is replaced)."""
    for step in (1, 2):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "trainer_state.json").write_text("{}")
        mark_complete(folder)
    return tmp_path


def reason_of(folder: Path) -> None:
    """Raise the reason a checkpoint is incomplete (None: complete) as a ValueError."""
    reason = incomplete_reason(folder)
    if reason is not None:
        raise ValueError(reason)


def verl_state_written(folder: Path) -> None:
    pytest.importorskip("verl")
    from ebpo.integrations.verl.state import STATE_FILENAME

    (folder / STATE_FILENAME).write_text(DEEP)


def verl_store_load(folder: Path) -> None:
    from ebpo.integrations.verl.state import EstimatorStore

    EstimatorStore().load(folder)


#: (id, text written to the file, the call on the root, the message)
ROWS = [
    (
        "marker-nested-5000-deep",
        lambda root: (root / "checkpoint-2" / MARKER).write_text(DEEP),
        lambda root: reason_of(root / "checkpoint-2"),
        rf"^{MARKER} is unreadable \(nested too deeply \(more than 100 levels",
    ),
    (
        "marker-repeated-key",
        lambda root: (root / "checkpoint-2" / MARKER).write_text(REPEATED),
        lambda root: reason_of(root / "checkpoint-2"),
        rf"^{MARKER} is unreadable \(key 'version' appears twice in one object\)$",
    ),
    (
        "json-file-nested-5000-deep",
        lambda root: (root / "state.json").write_text(DEEP),
        lambda root: read_json(root / "state.json"),
        r"^nested too deeply \(more than 100 levels of lists and mappings\)$",
    ),
    (
        "verl-estimator-state-nested-5000-deep",
        verl_state_written,
        verl_store_load,
        r"^cannot restore EBPO estimator state from .*: nested too deeply",
    ),
]


@pytest.mark.parametrize("write, call, match", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_a_hostile_state_file_is_one_line_and_changes_nothing(root, write, call, match):
    write(root)
    before = snapshot(root)
    check_api_error(ApiCase("state file", lambda: call(root), ValueError, match))
    assert snapshot(root) == before


def test_a_checkpoint_whose_marker_is_too_deep_is_skipped_for_the_one_before(root):
    (root / "checkpoint-2" / MARKER).write_text(DEEP)
    found, skipped = newest_complete(root)
    assert found == root / "checkpoint-1"
    assert [(path.name, "nested too deeply" in why) for path, why in skipped] == [
        ("checkpoint-2", True)
    ]
    json.loads((root / "checkpoint-1" / MARKER).read_text())  # untouched
