"""The task cells of the CPU loop and how many distinct training problems they hold. Imports
nothing from verl (the smoke's settings check it before anything slow is imported)."""

from __future__ import annotations

from ebpo.lab.cpu_task.task import fixed_problems

__all__ = ["TIERS", "training_problems"]

#: the task cells of the CPU loop: one-digit problems of every topic
TIERS = (1,)
#: more than any one-digit cell holds: ``fixed_problems`` then gives all of a cell's problems
_WHOLE_CELL = 100


def training_problems() -> int:
    """How many distinct problems the task's training split has in :data:`TIERS` (191): the most
    one epoch can hold, since ``ebpo verl prepare-data`` (DAPO-Math-17K's loader) drops repeated
    prompts."""
    return len(fixed_problems("train", _WHOLE_CELL, tiers=TIERS))
