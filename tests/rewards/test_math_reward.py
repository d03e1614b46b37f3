"""math_reward: equivalence through math-verify workers, fast path, statuses, counters.

Runs against the process-wide default pool (2 spawn workers, started on first use).
"""

import threading
import time

import pytest

import openrlhf_speed.rewards.math_reward as mr
from openrlhf_speed.rewards.math_reward import (
    STATUSES,
    RewardConfig,
    compare_answers,
    math_reward,
    reset_reward_counters,
    reward_counters,
)
from openrlhf_speed.rewards.pool import WorkerPool

SLACK_S = 30.0
GENEROUS_TIMEOUT_S = 60.0  # equivalence tests must not flake on a loaded machine


class ExplodingPool:
    """Stands in for the pool where a test proves math-verify is not needed."""

    def call(self, *args, **kwargs):
        raise AssertionError("worker pool must not be used on the fast path")


@pytest.mark.parametrize(
    "response, gold",
    [
        (r"Thus \boxed{\frac{1}{2}}.", "0.5"),
        ("so 1/2", "0.5"),
        (r"\boxed{\frac{3}{4}}", "0.75"),
        (r"\boxed{\dfrac{3}{4}}", r"\frac{3}{4}"),
        ("12", "12.0"),
        ("-3", "-3"),
        (r"\boxed{x=5}", "5"),
        (r"\boxed{\sqrt{2}}", r"2^{1/2}"),
        (r"\boxed{2\pi}", r"$2\pi$"),
        ("total 1,234", "1234"),
        (r"\boxed{(1,2)}", r"(1, 2)"),
        (r"\boxed{x^2+2x+1}", r"(x+1)^2"),
        (r"\boxed{12}", r"The answer is \boxed{12}"),
    ],
)
def test_equivalent(response, gold):
    result = math_reward(response, gold, timeout_s=GENEROUS_TIMEOUT_S)
    assert (result.reward, result.status) == (1.0, "correct"), result


@pytest.mark.parametrize(
    "response, gold",
    [
        (r"\boxed{\frac{1}{3}}", "0.5"),
        ("13", "12"),
        ("-3", "3"),
        (r"\boxed{x=6}", "5"),
        (r"\boxed{\sqrt{3}}", r"\sqrt{2}"),
        ("0.76", "0.75"),
        (r"\boxed{2x}", "2"),
        (r"\boxed{" + "9" * 2000 + "}", "9"),  # too long for any gold: wrong without a worker
    ],
)
def test_not_equivalent(response, gold):
    result = math_reward(response, gold, timeout_s=GENEROUS_TIMEOUT_S)
    assert (result.reward, result.status) == (0.0, "wrong"), result


@pytest.mark.parametrize(
    "answer, gold", [("12", "12"), ("12", "12.0"), ("1,000", "1000"), ("3/4", "0.75"), ("7", "8")]
)
def test_fast_path_skips_math_verify(answer, gold):
    result = compare_answers(answer, gold, pool=ExplodingPool())
    assert result.status == ("wrong" if answer == "7" else "correct")


def test_no_answer():
    assert math_reward("I do not know.", "4").status == "no_answer"


@pytest.mark.parametrize(
    "response, gold",
    [(None, "1"), ({"a": 1}, "1"), (42, "1"), ("4", None), ("4", {"x": 1}), ("x" * (mr.MAX_RESPONSE_CHARS + 1), "1")],
)
def test_malformed_input_is_error_not_exception(response, gold):
    result = math_reward(response, gold)
    assert (result.reward, result.status) == (0.0, "error")


def test_bytes_response_is_decoded():
    assert math_reward(rb"\boxed{4}", "4").status == "correct"


@pytest.mark.parametrize(
    "response",
    [
        r"\boxed{" + r"\frac{" * 20 + "1" + "}{2}" * 20 + "}",  # nesting that hangs math-verify's parser
        r"\boxed{" + r"\frac{" * 300 + "1" + "}{2}" * 300 + "}",  # longer than any answer
        r"\boxed{\frac{1}{2}",  # unbalanced
        r"\boxed{\left( \right] \frac{ }",  # garbage LaTeX
        "9" * 10**6,  # 10^6-digit number
        r"\boxed{\begin{matrix} 1 & 2 \end{matrix}}",
    ],
)
def test_adversarial_input_scores_zero_without_raising(response):
    result = math_reward(response, r"\frac{1}{3}", timeout_s=2.0)
    assert result.reward == 0.0 and result.status in STATUSES


def test_hanging_math_verify_times_out_and_pool_recovers():
    pool = WorkerPool(num_workers=1, initializer=mr._warm_up_worker)
    try:
        assert compare_answers(r"\frac{2}{4}", "0.5", timeout_s=GENEROUS_TIMEOUT_S, pool=pool).status == "correct"
        t0 = time.monotonic()
        # Nested fractions hang math-verify's parser. (The factorial of 10^7 did too; the
        # size estimate now refuses it before any worker sees it: test_reward_edge_cases.)
        nested = r"\boxed{" + r"\frac{" * 20 + "1" + "}{2}" * 20 + "}"
        result = math_reward(nested, r"\frac{1}{3}", timeout_s=1.0, pool=pool)
        assert time.monotonic() - t0 < 1.0 + SLACK_S
        assert (result.reward, result.status) == (0.0, "timeout")
        assert compare_answers(r"\frac{2}{4}", "0.5", timeout_s=GENEROUS_TIMEOUT_S, pool=pool).status == "correct"
    finally:
        pool.close()


def test_counters_tally_each_status():
    reset_reward_counters()
    math_reward("7", "7")
    math_reward("8", "7")
    math_reward("nothing", "7")
    math_reward(None, "7")
    assert reward_counters() == {"correct": 1, "wrong": 1, "no_answer": 1, "timeout": 0, "refused": 0, "error": 1}


def test_concurrency_from_8_threads():
    cases = [
        (r"\boxed{\frac{1}{2}}", "0.5", "correct"),
        ("12", "12", "correct"),
        ("13", "12", "wrong"),
        (r"\boxed{\sqrt{4}}", "2", "correct"),
        (r"\boxed{x=3}", "4", "wrong"),
        ("none", "1", "no_answer"),
    ]
    reset_reward_counters()
    failures = []

    def work(offset):
        for k in range(12):
            response, gold, want = cases[(offset + k) % len(cases)]
            got = math_reward(response, gold, timeout_s=GENEROUS_TIMEOUT_S).status
            if got != want:
                failures.append((response, gold, want, got))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sum(reward_counters().values()) == 8 * 12


def test_config_from_env():
    env = {mr.ENV_TIMEOUT: "2.5", mr.ENV_WORKERS: "3"}
    assert RewardConfig.from_env(env) == RewardConfig(timeout_s=2.5, num_workers=3)
    assert RewardConfig.from_env({}) == RewardConfig(timeout_s=5.0, num_workers=2)
    for bad in ({mr.ENV_TIMEOUT: "soon"}, {mr.ENV_TIMEOUT: "0"}, {mr.ENV_WORKERS: "0"}, {mr.ENV_WORKERS: "1.5"}):
        with pytest.raises(ValueError, match="OPENRLHF_SPEED_REWARD"):
            RewardConfig.from_env(bad)
