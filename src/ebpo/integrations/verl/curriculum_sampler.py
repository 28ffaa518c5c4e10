"""Curriculum orders inside a data loader: a torch ``Sampler`` and a verl dataset class (EBPO spec,
"Curriculum / clustered sampling").

verl 0.9.1 has no ``data.sampler.class_path`` any more: its ``create_rl_sampler`` only chooses
between a seeded ``RandomSampler`` (``data.shuffle=True``) and a ``SequentialSampler``. Three ways
to train verl on a curriculum order, from the least to the most code:

1. a pre-sorted file: ``ebpo data order train.parquet --order topic --output sorted.parquet`` and
   ``data.train_files=sorted.parquet data.shuffle=False``;
2. the dataset class here, through verl's own ``data.custom_cls`` hook — it sorts the rows once
   loaded, so the ``SequentialSampler`` walks the curriculum (see :func:`verl_overrides`)::

       data.shuffle=False data.custom_cls.path=pkg://ebpo.integrations.verl.curriculum_sampler
       data.custom_cls.name=CurriculumRLHFDataset +data.curriculum.order=topic

3. :class:`CurriculumSampler`, a ``Sampler[int]`` built as ``CurriculumSampler(data_source=...,
   data_config=...)`` (the constructor contract of verl's ``data.sampler.class_path`` in the
   releases that have it), passed as ``train_sampler=`` to ``RayPPOTrainer`` or given to any
   ``DataLoader`` (TRL, plain torch).

Importing this module imports torch but not verl: ``CurriculumRLHFDataset`` subclasses verl's
``RLHFDataset`` and is built on first access. The orders and the column lookup (a top-level
``topic`` / ``difficulty`` column, then ``extra_info``) are :mod:`ebpo.curriculum.dataset_order`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sized
from typing import Any

from torch.utils.data import Sampler

from ebpo.curriculum import ORDERS, curriculum_order
from ebpo.utils.checks import check_int

__all__ = [
    "CurriculumSampler",
    "curriculum_settings",
    "verl_overrides",
]  # + CurriculumRLHFDataset, built lazily


def curriculum_settings(data_config: Mapping | None) -> dict[str, Any]:
    """The curriculum settings of a verl ``data`` config: ``data.curriculum.{order, seed,
    topic_key, difficulty_key}``; the seed falls back to ``data.seed``, then 0."""
    data_config = data_config or {}
    section = data_config.get("curriculum", None) or {}
    if not isinstance(section, Mapping):
        raise ValueError(f"data.curriculum must be a mapping of settings; got {section!r}")
    unknown = set(section) - {"order", "seed", "topic_key", "difficulty_key"}
    if unknown:
        raise ValueError(
            f"data.curriculum has unknown key(s) {sorted(unknown)}; expected order, seed, topic_key, difficulty_key"
        )
    seed = section.get("seed", None)
    if seed is None:
        seed = data_config.get("seed", None)
    return {
        "order": section.get("order", "shuffle"),
        "seed": 0 if seed is None else int(seed),
        "topic_key": section.get("topic_key", None),
        "difficulty_key": section.get("difficulty_key", None),
    }


class CurriculumSampler(Sampler[int]):
    """Yields the dataset's indices in a curriculum order (``shuffle``, ``topic``, ``difficulty``,
    ``topic_then_difficulty``; see :func:`ebpo.curriculum.order_indices`).

    Every epoch is a full permutation; epoch ``e`` uses seed ``seed + e``, so blocks are reshuffled
    inside between epochs while the curriculum stays. ``state_dict`` / ``load_state_dict`` record the
    epoch and the position, so torchdata's ``StatefulDataLoader`` (verl's loader) resumes mid-epoch.

    Settings come from keyword arguments or, when they are not given, from ``data_config.curriculum``
    (verl: ``+data.curriculum.order=topic``).
    """

    def __init__(
        self,
        data_source: Sized,
        data_config: Mapping | None = None,
        *,
        order: str | None = None,
        seed: int | None = None,
        topic_key: str | None = None,
        difficulty_key: str | None = None,
    ) -> None:
        settings = curriculum_settings(data_config)
        self.data_source = data_source
        self.order = order if order is not None else settings["order"]
        self.seed = int(seed if seed is not None else settings["seed"])
        self.topic_key = topic_key if topic_key is not None else settings["topic_key"]
        self.difficulty_key = (
            difficulty_key if difficulty_key is not None else settings["difficulty_key"]
        )
        check_int("seed", self.seed, low=0)
        # Build epoch 0 now so a bad order or a missing column fails when the trainer starts.
        self._cache: tuple[int, list[int]] = (0, self._compute(0))
        self.epoch = 0
        self.yielded = 0
        self._resume_at: int | None = None

    def indices(self, epoch: int = 0) -> list[int]:
        """The permutation for ``epoch``."""
        if self._cache[0] != epoch:
            self._cache = (epoch, self._compute(epoch))
        return self._cache[1]

    def __iter__(self) -> Iterator[int]:
        start = self._resume_at or 0
        self._resume_at = None
        self.yielded = start
        for index in self.indices(self.epoch)[start:]:
            self.yielded += 1
            yield index
        # Only a completed pass moves on to the next epoch's permutation.
        self.epoch += 1
        self.yielded = 0

    def __len__(self) -> int:
        return len(self.data_source)

    def set_epoch(self, epoch: int) -> None:
        """Use the permutation of ``epoch`` next (DistributedSampler's convention)."""
        self.epoch = int(epoch)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "yielded": self.yielded, "seed": self.seed}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        if "epoch" not in state or "yielded" not in state:
            raise ValueError(f"state must hold 'epoch' and 'yielded'; got keys {sorted(state)}")
        if int(state.get("seed", self.seed)) != self.seed:
            raise ValueError(
                f"state was saved with seed {state['seed']}, this sampler has seed {self.seed}"
            )
        self.epoch = int(state["epoch"])
        self._resume_at = int(state["yielded"])

    def _compute(self, epoch: int) -> list[int]:
        return curriculum_order(
            self.data_source,
            self.order,
            seed=self.seed + epoch,
            topic_key=self.topic_key,
            difficulty_key=self.difficulty_key,
        )


