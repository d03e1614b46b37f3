"""curriculum/payoff.py: every predicted figure against a case computed by hand.

Two prompts, A ~ Beta(1, 1) with responses of 10 tokens and B ~ Beta(1, 3) with 30;
N = 4, N_init = 2, band (0, 1), B = 8 prompts a step, generation batch 16, r = 2.
- At N = 4: A is all wrong or all right with 2/5 (a flat Beta-Binomial: 1/5 each end), B with
  3/7 + 1/35 = 16/35. Zero-variance share (3/7 + ... ) / 2 = 3/7; by tokens
  (0.4 * 10 + 16/35 * 30) / 40 = 31/70. Informative groups 8 * 4/7 = 32/7.
- Screening at N_init = 2 passes with q_A = 1/3, q_B = 0.3: q = 19/60, 480/19 prompts screened,
  kept length (10/3 + 9) / (19/30) = 370/19.
  screen 480/19 * 2 * 20 = 19200/19; continue 8 * 2 * 370/19 = 5920/19;
  discarded 480/19 * 2 * (2/3 * 10 + 0.7 * 30) / 2 = 13280/19; trained 8 * 4 * 370/19 = 11840/19.
- Mean p(1-p): uniform (1/6 + 3/20) / 2 = 19/120; SPEED (1/3 * 1/5 + 0.3 * 8/42) / (19/30) = 26/133.
- DAPO: a group passes with 3/5 and 19/35, q = 4/7, 14 prompts, full 14 * 4 * 20 = 1120,
  discarded 56 * (0.4 * 10 + 16/35 * 30) / 2 = 496, trained 1120 - 496 = 624.
- Against `off`: uniform costs 640 + 2 * 640 = 1920, SPEED (11840 + 2 * 25120) / 19, so its
  step costs 97/57 and the break-even is 57/97; the informative ratio is 8 / (32/7) = 7/4:
  at alpha 0.5 to 1 the speedup is sqrt(7/4) * 57/97 to 7/4 * 57/97.
"""

import math

import numpy as np
import pytest

from openrlhf_speed.curriculum import payoff
from openrlhf_speed.curriculum.posterior import Posteriors

POST = Posteriors(np.array([[1.0], [1.0]]), np.array([[1.0], [3.0]]), np.ones((2, 1)), ((1.0, 1.0, 1.0),), "uniform", 2)
LENGTHS = [10.0, 30.0]
SETTINGS = payoff.Settings(n=4, n_init=2, low=0.0, high=1.0, batch=8, gen_batch=16, cost_ratio=2.0)


def test_uniform_hand_case():
    u = payoff.predict(POST, LENGTHS, SETTINGS)["uniform"]
    assert u["tokens"]["full"] == pytest.approx(640) and u["tokens"]["trained"] == pytest.approx(640)
    assert u["tokens"]["discarded"] == 0 and u["qualification_rate"] == 1.0
    assert u["zero_variance_share"] == pytest.approx(3 / 7)
    assert u["zero_variance_token_share"] == pytest.approx(31 / 70)
    assert u["informative_groups"] == pytest.approx(32 / 7)
    assert u["mean_pq"] == pytest.approx(19 / 120)


def test_speed_hand_case():
    s = payoff.predict(POST, LENGTHS, SETTINGS)["speed"]
    assert s["qualification_rate"] == pytest.approx(19 / 60)
    assert s["prompts_screened"] == pytest.approx(480 / 19)
    assert s["screenings_per_qualified"] == pytest.approx(60 / 19)
    t = s["tokens"]
    assert t["screen"] == pytest.approx(19200 / 19) and t["continue"] == pytest.approx(5920 / 19)
    assert t["discarded"] == pytest.approx(13280 / 19) and t["trained"] == pytest.approx(11840 / 19)
    assert t["full"] == 0 and t["generated"] == pytest.approx(25120 / 19)
    assert t["discarded_share"] == pytest.approx(13280 / 25120)
    assert s["informative_groups"] == 8 and s["zero_variance_share"] == 0
    assert s["mean_pq"] == pytest.approx(26 / 133)
    assert s["generation_rounds"] == pytest.approx(480 / 19 / 16)


def test_dapo_hand_case():
    d = payoff.predict(POST, LENGTHS, SETTINGS)["dapo"]
    assert d["qualification_rate"] == pytest.approx(4 / 7) and d["prompts_screened"] == pytest.approx(14)
    assert d["tokens"]["full"] == pytest.approx(1120) and d["tokens"]["discarded"] == pytest.approx(496)
    assert d["tokens"]["trained"] == pytest.approx(624) and d["informative_groups"] == 8


def test_break_even_and_range_against_stock_openrlhf():
    alpha = {"low": 0.5, "point": 0.75, "high": 1.0}
    c = payoff.compare(payoff.predict(POST, LENGTHS, SETTINGS), SETTINGS, alpha)
    assert c["step_cost"] == pytest.approx(97 / 57) and c["break_even"] == pytest.approx(57 / 97)
    assert c["informative_ratio"] == pytest.approx(7 / 4)
    assert c["step_saving"]["low"] == pytest.approx(1 - math.sqrt(4 / 7))
    assert c["step_saving"]["high"] == pytest.approx(3 / 7)
    assert c["step_saving"]["point"] == pytest.approx(1 - (4 / 7) ** 0.75)
    assert c["speedup"]["low"] == pytest.approx(math.sqrt(7 / 4) * 57 / 97)
    assert c["speedup"]["high"] == pytest.approx(7 / 4 * 57 / 97)


