"""Fixtures of the evaluation tests: a tiny random Llama with a character-level tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny():
    from ebpo.evaluation.models import build_char_tokenizer, build_tiny_llama

    tokenizer = build_char_tokenizer()
    return build_tiny_llama(tokenizer, max_position_embeddings=2048, seed=0), tokenizer
