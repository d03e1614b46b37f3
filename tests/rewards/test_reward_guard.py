"""Which rewards are invalid, how they are counted, when the run stops."""

import math

import pytest
import torch

from openrlhf_speed.rewards.guard import RewardError, RewardGuard, invalid_reason


@pytest.mark.parametrize(
    "reward, info, reason",
    [
        (None, {}, "raised"),
        (torch.tensor([math.nan]), {}, "nonfinite"),
        (torch.tensor([math.inf]), {}, "nonfinite"),
        (float("-inf"), None, "nonfinite"),
        (torch.tensor([0.0]), {"reward_error": torch.tensor([1.0])}, "error_status"),
        (torch.tensor([0.0]), {"reward_timeout": torch.tensor([1.0])}, None),  # a valid zero, counted
        (torch.tensor([1.0]), {"reward_error": torch.tensor([0.0])}, None),
        (0.5, None, None),
    ],
)
def test_invalid_reason(reward, info, reason):
    assert invalid_reason(reward, info) == reason


def test_counts_and_metrics():
    guard = RewardGuard()
    guard.observe(["raised", None, None, "nonfinite"],
                  [{}, {"reward_timeout": 1.0}, {"reward_refused": torch.tensor([1.0])}, {}])
    guard.count_regenerated(2)
    m = guard.pop_metrics()
    assert (m["reward/scored"], m["reward/errors"], m["reward/timeouts"], m["reward/refused"]) == (4, 2, 1, 1)
    assert (m["reward/errors_raised"], m["reward/errors_nonfinite"], m["reward/regenerated"]) == (1, 1, 2)
    assert m["reward/error_rate_cum"] == 0.5
    assert guard.pop_metrics()["reward/errors"] == 0  # the window resets, totals stay
    assert guard.totals["errors"] == 2


def test_error_rate_limit_hand_case():
    # 100 scored, limit 2%: 2 errors are allowed (2 <= 2.0), the 3rd stops the run.
    guard = RewardGuard(max_error_rate=0.02)
    guard.observe([None] * 98 + ["raised"] * 2, [{}] * 100)
    guard.check(prompt_index=5, attempt=0, reasons=["raised"])
    guard.observe(["raised"], [{}])
    with pytest.raises(RewardError, match=r"3 of 101 rewards .*--speed.reward_max_error_rate"):
        guard.check(prompt_index=5, attempt=0, reasons=["raised"])


def test_too_few_scored_never_trips_the_rate():
    guard = RewardGuard(max_error_rate=0.0)
    guard.observe(["raised"] * 10, [{}] * 10)
    guard.check(prompt_index=0, attempt=0, reasons=["raised"])  # 10 < 100 scored


def test_systematic_failure_names_the_row_after_the_retries():
    guard = RewardGuard(retries=2)
    guard.check(prompt_index=7, attempt=1, reasons=["error_status", None])  # a 3rd try remains
    with pytest.raises(RewardError, match=r"prompt row 7 \(label 'nan'\).*after 3 generations.*error_status"):
        guard.check(prompt_index=7, attempt=2, reasons=["error_status"], label="nan")


def test_flag_values_are_checked():
    with pytest.raises(ValueError, match="reward_max_error_rate"):
        RewardGuard(max_error_rate=1.5)
    with pytest.raises(ValueError, match="reward_retries"):
        RewardGuard(retries=-1)


def test_state_round_trip():
    guard = RewardGuard()
    guard.observe(["raised", None], [{}, {}])
    other = RewardGuard()
    other.load_state_dict(guard.state_dict())
    assert other.totals == guard.totals
