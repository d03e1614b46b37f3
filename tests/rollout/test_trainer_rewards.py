"""Issue 15 (2): a missing or non-finite reward never reaches OpenRLHF's advantages
(`--speed.strategy off` path), and reward problems show on the console line."""

import math
from types import SimpleNamespace

import pytest
import torch

from openrlhf_speed.rewards.guard import RewardError
from openrlhf_speed.rollout.trainer import _check_rewards, step_line


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