def verl_overrides(
    order: str,
    *,
    seed: int = 0,
    topic_key: str | None = None,
    difficulty_key: str | None = None,
) -> list[str]:
    """Hydra overrides that make verl 0.9.x train on a curriculum order through ``data.custom_cls``
    and :class:`CurriculumRLHFDataset` (route 2 of this module's docstring)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}; got {order!r}")
    overrides = [
        "data.shuffle=False",
        "data.custom_cls.path=pkg://ebpo.integrations.verl.curriculum_sampler",
        "data.custom_cls.name=CurriculumRLHFDataset",
        f"+data.curriculum.order={order}",
        f"+data.curriculum.seed={int(seed)}",
    ]
    if topic_key:
        overrides.append(f"+data.curriculum.topic_key={topic_key}")
    if difficulty_key:
        overrides.append(f"+data.curriculum.difficulty_key={difficulty_key}")
    return overrides


def _build_curriculum_rlhf_dataset() -> type:
    from verl.utils.dataset.rl_dataset import RLHFDataset  # optional heavy dependency (ebpo[verl])

    class CurriculumRLHFDataset(RLHFDataset):
        """verl's ``RLHFDataset`` with its rows sorted into a curriculum order once read
        (``data.curriculum.order``; see :class:`CurriculumSampler` for the settings). Use it with
        ``data.shuffle=False`` so verl's ``SequentialSampler`` walks that order."""

        #: the rows verl read (a ``datasets.Dataset``); declared for the type checker, which sees
        #: verl's base class as untyped (an annotation only: nothing is assigned at class level)
        dataframe: Any

        def _read_files_and_tokenize(self) -> None:
            # Sorting here (rather than in __init__) also covers verl re-reading the files on resume.
            super()._read_files_and_tokenize()
            settings = curriculum_settings(self.config)
            if settings["order"] == "shuffle":
                return
            if self.config.get("shuffle", False):
                raise ValueError(
                    f"data.curriculum.order={settings['order']!r} needs data.shuffle=False: a shuffling "
                    "sampler would undo the order"
                )
            order = curriculum_order(
                self.dataframe,
                settings["order"],
                seed=settings["seed"],
                topic_key=settings["topic_key"],
                difficulty_key=settings["difficulty_key"],
            )
            self.dataframe = self.dataframe.select(order)

    # Pickle (spawned DataLoader workers) finds the class again through the module __getattr__.
    CurriculumRLHFDataset.__module__ = __name__
    CurriculumRLHFDataset.__qualname__ = "CurriculumRLHFDataset"
    return CurriculumRLHFDataset


_LAZY: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    # PEP 562: verl's loader does getattr(module, "CurriculumRLHFDataset"); build the subclass then,
    # so importing this module never imports verl.
    if name == "CurriculumRLHFDataset":
        if name not in _LAZY:
            _LAZY[name] = _build_curriculum_rlhf_dataset()
        return _LAZY[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
