"""ebpo.data.templates: the DAPO, boxed and raw prompt templates, chat messages and the prompt a
model sees."""

from __future__ import annotations

import pytest

from ebpo.data.templates import (
    DAPO_PREFIX,
    DAPO_SUFFIX,
    TEMPLATES,
    apply_template,
    build_messages,
    dapo_prompt,
    render_prompt,
    strip_dapo_template,
)

PROBLEM = "Let $x$ be a real number with $x^2 = 4$ and $x > 0$.\n\nFind $x$."


def test_the_dapo_template_asks_for_a_last_answer_line():
    text = dapo_prompt(PROBLEM)
    assert text == DAPO_PREFIX + PROBLEM + DAPO_SUFFIX
    assert text.startswith("Solve the following math problem step by step.")
    assert "The last line of your response should be of the form Answer: $Answer" in text
    assert text.endswith('Remember to put your answer on its own line after "Answer:".')
    assert text.count(PROBLEM) == 1


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_template_renders_the_problem_once(name):
    text = apply_template(PROBLEM, name)
    assert text.count(PROBLEM) == 1
    expected = {
        "dapo": dapo_prompt(PROBLEM),
        "boxed": PROBLEM
        + "\nPlease reason step by step, and put your final answer within \\boxed{}.",
        "raw": PROBLEM,
    }[name]
    assert text == expected
    assert build_messages(PROBLEM, name) == [{"role": "user", "content": expected}]


def test_strip_dapo_template_keeps_a_multi_paragraph_problem_whole():
    assert strip_dapo_template(dapo_prompt(PROBLEM)) == PROBLEM
    assert strip_dapo_template("  " + dapo_prompt(PROBLEM) + "\n") == PROBLEM
    assert strip_dapo_template(f"  {PROBLEM}  ") == PROBLEM  # no template: stripped only


def test_bad_template_names_are_refused_with_the_choices():
    with pytest.raises(
        ValueError, match=r"template must be one of \['boxed', 'dapo', 'raw'\], got 'cot'"
    ):
        apply_template(PROBLEM, "cot")
    with pytest.raises(ValueError, match="template must be one of"):
        build_messages(PROBLEM, "DAPO")
    with pytest.raises(ValueError, match="template must be one of"):
        render_prompt(PROBLEM, template="qwen")


class _RecordingTokenizer:
    chat_template = "{{ messages }}"

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, **kwargs):
        self.calls.append((messages, kwargs))
        return "|".join(m["content"] for m in messages)


def test_render_prompt_system_message_and_chat_template_options():
    assert render_prompt(PROBLEM, template="raw", system="Be brief.") == f"Be brief.\n\n{PROBLEM}"
    tok = _RecordingTokenizer()
    text = render_prompt(PROBLEM, tok, template="boxed", system="sys", enable_thinking=False)
    assert text == "sys|" + apply_template(PROBLEM, "boxed")
    messages, kwargs = tok.calls[0]
    assert messages == build_messages(PROBLEM, "boxed", "sys")
    assert kwargs == {"tokenize": False, "add_generation_prompt": True, "enable_thinking": False}
    assert render_prompt(PROBLEM, tok, chat=False) == dapo_prompt(PROBLEM)  # plain text on request
    with pytest.raises(ValueError, match="chat=True needs a tokenizer with a chat_template"):
        render_prompt(PROBLEM, chat=True)


# --------------------------------------------------------------------------------- templates
def test_templates_round_trip_and_wrap():
    problem = "What is $1+1$?"
    assert strip_dapo_template(dapo_prompt(problem)) == problem
    assert strip_dapo_template(problem) == problem
    assert apply_template(problem, "raw") == problem
    assert apply_template(problem, "boxed").endswith("\\boxed{}.")
    assert build_messages(problem, system="sys") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": dapo_prompt(problem)},
    ]
    with pytest.raises(ValueError, match="template must be"):
        apply_template(problem, "cot")


def test_render_prompt_uses_the_chat_template_of_instruct_tokenizers():
    from ebpo.evaluation.models import build_char_tokenizer

    tok = build_char_tokenizer()
    problem = "What is $1+1$?"
    expected = tok.apply_chat_template(
        [{"role": "user", "content": dapo_prompt(problem)}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert render_prompt(problem, tok) == expected
    assert render_prompt(problem, tok, chat=False) == dapo_prompt(problem)
    assert render_prompt(problem) == dapo_prompt(problem)
    tok.chat_template = None
    assert render_prompt(problem, tok) == dapo_prompt(problem)  # base model: plain text
    with pytest.raises(ValueError, match="chat_template"):
        render_prompt(problem, tok, chat=True)