def test_the_calibrated_alpha_of_the_nearest_measured_batch_is_the_default():
    c = payoff.compare(payoff.predict(POST, LENGTHS, SETTINGS), SETTINGS)
    fit = payoff.alpha_for(SETTINGS.batch)
    assert c["alpha"] == {k: fit[k] for k in ("low", "point", "high")}
    assert c["alpha_from"] == {"batch": fit["batch"], "cells": fit["cells"]}
    assert c["speedup"]["low"] == pytest.approx((7 / 4) ** fit["low"] * 57 / 97)
    line = payoff.verdict(payoff.predict(POST, LENGTHS, SETTINGS), c, SETTINGS)["line"]
    assert f"at the calibrated alpha {fit['low']:.2f}-{fit['high']:.2f} (measured at B = {fit['batch']}; docs/advise.md)" in line


def test_against_dapo_the_steps_are_the_same_and_the_tokens_decide():
    s = payoff.Settings(**{**SETTINGS.__dict__, "baseline": "dapo"})
    pred = payoff.predict(POST, LENGTHS, s)
    c = payoff.compare(pred, s)
    dapo_cost = 624 + 2 * 1120
    assert c["informative_ratio"] == 1 and c["step_saving"] == {"low": 0.0, "point": 0.0, "high": 0.0}
    assert c["speedup"]["low"] == pytest.approx(dapo_cost / (62080 / 19)) == c["speedup"]["high"]
    v = payoff.verdict(pred, c, s)
    assert v["pays"] == "unlikely" and v["line"].startswith("SPEED unlikely to pay here: 0.88x over DAPO")


def test_the_cost_ratio_moves_the_break_even():
    # Free generation (r -> 0): the step costs what it trains, 11840/19 / 640 = 37/38.
    s = payoff.Settings(**{**SETTINGS.__dict__, "cost_ratio": 1e-12})
    c = payoff.compare(payoff.predict(POST, LENGTHS, s), s)
    assert c["step_cost"] == pytest.approx(37 / 38)


def _verdict_for(alpha, beta, exponent=None, **kw):
    s = payoff.Settings(**{"n": 24, "n_init": 4, "low": 0.0, "high": 1.0, "batch": 16, "gen_batch": 64, **kw})
    post = Posteriors(np.asarray(alpha, float)[:, None], np.asarray(beta, float)[:, None], np.ones((len(alpha), 1)),
                      ((1.0, 1.0, 1.0),), "uniform", 16)
    pred = payoff.predict(post, [100.0] * len(alpha), s)
    return payoff.verdict(pred, payoff.compare(pred, s, exponent or {"low": 0.5, "point": 0.75, "high": 1.0}), s)


def test_verdicts():
    # Half the prompts are never solved, half sit at p ~ 0.5: SPEED halves uniform's waste cheaply.
    likely = _verdict_for([0.5, 20.0], [400.0, 20.0])
    assert likely["pays"] == "likely" and likely["line"].startswith("SPEED likely pays: ")
    assert "over stock OpenRLHF (break-even: " in likely["line"] and "carry no gradient at N 24" in likely["line"]
    # Every prompt is mixed: nothing to save, and screening costs tokens.
    unlikely = _verdict_for([20.0, 20.0], [20.0, 20.0])
    assert unlikely["pays"] == "unlikely" and "SPEED must save" in unlikely["line"]
    # The same data at a small alpha: the saving no longer clears the step cost at one end.
    even = _verdict_for([0.5, 20.0], [400.0, 20.0], exponent={"low": 0.1, "point": 0.3, "high": 0.6})
    assert even["pays"] == "even" and even["line"].startswith("SPEED about even here: ")
    assert "calibrated alpha 0.10-0.60" in even["line"]


def test_settings_are_checked():
    with pytest.raises(ValueError, match="--speed.n_init"):
        payoff.Settings(n=4, n_init=4, low=0, high=1, batch=8, gen_batch=16).validate()
    with pytest.raises(ValueError, match="cost ratio"):
        payoff.Settings(n=4, n_init=2, low=0, high=1, batch=8, gen_batch=16, cost_ratio=0).validate()


def _step(gen, exp, train, sync, gen_tok=None, train_tok=None, **extra):
    st = {"timing/generation": gen, "timing/make_experience": exp, "timing/ppo_train": train, "timing/broadcast": sync}
    if gen_tok is not None:
        st.update({"speed/tokens_generated": gen_tok, "speed/tokens_trained": train_tok})
    return {**st, **extra}


def test_cost_ratio_from_a_runs_steps():
    # Generation 4 s, training 1 + 2.5 + 0.5 = 4 s, the same tokens: 1:1.
    r = payoff.cost_ratio_from_steps([_step(4, 1, 2.5, 0.5, 1000, 1000)] * 3)
    assert r["ratio"] == pytest.approx(1.0) and r["priced"] == "per token" and not r["driver_run"]
    # Twice the tokens generated as trained (a SPEED run): per token, generation is half as dear.
    r = payoff.cost_ratio_from_steps([_step(4, 1, 2.5, 0.5, 2000, 1000, **{"speed/prompts_screened": 8})])
    assert r["ratio"] == pytest.approx(0.5) and r["driver_run"]
    # No token counts: seconds alone.
    assert payoff.cost_ratio_from_steps([_step(6, 1, 2, 1)])["priced"] == "per step"
    with pytest.raises(ValueError, match="generation_only"):
        payoff.cost_ratio_from_steps([{"timing/generation": 3.0}])
