"""Reward edge cases, hand-computed.

- a gold answer longer than 1,000 characters: matched when it is a plain number, refused
  by `gold_problem` otherwise;
- NaN is never correct and never a usable gold answer; `inf` is not matched by text;
- answers that build huge numbers are refused by a size estimate before math-verify, so
  they cost microseconds instead of the timeout plus a worker restart.
"""

import math
import time

import pytest

from openrlhf_speed.rewards.math_reward import compare_answers, gold_problem, math_reward
from openrlhf_speed.rewards.size import MAX_DIGITS, estimated_digits, size_problem


class RecordingPool:
    """Stands in for the worker pool: records calls, answers "wrong" at once."""

    def __init__(self):
        self.calls = []

    def call(self, fn, *args, timeout_s):
        from openrlhf_speed.rewards.pool import CallOutcome

        self.calls.append(args)
        return CallOutcome("ok", "wrong")


# 5,000 digits: 1234567890 repeated 500 times.
LONG = "1234567890" * 500


def test_long_numeric_gold_is_matched():
    pool = RecordingPool()
    assert math_reward(f"So the answer is \\boxed{{{LONG}}}.", LONG, pool=pool).status == "correct"
    assert math_reward(f"The answer is {LONG}", LONG, pool=pool).reward == 1.0  # last-number extraction
    off_by_one = LONG[:-1] + "1"
    result = math_reward(f"\\boxed{{{off_by_one}}}", LONG, pool=pool)
    assert (result.reward, result.status) == (0.0, "wrong")
    # Same value, other spelling: leading zeros, a trailing ".000".
    assert math_reward(f"\\boxed{{00{LONG}.000}}", LONG, pool=pool).status == "correct"
    assert pool.calls == []  # never handed to math-verify
    assert gold_problem(LONG) is None


def test_long_non_numeric_gold_is_refused_with_a_reason():
    gold = "x + " * 300  # 1,200 characters of LaTeX-ish text
    reason = gold_problem(gold)
    assert reason is not None and "1199 characters" in reason and "not a plain number" in reason
    result = math_reward("\\boxed{x}", gold, pool=RecordingPool())
    assert result.status == "error" and "unusable gold label" in result.detail


@pytest.mark.parametrize("gold", ["nan", "NaN", float("nan"), "$nan$", "\\boxed{nan}"])
def test_nan_gold_is_refused(gold):
    assert "not a number" in gold_problem(gold)
    result = math_reward("\\boxed{nan}", gold, pool=RecordingPool())
    assert (result.reward, result.status) == (0.0, "error")


def test_nan_answer_is_never_correct():
    pool = RecordingPool()
    assert compare_answers("nan", "nan", pool=pool).reward == 0.0  # was 1.0 by string equality
    assert compare_answers("NaN", "5", pool=pool).status == "wrong"
    assert pool.calls == []


def test_inf_is_not_matched_by_text():
    # Equal text is not enough for an infinity: the pair itself goes to math-verify, and its
    # verdict comes back whatever it is (this stand-in answers "wrong" to everything).
    pool = RecordingPool()
    for answer in ("inf", "\\infty", "-\\infty"):
        assert compare_answers(answer, answer, pool=pool).status == "wrong", answer
    assert pool.calls == [("inf", "inf"), ("\\infty", "\\infty"), ("-\\infty", "-\\infty")]
    assert compare_answers("7", "7", pool=pool).status == "correct" and len(pool.calls) == 3  # plain text: in process
    # The real math-verify reads every spelling as infinity, with its sign.
    assert compare_answers("\\infty", "inf").status == "correct"
    assert compare_answers("infinity", "\\infty").status == "correct"
    assert compare_answers("-\\infty", "\\infty").status == "wrong"


@pytest.mark.parametrize(
    "text, digits",
    [
        ("5", math.log10(5)),
        ("2^{10}", 10 * math.log10(2)),  # 1024: 3.01
        ("2**100", 100 * math.log10(2)),  # 30.1
        ("10^{10^{10}}", 1e10),  # 10^(10^10) has 10^10 + 1 digits
        ("10^{-10^{10}}", 1e10),  # tiny, but sympy builds 10^(10^10) first
        ("100!", 100 * 2),  # n log10 n bounds log10(100!) = 157.97
        ("1000000!", 1e6 * 6),  # log10(10^6!) = 5.57e6 <= 6e6
        ("\\frac{2^{10}}{2^{5}}", 15 * math.log10(2)),  # the group adds up: 3.01 + 1.51
        ("x^{10^{10}}", 0.0),  # symbolic base: sympy does not expand it
    ],
)
def test_estimated_digits_hand_cases(text, digits):
    assert estimated_digits(text) == pytest.approx(digits, rel=1e-9, abs=1e-9)


def test_tower_and_deep_nesting_are_infinite():
    # 2^2^2^2^2^2 = 2^65536 ... its log10 is 2^65536 * 0.301: past any float.
    assert estimated_digits("2^{2^{2^{2^{2^2}}}}") == math.inf
    assert estimated_digits("{" * 60 + "1" + "}" * 60) == math.inf
    assert size_problem("2^{2^{2^{2^{2^2}}}}") is not None
    assert size_problem("2^{10^{4}}") is None  # 3,011 digits: math-verify's job
    assert MAX_DIGITS == 1e5


@pytest.mark.parametrize("answer", ["2^{2^{2^{2^{2^2}}}}", "10^{10^{10}}", "1000000!", "99999999!", "10^{10^{7}}"])
def test_huge_answers_are_refused_fast_without_a_worker(answer):
    pool = RecordingPool()
    t0 = time.perf_counter()
    result = math_reward(f"\\boxed{{{answer}}}", "42", pool=pool)
    elapsed = time.perf_counter() - t0
    assert (result.reward, result.status) == (0.0, "refused")
    assert pool.calls == [] and elapsed < 0.05


def test_batch_of_huge_answers_is_bounded():
    # 200 pathological responses: before, each cost the 5 s timeout plus a worker restart.
    pool = RecordingPool()
    t0 = time.perf_counter()
    for i in range(200):
        assert math_reward(f"\\boxed{{10^{{10^{{{10 + i}}}}}}}", "42", pool=pool).status == "refused"
    assert time.perf_counter() - t0 < 1.0 and pool.calls == []
