"""A missing or non-finite reward never reaches OpenRLHF's advantages
(`--speed.strategy off` path), and reward problems show on the console line."""

import math
from types import SimpleNamespace

import pytest
import torch

from openrlhf_speed.rewards.guard import RewardError
from openrlhf_speed.rollout.trainer import _check_rewards, group_token_metrics, step_line


def sample(reward, **info):
    return SimpleNamespace(rewards=None if reward is None else torch.tensor([reward]),
                           info={k: torch.tensor([v]) for k, v in info.items()})


@pytest.mark.parametrize("bad, reason", [(None, "raised"), (math.nan, "nonfinite"), (math.inf, "nonfinite")])
def test_invalid_reward_stops_before_the_experience(bad, reason):
    with pytest.raises(RewardError, match=rf"1 of 3 samples of training step 4 .*sample 2 \({reason}\)"):
        _check_rewards([sample(1.0), sample(0.0), sample(bad)], global_step=4)


def test_flags_are_counted():
    counts = _check_rewards([sample(0.0, reward_timeout=1.0, reward_refused=0.0, reward_error=0.0),
                             sample(0.0, reward_timeout=0.0, reward_refused=1.0, reward_error=1.0),
                             sample(1.0)], global_step=1)
    assert counts == {"reward/timeouts": 1.0, "reward/refused": 1.0, "reward/errors": 1.0}


def test_step_line_shows_reward_problems_only_when_there_are_some():
    assert "reward errors" not in step_line(3, {"reward/errors": 0.0, "reward/timeouts": 0.0})
    assert "reward errors 2 timeouts 5 refused 0" in step_line(3, {"reward/errors": 2.0, "reward/timeouts": 5.0})


def test_step_line_leaves_out_a_curriculum_figure_that_does_not_apply():
    # Uniform tests no band: its qualification rate is NaN, not a "qualified 1.00" to misread.
    line = step_line(3, {"speed/qualification_rate": float("nan"), "speed/useful_token_share_cum": 0.5})
    assert "qualified" not in line and "useful_tokens 0.50" in line
    assert "qualified 0.25" in step_line(3, {"speed/qualification_rate": 0.25})
    assert "loss nan" in step_line(3, {"policy_loss": float("nan")})  # a NaN loss is shown, not hidden


def test_step_line_shows_the_share_of_generated_tokens_thrown_away():
    line = step_line(2, {"speed/tokens_generated": 2000.0, "speed/tokens_discarded": 500.0, "speed/buffer_size": 3})
    assert "discarded 0.25 | buffer 3" in line
    assert "discarded" not in step_line(2, {"speed/tokens_generated": 0.0, "speed/tokens_discarded": 0.0})


def response(reward, length):
    return SimpleNamespace(rewards=torch.tensor([reward]), response_length=torch.tensor([length]))


def test_stock_openrlhf_step_in_the_drivers_token_terms():
    # Two groups of N=3: the first has mixed rewards (a gradient), the second all 1 (none).
    samples = [response(1.0, 10), response(0.0, 20), response(1.0, 30), *(response(1.0, 5) for _ in range(3))]
    m = group_token_metrics(samples, n=3)
    assert m["speed/tokens_generated"] == m["speed/tokens_full"] == m["speed/tokens_trained"] == 75
    assert m["speed/useful_token_share"] == pytest.approx(60 / 75) and m["speed/tokens_useful"] == 60
    # A batch that is not whole groups (dynamic filtering) gets counts but no share.
    assert "speed/useful_token_share" not in group_token_metrics(samples[:4], n=3)
