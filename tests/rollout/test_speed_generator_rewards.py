"""The SPEED driver never hands an invalid reward to the scheduler.

Drives `SpeedSamplesGenerator._take_scored` (what `_collect` does with one finished
request) against the real Scheduler, without Ray or vLLM: `_dispatch` is recorded.
Hand case: N = 4, N_init = 2. A prompt whose two screening answers are both correct must be
rejected (pass rate 1). A driver that substituted 0 for a reward function that raised on
one of them would see rewards [1, 0], qualify the prompt and give its correct answers
negative advantages.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from openrlhf_speed.curriculum import Scheduler, SpeedConfig
from openrlhf_speed.rewards.guard import RewardError, RewardGuard
from openrlhf_speed.rollout.speed_generator import SpeedSamplesGenerator


def exp(reward, **info):
    rewards = None if reward is None else torch.tensor([reward])
    return SimpleNamespace(rewards=rewards, response_length=torch.tensor([5]),
                           info={k: torch.tensor([v]) for k, v in info.items()})


@pytest.fixture
def gen():
    g = SpeedSamplesGenerator.__new__(SpeedSamplesGenerator)
    g.scheduler = Scheduler(num_prompts=1, config=SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=1))
    g.labels, g._trace, g.policy_version = ["7"], None, 0
    g.reward_guard = RewardGuard(retries=2)
    g.dispatched = []
    g._dispatch = lambda request, kwargs, **kw: g.dispatched.append(kw)
    return g


def test_raised_reward_is_regenerated_not_zeroed(gen):
    (screen,) = gen.scheduler.next_requests()
    assert screen.n == 2
    gen._take_scored(screen, 0, 0, [], 0, [exp(1.0), exp(None)], {})
    (retry,) = gen.dispatched
    assert (retry["n"], retry["attempt"], retry["engine"]) == (1, 1, 0)
    assert [r.reward for r in retry["kept"]] == [1.0]
    assert gen.scheduler.totals().get("prompts_screened", 0) == 0  # nothing submitted yet
    gen._take_scored(screen, 0, 0, retry["kept"], 1, [exp(1.0)], {})
    totals = gen.scheduler.totals()
    assert (totals["prompts_screened"], totals["prompts_rejected"]) == (1, 1)  # 2/2 correct: not qualified
    m = gen.reward_guard.pop_metrics()
    assert (m["reward/scored"], m["reward/errors"], m["reward/errors_raised"], m["reward/regenerated"]) == (3, 1, 1, 1)


def test_nan_reward_never_reaches_the_group(gen):
    (screen,) = gen.scheduler.next_requests()
    gen._take_scored(screen, 0, 0, [], 0, [exp(math.nan), exp(0.0)], {})
    (retry,) = gen.dispatched
    gen._take_scored(screen, 0, 0, retry["kept"], 1, [exp(1.0)], {})  # 1 of 2: qualifies
    (cont,) = gen.scheduler.next_requests()
    gen._take_scored(cont, 0, 0, [], 0, [exp(1.0), exp(0.0)], {})
    batch = gen.scheduler.pop_batch()
    assert sorted(batch.groups[0].rewards.tolist()) == [0.0, 0.0, 1.0, 1.0]  # all finite
    assert gen.reward_guard.pop_metrics()["reward/errors_nonfinite"] == 1


def test_timeouts_are_valid_zeros_and_counted(gen):
    (screen,) = gen.scheduler.next_requests()
    gen._take_scored(screen, 0, 0, [], 0, [exp(0.0, reward_timeout=1.0), exp(1.0)], {})
    assert gen.dispatched == [] and gen.scheduler.totals()["prompts_qualified"] == 1
    assert gen.reward_guard.pop_metrics()["reward/timeouts"] == 1


def test_systematic_failure_stops_the_run_naming_the_row(gen):
    (screen,) = gen.scheduler.next_requests()
    with pytest.raises(RewardError, match=r"prompt row 0 \(label '7'\)"):
        gen._take_scored(screen, 0, 0, [], 2, [exp(0.0, reward_error=1.0), exp(1.0)], {})
