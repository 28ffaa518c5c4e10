"""The TRL recipes of the paper's methods, shipped with the package: ``<model>/<method>.yaml``.

Seven methods (``ebpo_batch``, ``ebpo_topic``, ``ebpo_diff``, ``grpo``, ``dr_grpo``, ``dapo``,
``entropy_mech``) for two models (``qwen3-1.7b``: full fine-tune; ``qwen3-8b-lora``: LoRA), as
``ebpo grpo`` (TRL's ``trl grpo`` with :class:`~ebpo.integrations.trl.EBPOTrainer`) reads them.
A recipe's name is its path below this folder without ``.yaml``: ``qwen3-1.7b/ebpo_batch``.
``README.md`` beside them explains every choice (``ebpo grpo recipe --readme`` prints it).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["RECIPES_DIR", "recipe_description", "recipe_names", "recipe_path", "readme_text"]

#: the folder of the shipped recipes (package data: in a wheel, beside this module)
RECIPES_DIR = Path(__file__).resolve().parent


def recipe_names() -> list[str]:
    """The shipped recipes' names (``<model>/<method>``), sorted."""
    return sorted(p.relative_to(RECIPES_DIR).with_suffix("").as_posix() for p in _files())


def recipe_path(name: str) -> Path | None:
    """The shipped recipe called ``name`` (``qwen3-1.7b/ebpo_batch``, ``.yaml`` optional), or None
    when no shipped recipe has that name."""
    stem = name.removesuffix(".yaml")
    return next((p for p in _files() if _name(p) == stem), None)


def recipe_description(name: str) -> str:
    """The first line of the recipe's header comment (what it runs), without the ``#``."""
    path = recipe_path(name)
    if path is None:
        raise ValueError(f"no shipped recipe {name!r}; expected one of {recipe_names()}")
    first = path.read_text(encoding="utf-8").splitlines()[0]
    return first.lstrip("# ").strip()


def readme_text() -> str:
    """The recipes' README: the settings, the batch arithmetic, the data, what was not checked."""
    return (RECIPES_DIR / "README.md").read_text(encoding="utf-8")


def _files() -> list[Path]:
    return [p for p in RECIPES_DIR.glob("*/*.yaml") if p.is_file()]


def _name(path: Path) -> str:
    return path.relative_to(RECIPES_DIR).with_suffix("").as_posix()
