"""The curriculum sampler, and verl building the curriculum from its own config (spec, "Curriculum")."""

from __future__ import annotations

import pickle
import sys

import pandas as pd
import pytest

from ebpo.curriculum import curriculum_order, is_contiguous
from ebpo.integrations.verl.curriculum_sampler import (
    CurriculumSampler,
    curriculum_settings,
    verl_overrides,
)


def rows(n: int = 24) -> list[dict]:
    return [
        {
            "id": i,
            "topic": ["b", "a", "c"][i % 3],
            "difficulty": float((7 * i) % 5),
            "extra_info": {"topic": i % 2},
        }
        for i in range(n)
    ]


def test_sampler_yields_a_blocked_permutation_every_epoch():
    data = rows()
    sampler = CurriculumSampler(data, order="topic", seed=3)
    first, second = list(sampler), list(sampler)
    for epoch in (first, second):
        assert sorted(epoch) == list(range(len(data)))
        assert is_contiguous([data[i]["topic"] for i in epoch])
    assert first != second  # blocks are reshuffled inside from one epoch to the next
    assert len(sampler) == len(data)
    assert list(CurriculumSampler(data, order="topic", seed=3)) == first  # deterministic


def test_sampler_reads_settings_from_a_verl_style_data_config():
    data = rows()
    sampler = CurriculumSampler(
        data_source=data, data_config={"seed": 5, "curriculum": {"order": "difficulty"}}
    )
    assert sampler.order == "difficulty" and sampler.seed == 5
    assert [data[i]["difficulty"] for i in sampler] == sorted(d["difficulty"] for d in data)
    nested = CurriculumSampler(
        data, {"curriculum": {"order": "topic", "topic_key": "extra_info.topic"}}
    )
    assert is_contiguous([data[i]["extra_info"]["topic"] for i in nested])
    assert curriculum_settings(None) == {
        "order": "shuffle",
        "seed": 0,
        "topic_key": None,
        "difficulty_key": None,
    }
    with pytest.raises(ValueError, match="unknown key"):
        curriculum_settings({"curriculum": {"ordre": "topic"}})


def test_sampler_falls_back_to_extra_info_and_fails_early_without_labels():
    data = [{"extra_info": {"topic": t}} for t in "xyxyxy"]
    order = curriculum_order(data, "topic", seed=0)
    assert is_contiguous([data[i]["extra_info"]["topic"] for i in order])
    with pytest.raises(ValueError, match="needs a difficulty column"):
        CurriculumSampler(data, order="difficulty")
    with pytest.raises(ValueError, match="order must be one of"):
        CurriculumSampler(data, order="hardest-first")


def test_sampler_resumes_mid_epoch_in_a_stateful_dataloader():
    from torchdata.stateful_dataloader import StatefulDataLoader

    data = rows(30)

    def loader(sampler):
        return StatefulDataLoader(
            data, batch_size=4, sampler=sampler, collate_fn=lambda b: [r["id"] for r in b]
        )

    full = [i for batch in loader(CurriculumSampler(data, order="topic", seed=1)) for i in batch]
    # second epoch too: the resumed sampler must know which epoch it is in
    running = loader(CurriculumSampler(data, order="topic", seed=1))
    list(running)  # epoch 0
    it = iter(running)
    head = [i for _, batch in zip(range(3), it, strict=False) for i in batch]
    state = running.state_dict()
    resumed = loader(CurriculumSampler(data, order="topic", seed=1))
    resumed.load_state_dict(state)
    tail = [i for batch in resumed for i in batch]
    epoch1 = CurriculumSampler(data, order="topic", seed=1).indices(1)
    assert head + tail == epoch1
    assert epoch1 != full


def test_verl_overrides():
    overrides = verl_overrides("topic_then_difficulty", seed=2, topic_key="extra_info.topic")
    assert "data.shuffle=False" in overrides
    assert "+data.curriculum.order=topic_then_difficulty" in overrides
    assert "+data.curriculum.topic_key=extra_info.topic" in overrides
    with pytest.raises(ValueError, match="order must be one of"):
        verl_overrides("nope")


