"""What the benchmark reads from the driver's per-step metrics matches the trained groups: the
step records come from the real scheduler under pre-fetching (simulated policy), and the
report's zero-variance share and qualification rate are checked against the groups and
decisions themselves. Logs written before `speed/tokens_useful` existed read as they did."""

import numpy as np
import pytest

from openrlhf_speed.bench import aggregate
from openrlhf_speed.bench import report as rep
from openrlhf_speed.curriculum import SpeedConfig
from openrlhf_speed.curriculum.simulate import run_simulation

RATES = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0] * 12


def _steps(strategy):
    cfg = SpeedConfig(strategy=strategy, n_samples_per_prompt=8, n_init=4, batch_prompts=4,
                      max_inflight_prompts=16, num_epochs=2, seed=0, warn_qualification_rate=0.0)
    res = run_simulation(RATES, cfg, seed=0, completions_per_tick=3)
    steps = [{"event": "step", "step": b.step + 1, "train_wall_s": 10.0 * (b.step + 1), **b.metrics}
             for b in res.batches]
    return res, steps


@pytest.mark.parametrize("strategy", ["uniform", "dapo", "speed"])
def test_the_reports_figures_are_those_of_the_trained_groups(strategy):
    res, steps = _steps(strategy)
    groups = [g for b in res.batches for g in b.groups]
    zero = sum(g.num_tokens for g in groups if np.ptp(g.rewards) == 0) / sum(g.num_tokens for g in groups)
    m = aggregate.mechanism(steps)
    assert m["zero_variance_share"] == pytest.approx(zero)
    summary = rep.run_summary({"steps": steps, "evals": []}, None)
    if strategy == "uniform":  # no band tested: no qualification rate, not 1.0
        assert aggregate.is_nan(m["qualification_rate"]) and aggregate.is_nan(summary["qualification_rate"])
    else:
        windows = [b.metrics for b in res.batches]
        expected = sum(w["speed/prompts_qualified"] for w in windows) / sum(w["speed/prompts_screened"] for w in windows)
        assert 0 < expected < 1
        assert m["qualification_rate"] == pytest.approx(expected) == summary["qualification_rate"]


def test_logs_without_useful_tokens_read_through_their_share():
    # The share was useful / tokens generated in the window then; NaN where it generated nothing.
    nan = float("nan")
    old = [{"speed/useful_token_share": 1.5, "speed/tokens_generated": 400.0, "speed/tokens_trained": 1000.0,
            "speed/prompts_screened": 4, "speed/prompts_qualified": 4},
           {"speed/useful_token_share": nan, "speed/tokens_generated": 0.0, "speed/tokens_trained": 1000.0}]
    assert aggregate.useful_tokens(old[0]) == pytest.approx(600.0) and aggregate.useful_tokens(old[1]) is None
    assert aggregate.mechanism(old)["zero_variance_share"] == pytest.approx(0.4)  # 600 useful of 1000
    assert aggregate.qualification_rate(old) == 1.0  # as such logs read
    new = {"speed/tokens_useful": 0.0, "speed/useful_token_share": 0.0, "speed/tokens_generated": 0.0,
           "speed/tokens_trained": 500.0, "speed/prompts_screened": 3, "speed/prompts_qualified": nan}
    assert aggregate.useful_tokens(new) == 0.0  # a step of zero-variance groups, generated before its window
    assert aggregate.qualification_rate([new]) != aggregate.qualification_rate([new])  # NaN
