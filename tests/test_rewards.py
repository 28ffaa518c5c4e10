"""ebpo.rewards: extraction, equivalence, time limits, adapters."""

from __future__ import annotations

import inspect
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebpo import rewards
from ebpo.rewards import (
    compute_score,
    extract_answer,
    make_trl_reward,
    overlong_penalty,
    reset_reward_stats,
    reward_stats,
    score_math,
    score_math_batch,
    score_math_detailed,
)

# (response, ground truth) pairs that are mathematically equal ...
EQUIVALENT = [
    ("Step 1 ...\nAnswer: 34", "34"),
    ("The sum is 12.\nanswer:   012", "12"),
    ("so the result is $\\boxed{\\frac{1}{2}}$.", "0.5"),
    ("Answer: 1/2", "\\frac{1}{2}"),
    ("Answer: $\\dfrac{3}{4}$", "\\frac34"),
    ("Answer: 0.75", "\\frac{3}{4}"),
    ("Answer: 34.0", "34"),
    ("Answer: 1,000", "1000"),
    ("Answer: $2\\sqrt{3}$", "\\sqrt{12}"),
    ("Answer: (x+1)^2", "x^2+2x+1"),
    ("Answer: x = 5", "5"),
    ("Answer: $(1, 2]$", "(1,2]"),
    ("\\boxed{[1,2)}", "[1, 2)"),
    ("Answer: \\{2, 1\\}", "\\{1,2\\}"),
    ("Answer: 3, 2", "2, 3"),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("Answer: (3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("Answer: 90^\\circ", "90"),
    ("Answer: \\boxed{7}", "7"),
    ("We get \\boxed{ 5 } and then Answer: 6", "6"),  # the later marker wins
    ("Answer: 5\n... on reflection \\boxed{6}", "6"),
]
# ... and pairs that are not.
NOT_EQUIVALENT = [
    ("Answer: 35", "34"),
    ("Answer: 0.333", "\\frac{1}{3}"),
    ("Answer: 12.0001", "12"),
    ("\\boxed{\\frac{1}{3}}", "0.5"),
    ("Answer: (1, 2)", "(1,2]"),
    ("Answer: \\{1, 2, 3\\}", "\\{1,2\\}"),
    ("Answer: x^2+1", "x^2-1"),
    ("Answer: \\pi", "3.14"),
    ("Answer: 6\n... on reflection \\boxed{5}", "6"),
    ("I cannot solve this.", "6"),
    ("\\boxed{6", "6"),  # unterminated box: no answer
    ("", "6"),
]


def _reference(response: str, gold: str) -> float:
    """Slow obvious reference: our extraction, then math-verify on both sides, no fast paths."""
    from math_verify import parse, verify

    prediction = extract_answer(response)
    if prediction is None:
        return 0.0
    gold = rewards._strip_math_delimiters(gold)
    return float(verify(parse(f"${gold}$"), parse(f"${prediction}$")))


@pytest.mark.parametrize(("response", "gold"), EQUIVALENT)
def test_equivalent_answers_score_one(response, gold):
    assert score_math(response, gold) == 1.0


@pytest.mark.parametrize(("response", "gold"), NOT_EQUIVALENT)
def test_non_equivalent_answers_score_zero(response, gold):
    assert score_math(response, gold) == 0.0


def test_fast_paths_agree_with_plain_math_verify():
    for response, gold in EQUIVALENT + NOT_EQUIVALENT:
        result = score_math_detailed(response, gold)
        if result.status in ("exact", "integer"):
            assert result.score == _reference(response, gold), (response, gold)


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Answer: 42", "42"),
        ("**Answer:** 42", "42"),
        ("**Answer**: $42$.", "42"),
        ("Final answer: $17$.", "17"),
        ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),
        ("\\fbox{9}", "9"),
        ("text \\boxed {4} text", "4"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("Answer: $\\boxed{5}$", "5"),
        ("Answer:\n", None),
        ("Answer:\n42", "42"),
        ("Answer: 5\nI hope that is the right answer:", "5"),
        ("\\boxed{unclosed", None),
        ("no markers at all", None),
    ],
)
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200), st.text(max_size=30))
def test_never_raises_and_returns_binary(response, gold):
    assert score_math(response, gold, timeout=1.0) in (0.0, 1.0)


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet="\\{}$^_()[],.0123456789xboxedfracAnswer: \n", max_size=120))
def test_never_raises_on_latexish_garbage(response):
    assert score_math(response, "1", timeout=1.0) in (0.0, 1.0)