def test_importing_the_curriculum_modules_needs_neither_verl_nor_scikit_learn(monkeypatch):
    import importlib.util
    import pkgutil

    import ebpo.curriculum
    from ebpo.integrations.verl import curriculum_sampler

    modules = [
        importlib.import_module(f"ebpo.curriculum.{info.name}")
        for info in pkgutil.iter_modules(ebpo.curriculum.__path__)
    ]
    assert {m.__name__.rsplit(".", 1)[1] for m in modules} >= {
        "order",
        "topics",
        "llm",
        "difficulty",
    }
    blocked = ("verl", "sklearn", "umap", "sentence_transformers")
    for name in [m for m in sys.modules if m.split(".")[0] in blocked] + list(blocked):
        monkeypatch.setitem(
            sys.modules, name, None
        )  # any import of these (or their submodules) now fails
    for module in (ebpo.curriculum, *modules, curriculum_sampler):
        # a fresh copy of the module, executed with those packages unimportable
        spec = importlib.util.spec_from_file_location(f"_fresh_{module.__name__}", module.__file__)
        fresh = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fresh)
    assert list(fresh.CurriculumSampler(rows(6), order="topic")) != []
    with pytest.raises(ImportError):
        fresh.CurriculumRLHFDataset  # noqa: B018 (the verl class is built on first access only)


@pytest.mark.verl
def test_verl_builds_the_curriculum_from_its_own_config(tmp_path):
    """verl 0.9.1 has no data.sampler.class_path: its create_rl_dataset loads our dataset class via
    data.custom_cls, its create_rl_sampler (data.shuffle=False) walks it in curriculum order; its
    loader also builds CurriculumSampler with the (data_source, data_config) contract."""
    pytest.importorskip("verl")
    from pathlib import Path

    import verl
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
    from verl.utils.import_utils import load_extern_object

    table = pd.DataFrame(rows(40)).assign(
        prompt=[[{"role": "user", "content": f"q{i}"}] for i in range(40)]
    )
    table.to_parquet(tmp_path / "train.parquet")
    config = OmegaConf.load(
        Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml"
    )
    overrides = [o.lstrip("+") for o in verl_overrides("topic_then_difficulty", seed=4)]
    overrides += [
        f"data.train_files={tmp_path / 'train.parquet'}",
        f"+data.cache_dir={tmp_path / 'cache'}",
    ]
    overrides += ["data.filter_overlong_prompts=False"]
    OmegaConf.set_struct(config, False)
    config = OmegaConf.merge(config, OmegaConf.from_dotlist(overrides))

    dataset = create_rl_dataset(config.data.train_files, config.data, None, None)
    assert type(dataset).__name__ == "CurriculumRLHFDataset"
    sampler = create_rl_sampler(config.data, dataset)
    visited = [dataset.dataframe[i] for i in sampler]
    assert sorted(r["id"] for r in visited) == list(range(40))
    assert is_contiguous([r["topic"] for r in visited])
    for topic in "abc":
        inside = [r["difficulty"] for r in visited if r["topic"] == topic]
        assert inside == sorted(inside)
    assert pickle.loads(pickle.dumps(type(dataset))) is type(dataset)  # spawned loader workers

    sampler_cls = load_extern_object(
        "pkg://ebpo.integrations.verl.curriculum_sampler", "CurriculumSampler"
    )
    config.data.curriculum.order = "difficulty"
    by_difficulty = sampler_cls(data_source=dataset, data_config=config.data)
    assert [dataset.dataframe[i]["difficulty"] for i in by_difficulty] == sorted(
        table["difficulty"]
    )

    config.data.shuffle = True
    config.data.curriculum.order = "topic"
    with pytest.raises(ValueError, match="needs data.shuffle=False"):
        create_rl_dataset(config.data.train_files, config.data, None, None)
