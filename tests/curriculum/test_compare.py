"""compare_strategies: one simulated policy, several strategies, consistent figures."""

import math

import pytest

from openrlhf_speed.curriculum.compare import compare_strategies

RATES = [0.0] * 20 + [1.0] * 10 + [0.5] * 20 + [0.2] * 10


def test_figures_are_consistent_for_every_strategy():
    names = ["uniform", "dapo", "speed", "greso", "cures", "speed_bayes"]
    res = compare_strategies(names, RATES, epochs=3, batch_prompts=4, n=8, n_init=4, seed=1,
                             completions_per_tick=10)
    assert list(res) == names
    for name, f in res.items():
        assert f["groups_trained"] == 4 * f["steps"]
        assert f["tokens_total"] == f["tokens_screen"] + f["tokens_continue"] + f["tokens_full"]
        assert math.isclose(f["tokens_per_group"], f["tokens_total"] / f["groups_trained"])
        assert 0 <= f["useful_token_share"] <= 1 and 0 <= f["zero_variance_share"] <= 1
        assert f["prompts_started"] + f["prompts_skipped"] == len(RATES) * 3
    assert res["uniform"]["zero_variance_share"] > 0.4  # a third of the prompts are 0 or 1
    assert all(res[n]["zero_variance_share"] == 0 for n in names[1:])  # the others filter
    assert res["uniform"]["tokens_discarded"] == 0 and res["dapo"]["tokens_screen"] == 0
    assert res["speed"]["tokens_total"] < res["dapo"]["tokens_total"]  # screening beats filtering after


def test_drift_max_steps_and_unknown_keywords():
    def rate_fn(i, epoch, version):
        return 0.5 if epoch >= 1 else RATES[i]

    res = compare_strategies(["speed", "greso"], RATES, epochs=3, batch_prompts=2, n=4, n_init=2, seed=0,
                             rate_fn=rate_fn, max_steps=10, pass_rate_low=0.0)
    assert res["speed"]["steps"] == res["greso"]["steps"] == 10
    with pytest.raises(TypeError, match="unknown keyword"):
        compare_strategies(["speed"], RATES, epochs=1, batch_prompts=2, n=4, n_init=2, seed=0, n_inti=3)