def test_non_string_inputs_are_coerced():
    assert score_math("Answer: 27", 27.0) == 1.0
    assert score_math(None, "3") == 0.0  # type: ignore[arg-type]


# --------------------------------------------------------------------------------- time limits
def test_megabyte_response_is_fast():
    response = "x" * 1_000_000 + " so \\boxed{3}"
    start = time.perf_counter()
    assert score_math(response, "3") == 1.0
    garbage = "$1+" * 300_000  # the kind of input that makes math-verify's regexes take ~10 s
    assert score_math(garbage, "3") == 0.0
    assert time.perf_counter() - start < 3.0


def test_deeply_nested_braces_rejected_without_parsing():
    for depth in (40, 5_000, 200_000):
        response = "\\boxed{" + "{" * depth + "1" + "}" * depth + "}"
        start = time.perf_counter()
        result = score_math_detailed(response, "1")
        assert result.score == 0.0 and result.status == "too_long"
        assert time.perf_counter() - start < 1.0


def test_slow_expression_times_out_in_main_thread():
    reset_reward_stats()
    handler_before = signal.getsignal(signal.SIGALRM)
    start = time.perf_counter()
    result = score_math_detailed("Answer: 9^{9^{9}}", "3", timeout=0.5)
    elapsed = time.perf_counter() - start
    assert result.status == "timeout" and result.score == 0.0
    assert elapsed < 3.0
    assert reward_stats()["timeout"] == 1
    # the timer and the previous SIGALRM handler are restored
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0.0
    assert signal.getsignal(signal.SIGALRM) is handler_before


def test_outer_alarm_is_left_alone():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 60.0)
        assert score_math("Answer: \\frac{2}{4}", "0.5") == 1.0  # goes to a helper process
        remaining = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 0.0 < remaining <= 60.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not fired


def test_worker_thread_uses_helper_process_with_time_limit():
    def in_thread(fn):
        with ThreadPoolExecutor(1) as pool:  # like verl's reward loop (run_in_executor)
            return pool.submit(fn).result()

    assert in_thread(lambda: score_math("so \\boxed{\\frac{1}{2}}", "0.5")) == 1.0  # warm-up
    reset_reward_stats()
    start = time.perf_counter()
    result = in_thread(lambda: score_math_detailed("Answer: 9^{9^{9}}", "3", timeout=0.5))
    assert result.status == "timeout"
    assert time.perf_counter() - start < 0.5 + rewards._KILL_GRACE + 1.0
    assert reward_stats()["timeout"] == 1
    assert in_thread(lambda: compute_score("math", "Answer: 0.5", "\\frac{1}{2}"))["score"] == 1.0


@pytest.mark.slow  # starts two helper processes (~5 s each on a loaded 2-core machine)
def test_stuck_helper_process_is_killed_and_replaced(monkeypatch):
    monkeypatch.setattr(rewards, "_KILL_GRACE", 0.3)
    assert score_math_detailed("Answer: \\frac{2}{4}", "0.5", isolation="process").score == 1.0
    worker = rewards._POOL._idle[-1]
    os.kill(worker.proc.pid, signal.SIGSTOP)  # a process that no longer answers (stuck in C code)
    reset_reward_stats()
    start = time.perf_counter()
    result = score_math_detailed("Answer: \\frac{2}{4}", "0.5", timeout=0.3, isolation="process")
    assert result.status == "timeout"
    assert time.perf_counter() - start < 3.0
    assert reward_stats()["worker_restarts"] == 1
    assert worker.proc.poll() is not None  # killed
    assert score_math_detailed("Answer: \\frac{2}{4}", "0.5", isolation="process").score == 1.0


@pytest.mark.slow  # starts its own helper process
def test_helper_pool_is_capped_and_shared_by_threads():
    pool = rewards._WorkerPool(max_workers=1)
    try:
        with ThreadPoolExecutor(4) as threads:
            statuses = list(threads.map(lambda i: pool.verify(f"\\frac{{{i}}}{{4}}", f"{i / 4}", 5.0), range(1, 9)))
        assert statuses == ["verified"] * 8
        assert pool.size == 1
    finally:
        pool.shutdown()
    assert pool.size == 0


