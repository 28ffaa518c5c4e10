"""The plug-in's estimator store never writes a non-finite prior and refuses to load one (issue #11
item 4): a NaN prior would give every later step all-zero advantages after a resume."""

from __future__ import annotations

import json
import math
import re

import pytest

from ebpo.integrations.verl.state import STATE_FILENAME, STORE, non_finite_entry

pytestmark = pytest.mark.verl


def _store_with_one_step():
    est = STORE.get("ebpo", {"prior": "ema", "nan_policy": "mask"})
    est([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], ["a", "a", "b", "b", "c", "c"])
    return STORE.state_dict()


def _poisoned(state, value=math.nan):
    bad = json.loads(json.dumps(state))
    bad["estimators"][0]["state"]["global"]["rewards"]["mean"] = value
    return bad


def test_non_finite_entry_names_the_first_bad_number():
    assert non_finite_entry({"a": [1.0, {"b": 2}], "c": "nan"}) is None  # strings are not numbers
    assert non_finite_entry({"a": [1.0, {"b": math.inf}]}) == "state.a[1].b = inf"
    assert non_finite_entry([0, -math.inf], "x") == "x[1] = -inf"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_save_refuses_non_finite_state_and_writes_nothing(tmp_path, monkeypatch, value):
    state = _store_with_one_step()
    folder = tmp_path / "global_step_3"
    folder.mkdir()
    monkeypatch.setattr(STORE, "state_dict", lambda: _poisoned(state, value))
    with pytest.raises(
        ValueError,
        match=r"refusing to save .*estimators\[0\]\.state\.global\.rewards\.mean = (nan|inf|-inf) is not finite",
    ):
        STORE.save(folder)
    assert list(folder.iterdir()) == []  # no state file, no temporary file


def test_failed_save_keeps_the_previous_state_file(tmp_path, monkeypatch):
    state = _store_with_one_step()
    STORE.save(tmp_path)
    before = (tmp_path / STATE_FILENAME).read_bytes()
    monkeypatch.setattr(STORE, "state_dict", lambda: _poisoned(state))
    with pytest.raises(ValueError):
        STORE.save(tmp_path)
    assert (tmp_path / STATE_FILENAME).read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILENAME]


def test_saved_state_is_strict_json_and_round_trips(tmp_path):
    state = _store_with_one_step()
    path = STORE.save(tmp_path)
    text = (tmp_path / STATE_FILENAME).read_text()
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the saved state"))
    STORE.clear()
    assert STORE.load(tmp_path) and STORE.state_dict() == state
    assert path == str(tmp_path / STATE_FILENAME)


def test_a_state_file_with_the_option_names_before_the_rename_restores_the_same_estimator():
    """A run that set ``+algorithm.ebpo.prior_mean=group_means`` before the option was renamed
    ``prior_mean_from`` saved that name: the state comes back under the current name, where the
    advantage function looks for it."""
    options = {"prior": "batch", "prior_mean_from": "group_means", "nan_policy": "mask"}
    est = STORE.get("ebpo", options)
    est([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"])
    state = json.loads(json.dumps(STORE.state_dict()))
    old = json.loads(json.dumps(state).replace('"prior_mean_from"', '"prior_mean"'))
    STORE.clear()
    STORE.load_state_dict(old)
    assert STORE.state_dict() == state and STORE.was_restored("ebpo", options)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_load_refuses_a_non_finite_state_file(tmp_path, value):
    state = _store_with_one_step()
    (tmp_path / STATE_FILENAME).write_text(json.dumps(_poisoned(state, value), allow_nan=True))
    STORE.clear()
    with pytest.raises(
        ValueError,
        match=rf"cannot restore EBPO estimator state from {tmp_path}/{STATE_FILENAME}: "
        r".*rewards\.mean = (nan|inf) is not finite",
    ):
        STORE.load(tmp_path)
    assert len(STORE) == 0 and STORE.restored_from is None  # untouched


def test_load_refuses_a_truncated_state_file(tmp_path):
    (tmp_path / STATE_FILENAME).write_text('{"format": 1, "estimators": [')
    with pytest.raises(
        ValueError,
        match=rf"cannot restore EBPO estimator state from {tmp_path}/{STATE_FILENAME}: Expecting",
    ):
        STORE.load(tmp_path)
    assert STORE.restored_from is None


@pytest.mark.parametrize("value", [1e308, -1e200])
def test_load_refuses_a_prior_whose_next_update_overflows_and_keeps_the_store(tmp_path, value):
    """Issue #21 item 12: ``mean: 1e308`` is finite and used to load, after which every step
    failed; it is refused at load, naming the file and the field, and the live store is kept."""
    state = _store_with_one_step()
    (tmp_path / STATE_FILENAME).write_text(json.dumps(_poisoned(state, value)))
    with pytest.raises(
        ValueError,
        match=rf"cannot restore EBPO estimator state from {tmp_path}/{STATE_FILENAME}: "
        rf"invalid ebpo state: global\.rewards\.mean = {re.escape(repr(value))} is too large",
    ):
        STORE.load(tmp_path)
    assert STORE.state_dict() == state and STORE.restored_from is None
