"""``training_args.bin`` read without unpickling: the fields equal what ``torch.load`` gives, and a
pickle that would run code when unpickled runs nothing here."""

from __future__ import annotations

import io
import os
import pickle
import zipfile

import pytest

from ebpo.analysis.compare.pickle_fields import Opaque, pickled_fields


class Config:
    """A stand-in for a dataclass of arguments (pickled as GLOBAL + NEWOBJ/REDUCE + BUILD)."""

    def __init__(self):
        self.seed = 3
        self.learning_rate = 1e-3
        self.output_dir = "out"
        self.report_to = ["none"]
        self.model_init_kwargs = {"dtype": "float32", "nested": {"a": (1, 2)}}
        self.flag = True
        self.missing = None


class Explodes:
    def __reduce__(self):
        return (os.system, ("touch exploded",))


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_the_fields_of_a_pickled_object(tmp_path, protocol):
    path = tmp_path / "args.bin"
    path.write_bytes(pickle.dumps(Config(), protocol=protocol))
    name, fields = pickled_fields(path)
    assert name.endswith("test_pickle_fields.Config")
    assert fields == vars(Config()) | {
        "model_init_kwargs": {"dtype": "float32", "nested": {"a": (1, 2)}}
    }


def test_a_pickle_that_would_run_code_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = Config()
    config.report_to = Explodes()  # unpickling calls os.system("touch exploded")
    (tmp_path / "args.bin").write_bytes(pickle.dumps(config, protocol=4))
    _, fields = pickled_fields(tmp_path / "args.bin")
    assert not (tmp_path / "exploded").exists()
    assert isinstance(fields["report_to"], Opaque) and fields["report_to"].name == "posix.system"
    assert fields["seed"] == 3


def test_a_torch_save_archive_and_what_is_not_one(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("training_args/data.pkl", pickle.dumps(Config(), protocol=2))
        archive.writestr("training_args/version", "3\n")
    (tmp_path / "args.bin").write_bytes(buffer.getvalue())
    assert pickled_fields(tmp_path / "args.bin")[1]["seed"] == 3
    (tmp_path / "list.bin").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="does not hold a pickled object with fields"):
        pickled_fields(tmp_path / "list.bin")
    (tmp_path / "cut.bin").write_bytes(pickle.dumps(Config())[:40])
    with pytest.raises(ValueError, match="is not a pickle this reader follows"):
        pickled_fields(tmp_path / "cut.bin")


def test_trls_own_arguments_read_as_torch_load_reads_them(tmp_path):
    torch = pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    from ebpo.integrations.trl import EBPOConfig

    for cls, estimator in ((trl.GRPOConfig, None), (EBPOConfig, "ebpo")):
        args = cls(output_dir=str(tmp_path / "o"), seed=7, learning_rate=3e-4, report_to="none",
                   num_generations=2, per_device_train_batch_size=2, use_cpu=True)  # fmt: skip
        torch.save(args, tmp_path / "training_args.bin")
        name, fields = pickled_fields(tmp_path / "training_args.bin")
        loaded = torch.load(tmp_path / "training_args.bin", weights_only=False)
        assert name == f"{cls.__module__}.{cls.__qualname__}"
        assert set(fields) == set(vars(loaded))
        plain = {
            k: v for k, v in vars(loaded).items() if type(v) in (int, float, str, bool, type(None))
        }
        assert {k: fields[k] for k in plain} == plain
        assert fields.get("advantage_estimator") == estimator


def test_the_bounds_take_what_a_config_holds_and_refuse_more(tmp_path):
    """A config with a shared list (the memo) and nested dicts within the bounds reads as
    pickle gives it; past them (values once expanded, depth) it is refused, quickly."""
    shared = list(range(1000))
    config = Config()
    config.model_init_kwargs = {"a": shared, "b": shared, "deep": [[[[[[[[1]]]]]]]]}
    (tmp_path / "ok.bin").write_bytes(pickle.dumps(config, protocol=4))
    assert pickled_fields(tmp_path / "ok.bin")[1]["model_init_kwargs"] == config.model_init_kwargs
    config.model_init_kwargs = {f"k{i}": shared for i in range(200)}  # 200,000 values expanded
    (tmp_path / "wide.bin").write_bytes(pickle.dumps(config, protocol=4))
    with pytest.raises(ValueError, match="more than 100,000 values once its shared references"):
        pickled_fields(tmp_path / "wide.bin")
    deep: list = []
    for _ in range(70):
        deep = [deep]
    config.model_init_kwargs = deep
    (tmp_path / "deep.bin").write_bytes(pickle.dumps(config, protocol=4))
    with pytest.raises(ValueError, match="nested deeper than 64 levels"):
        pickled_fields(tmp_path / "deep.bin")