@pytest.mark.slow  # starts a second helper process
def test_batch_with_workers_matches_sequential():
    pairs = EQUIVALENT[:8] + NOT_EQUIVALENT[:6]
    responses, golds = zip(*pairs, strict=True)
    sequential = [r.score for r in score_math_batch(responses, golds)]
    parallel = [r.score for r in score_math_batch(responses, golds, num_workers=2)]
    assert sequential == parallel == [score_math(r, g) for r, g in pairs]


def test_bad_arguments():
    with pytest.raises(ValueError, match="timeout"):
        score_math("Answer: 1", "1", timeout=0)
    with pytest.raises(ValueError, match="isolation"):
        score_math_detailed("Answer: 1", "1", isolation="thread")
    with pytest.raises(ValueError, match="same length"):
        score_math_batch(["a"], ["1", "2"])


# -------------------------------------------------------------------------------- overlong
def _overlong_reference(length, max_length, buffer_length, factor):
    if length <= max_length - buffer_length:
        return 0.0
    if length <= max_length:
        return factor * ((max_length - buffer_length) - length) / buffer_length
    return -factor


def test_overlong_penalty_matches_dapo_formula():
    for length in range(0, 130, 3):
        for factor in (1.0, 0.5):
            got = overlong_penalty(length, max_length=100, buffer_length=40, penalty_factor=factor)
            assert got == pytest.approx(_overlong_reference(length, 100, 40, factor))
    assert overlong_penalty(100, max_length=100, buffer_length=40) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="buffer_length"):
        overlong_penalty(5, max_length=10, buffer_length=20)


# -------------------------------------------------------------------------------- adapters
def test_trl_reward_signature_and_columns():
    reward = make_trl_reward()
    params = list(inspect.signature(reward).parameters.values())
    assert [p.name for p in params[:2]] == ["prompts", "completions"]
    assert params[-1].kind is inspect.Parameter.VAR_KEYWORD
    logged = {}
    out = reward(
        prompts=["p1", "p2", "p3"],
        completions=["Answer: 4", [{"role": "assistant", "content": "\\boxed{\\frac12}"}], "no idea"],
        answer=["4", "0.5", "1"],
        completion_ids=[[1, 2], [3], [4]],
        trainer_state=None,
        log_metric=lambda name, value: logged.__setitem__(name, value),
        log_extra=lambda *a: None,
    )
    assert out == [1.0, 1.0, 0.0]
    assert logged == {"math_reward/timeouts": 0.0, "math_reward/no_answer": 1.0}
    assert reward.__name__ == "math_reward"


def test_trl_reward_overlong_and_reward_model_column():
    reward = make_trl_reward(overlong=(10, 4))
    out = reward(
        prompts=["p", "p"],
        completions=["Answer: 3", "Answer: 3"],
        reward_model=[{"ground_truth": "3", "style": "rule"}] * 2,
        completion_ids=[list(range(5)), list(range(8))],
    )
    assert out == pytest.approx([1.0, 1.0 + (6 - 8) / 4])
    with pytest.raises(ValueError, match="'answer'"):
        make_trl_reward()(prompts=["p"], completions=["Answer: 1"], solution=["1"])


def test_verl_compute_score():
    assert compute_score("math_dapo", "...\nAnswer: 34", "34") == {"score": 1.0, "acc": 1.0, "timed_out": 0.0}
    assert compute_score("math_dapo", "Answer: 33", "34", extra_info={"index": 0})["score"] == 0.0
    params = list(inspect.signature(compute_score).parameters)
    assert params[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    # verl passes reward_kwargs from the config and may add its own keywords
    assert compute_score("m", "Answer: 9^{9^{9}}", "3", timeout=0.3, reward_router_address=None)["timed_out"] == 1.0


@pytest.mark.verl
@pytest.mark.slow  # importing verl takes ~15 s here
def test_verl_loads_compute_score_by_package_path():
    from verl.utils.import_utils import load_extern_object

    fn = load_extern_object(module_path="pkg://ebpo.rewards", object_name="compute_score")
    assert fn is compute_score
    assert fn(data_source="math_dapo", solution_str="Answer: 2", ground_truth="2", extra_info=None)["score"] == 1.0


def test_stats_count_calls():
    reset_reward_stats()
    score_math("Answer: 1", "1")
    score_math("nothing", "1")
    stats = reward_stats()
    assert stats["calls"] == 2 and stats["correct"] == 1 and stats["no_answer"] == 1
    assert threading.current_thread() is threading.main_thread()
