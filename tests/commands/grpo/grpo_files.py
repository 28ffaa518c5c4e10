"""The files an ``ebpo grpo`` run on CPU reads: a tiny local model and a JSONL of prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ebpo.evaluation.models import save_tiny_llama

#: a reward module (``parity_reward``) the untrained tiny model earns about half the time (the
#: math reward: never), so that rewards, advantages and losses differ between estimators and seeds
PARITY_REWARDS = """\
def parity_reward(completions, **kwargs):
    return [float((len(c) + sum(map(ord, c))) % 2) for c in completions]
"""


def write_model_and_prompts(root: Path, prompts: int, **model_options: Any) -> Path:
    """``root/model`` (a tiny Llama and its char tokenizer; ``model_options`` go to
    ``build_tiny_llama``) and ``root/data.jsonl`` (``prompts`` rows ``{"prompt": "a+a=",
    "answer": "2a"}``); returns ``root``."""
    save_tiny_llama(root / "model", **model_options)
    rows = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(prompts)]
    (root / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return root
