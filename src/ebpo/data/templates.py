"""Prompt templates for math RLVR.

- ``"dapo"``: the DAPO-Math-17K prompt (Yu et al. 2025, "DAPO"), used by the EBPO paper for both
  training and evaluation. It asks for a last line ``Answer: $Answer``, which
  :func:`ebpo.rewards.extract_answer` reads.
- ``"boxed"``: the Qwen-Math style "put your final answer within \\boxed{}" instruction.
- ``"raw"``: the problem text alone.

For instruct/chat models the templated text becomes the user message and the tokenizer's own chat
template renders it (:func:`render_prompt`); base models get the templated text as is.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DAPO_PREFIX",
    "DAPO_SUFFIX",
    "TEMPLATES",
    "apply_template",
    "build_messages",
    "dapo_prompt",
    "render_prompt",
    "strip_dapo_template",
]

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of "
    "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
BOXED_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."


def dapo_prompt(problem: str) -> str:
    """The DAPO-Math template around ``problem`` (identical to the user message of every
    DAPO-Math-17K row)."""
    return f"{DAPO_PREFIX}{problem}{DAPO_SUFFIX}"


def strip_dapo_template(text: str) -> str:
    """Inverse of :func:`dapo_prompt`: the bare problem of a DAPO-templated message (text without
    the template is returned stripped but otherwise unchanged)."""
    text = text.strip()
    if text.startswith(DAPO_PREFIX.strip()[:60]):
        head, sep, rest = text.partition("\n\n")
        text = rest if sep else text
    suffix = DAPO_SUFFIX.strip()
    if text.endswith(suffix):
        text = text[: -len(suffix)]
    return text.strip()


def _boxed(problem: str) -> str:
    return f"{problem}{BOXED_SUFFIX}"


def _raw(problem: str) -> str:
    return problem


TEMPLATES = {"dapo": dapo_prompt, "boxed": _boxed, "raw": _raw}


def apply_template(problem: str, template: str = "dapo") -> str:
    """``problem`` wrapped in the named template (one of :data:`TEMPLATES`)."""
    if template not in TEMPLATES:
        raise ValueError(f"template must be one of {sorted(TEMPLATES)}, got {template!r}")
    return TEMPLATES[template](problem)


def build_messages(
    problem: str, template: str = "dapo", system: str | None = None
) -> list[dict[str, str]]:
    """Chat messages for ``problem``: an optional system message and the templated user turn
    (the conversational format TRL and verl datasets use)."""
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": apply_template(problem, template)})
    return messages


def render_prompt(
    problem: str,
    tokenizer: Any = None,
    *,
    template: str = "dapo",
    chat: bool | None = None,
    system: str | None = None,
    **chat_template_kwargs: Any,
) -> str:
    """The text a model is prompted with. ``chat=None`` uses the tokenizer's chat template when it
    has one (instruct models) and the plain templated text otherwise (base models); extra keyword
    arguments go to ``apply_chat_template`` (e.g. ``enable_thinking=False`` for Qwen3)."""
    has_chat = tokenizer is not None and getattr(tokenizer, "chat_template", None)
    if chat is None:
        chat = bool(has_chat)
    if chat and not has_chat:
        raise ValueError("chat=True needs a tokenizer with a chat_template")
    if not chat:
        text = apply_template(problem, template)
        return f"{system}\n\n{text}" if system else text
    return tokenizer.apply_chat_template(
        build_messages(problem, template, system),
        tokenize=False,
        add_generation_prompt=True,
        **chat_template_kwargs,
    )
