"""Shared by the simulation tests: bandit sizes and a row lookup."""

from __future__ import annotations

from ebpo.lab import simulation as sim

SMALL = sim.BanditConfig(num_prompts=192, prompts_per_step=32)  # per-prompt table
SHARED = sim.BanditConfig(num_prompts=192, num_heldout=32, prompts_per_step=32, shared=True)


def one_row(rows, **match):
    """The single row whose entries equal ``match``."""
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, len(found))
    return found[0]
