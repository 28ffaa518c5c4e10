"""Test doubles shared by the evaluation tests: a scripted generator and the dataset fixtures."""

from __future__ import annotations

from pathlib import Path

from ebpo.evaluation import Generation

FIXTURES = Path(__file__).parent.parent / "fixtures" / "datasets"


class ScriptedGenerator:
    """Test double for an LLM: answers problem i correctly on the first `correct[i]` samples."""

    def __init__(self, answers, correct):
        self.answers, self.correct, self.prompts = answers, correct, None

    def generate(self, prompts, n, progress=None):
        self.prompts = list(prompts)
        out = []
        for i, _ in enumerate(prompts):
            texts = [
                f"work...\nAnswer: {self.answers[i]}"
                if j < self.correct[i]
                else "work...\nAnswer: -1"
                for j in range(n)
            ]
            out.append([Generation(t, len(t), True) for t in texts])
            if progress is not None:
                progress.update(n)
        return out
