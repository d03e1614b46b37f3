"""speed_thin: speed_seq that screens a prompt whose tag makes qualifications dear only with
probability lambda / c_t (at least the floor), lambda the run's screening responses per
qualified prompt and c_t the tag's, predicted under speed_seq's rule.

Legend: N = 8, N_init = 4, first half m = 2, band (0, 1). The hand cases give a tag's prior the
weight of 20 screenings and the run 8 qualifications for 64 screening responses (lambda = 8), so
the thinning has the evidence it waits for.
"""

import pickle

import numpy as np
import pytest

from openrlhf_speed.curriculum import Scheduler, SpeedConfig
from openrlhf_speed.curriculum.history import PromptHistory
from openrlhf_speed.curriculum.records import PHASE_SCREEN
from openrlhf_speed.curriculum.simulate import SimulatedDriver, SimulatedPolicy
from openrlhf_speed.curriculum.strategies import REQUEST, SKIP
from openrlhf_speed.curriculum.thin_screen import ThinScreenStrategy, screening_yield
from openrlhf_speed.curriculum.seq_screen import GRID


def cfg(**kw):
    base = dict(strategy="speed_thin", n_samples_per_prompt=8, n_init=4, batch_prompts=4,
                warn_qualification_rate=0.0, seed=0, prior_key="level")
    base.update(kw)
    return SpeedConfig(**base).validate()


def point_mass(p, screenings=1.0):
    w = np.zeros_like(GRID)
    w[int(round(p * 20))] = screenings
    return w


def learned(**kw):
    """A strategy whose run has qualified 8 prompts (beside the starting guess's one) at 8
    screening responses each (lambda = 8)."""
    s = ThinScreenStrategy(cfg(**kw))
    s.qualified = 9.0
    s.spent = 8.0 * s.qualified
    return s


def test_screening_yield_by_hand():
    # p = 0.5 known: the first two are mixed 1/2 of the time; all wrong (1/4) or all right (1/4)
    # go on, since 2 / (3/4) <= 8, and are mixed after four 3/4 of the time.
    s, q = screening_yield(point_mass(0.5), 0, 0, 2, 4, cost=8.0)
    assert (s, q) == pytest.approx((2 + 0.25 * 2 + 0.25 * 2, 0.5 + 2 * 0.25 * 0.75))
    # At a cost of 2 per qualification the rest (2 / (3/4) = 2.67 each) is not asked for.
    assert screening_yield(point_mass(0.5), 0, 0, 2, 4, cost=2.0) == pytest.approx((2.0, 0.5))
    # Never solved: two responses, no qualification.
    assert screening_yield(point_mass(0.0), 0, 0, 2, 4, cost=8.0) == pytest.approx((2.0, 0.0))
    # Half the tag never solved, half at 0.5: two wrong (5/8) leave c = 0.15, 2 / 0.15 > 8, stop;
    # two right (1/8) leave p = 0.5 alone, c = 3/4, go on.
    s, q = screening_yield(point_mass(0.0) + point_mass(0.5), 0, 0, 2, 4, cost=8.0)
    assert (s, q) == pytest.approx((2 + 0.125 * 2, 0.25 + 0.125 * 0.75))
    # A prompt's own earlier visit counts: one correct rules p = 0 out.
    assert screening_yield(point_mass(0.0) + point_mass(0.5), 1, 0, 2, 4, cost=8.0) == pytest.approx(
        screening_yield(point_mass(0.5), 0, 0, 2, 4, cost=8.0))


def test_screen_probability_by_hand():
    s, h = learned(), PromptHistory(3)
    s.bind_tags([0, 1, 2])
    s.tag_weights[0] = point_mass(0.5, 20)  # c = 3 / 0.875 = 3.4 <= 8: always screened
    s.tag_weights[1] = point_mass(0.05, 20)  # first half mixed 0.095; all right 0.0025 goes on (c = 0.9975)
    s.tag_weights[2] = point_mass(0.0, 20)  # no qualification at all: the floor
    assert s.screen_probability(0, h) == 1.0
    q, spent = 0.095 + 0.0025 * 0.9975, 2 + 0.0025 * 2
    assert s.screen_probability(1, h) == pytest.approx(8 * q / spent)  # 0.389
    assert s.screen_probability(2, h) == 0.1
    s.spent = 30.0 * s.qualified  # a run whose qualifications cost 30 screening responses
    assert s.screen_probability(1, h) == pytest.approx(min(1.0, 30 * q / spent))


def test_skips_are_keyed_draws_at_the_tags_rate():
    s, h = learned(), PromptHistory(4000)
    s.bind_tags([1] * 4000)
    s.tag_weights[1] = point_mass(0.05, 20)
    keep = s.screen_probability(0, h)
    decisions = [s.start(i, h) for i in range(4000)]
    screened = sum(d.verdict == REQUEST for d in decisions)
    assert all(d.n == 2 and d.phase == PHASE_SCREEN for d in decisions if d.verdict == REQUEST)
    assert all(d.reason == "thin_skip" for d in decisions if d.verdict == SKIP)
    assert screened / 4000 == pytest.approx(keep, abs=0.03)  # 3 sd of a binomial share
    assert s.metrics()["thin_screened_share"] == pytest.approx(screened / 4000)
    # The same prompt in the same epoch draws the same: a resumed run decides alike.
    again = learned()
    again.bind_tags([1] * 4000)
    again.tag_weights[1] = point_mass(0.05, 20)
    assert [again.start(i, h).verdict for i in range(4000)] == [d.verdict for d in decisions]


def test_it_screens_everything_until_the_tag_and_the_run_are_learned():
    # N_init = 2: a first half of one response, which on Jeffreys' prior and the starting guess
    # of the cost (4) predicts no qualification: thinning then would skip every prompt.
    h = PromptHistory(2)
    fresh = ThinScreenStrategy(cfg(n_samples_per_prompt=4, n_init=2))
    assert fresh.screen_probability(0, h) == 1.0
    s = learned(n_samples_per_prompt=4, n_init=2)
    s.bind_tags([0, 1])
    s.tag_weights[1] = point_mass(0.0, 20)
    assert s.screen_probability(0, h) == 1.0  # tag 0: the prior of no screening yet
    assert s.screen_probability(1, h) == 0.1  # tag 1: 20 screenings, never solved
    s.qualified = 5.0  # the run has qualified 4 (beside the guess), not 8
    assert s.screen_probability(1, h) == 1.0


@pytest.mark.parametrize("kw, flag", [(dict(explore_floor=0.0), "--speed.explore_floor must be > 0"),
                                      (dict(prior_key=None), "needs tags: add --speed.prior_key"),
                                      (dict(pass_rate_low=0.2, pass_rate_high=0.8), "needs the band")])
def test_combinations_that_make_no_sense_are_refused(kw, flag):
    with pytest.raises(ValueError, match=flag):
        cfg(**kw)


def _simulate(strategy, rates, tags, steps=30, **kw):
    config = SpeedConfig(strategy=strategy, n_samples_per_prompt=8, n_init=4, batch_prompts=4,
                         warn_qualification_rate=0.0, num_epochs=10, prior_key="level", **kw).validate()
    sched = Scheduler(len(rates), config, tags=tags)
    driver = SimulatedDriver(sched, SimulatedPolicy(rates, seed=1))
    return driver.run(max_steps=steps), driver.requests, sched


def test_fewer_screening_responses_per_trained_group_than_speed_seq():
    # The high mix's shape: two thirds of the prompts at a pass rate of 0.02 (tag 1), the rest
    # near 0.4 (tag 0). speed_seq spends two responses on every one of the first; speed_thin
    # screens about a tenth of them.
    rates = [0.02 if i % 3 else 0.4 for i in range(600)]
    tags = [1 if i % 3 else 0 for i in range(600)]
    spent, skipped = {}, {}
    for name in ("speed_seq", "speed_thin"):
        batches, requests, sched = _simulate(name, rates, tags)
        groups = [g for b in batches for g in b.groups]
        assert len(groups) == 120 and all(len(g.responses) == 8 for g in groups)
        spent[name] = sum(r.n for r in requests if r.phase == PHASE_SCREEN) / len(groups)
        skipped[name] = sched.totals().get("prompts_skipped", 0)
    assert skipped["speed_seq"] == 0 and skipped["speed_thin"] > 0
    assert spent["speed_thin"] < 0.75 * spent["speed_seq"]


def test_each_batch_reports_the_window_it_closes():
    # The shares are of the window since the last batch: a thinned run screens part of what it
    # starts, and some all-equal first halves ask for the rest.
    rates = [0.02 if i % 3 else 0.4 for i in range(600)]
    tags = [1 if i % 3 else 0 for i in range(600)]
    batches, _, _ = _simulate("speed_thin", rates, tags)
    screened = [b.metrics["speed/thin_screened_share"] for b in batches[10:]]
    more = [b.metrics["speed/seq_more_share"] for b in batches]
    assert all(0.0 < x <= 1.0 for x in screened) and np.mean(screened) < 0.8
    assert any(0.0 < x <= 1.0 for x in more) and all(np.isnan(x) or 0.0 <= x <= 1.0 for x in more)


def _ticks(driver, n):
    return [b for b in (driver.tick() for _ in range(n)) if b is not None]


def _view(batches):
    return [[(g.prompt_index, g.epoch, tuple(g.rewards)) for g in b.groups] for b in batches]


@pytest.mark.parametrize("save_tick", [3, 17, 40])
def test_a_resumed_run_decides_as_an_uninterrupted_one(save_tick):
    rates = [0.02 if i % 3 else 0.4 for i in range(90)]
    tags = [1 if i % 3 else 0 for i in range(90)]
    config = cfg(num_epochs=4, batch_prompts=2, max_inflight_prompts=6)
    a = SimulatedDriver(Scheduler(90, config, tags=tags), SimulatedPolicy(rates, seed=3), completions_per_tick=3)
    whole = a.run()
    b = SimulatedDriver(Scheduler(90, config, tags=tags), SimulatedPolicy(rates, seed=3), completions_per_tick=3)
    first = _ticks(b, save_tick)
    restored = Scheduler(90, config, tags=tags)
    restored.load_state_dict(pickle.loads(pickle.dumps(b.scheduler.state_dict())))
    assert restored.strategy.cost_per_qualified() == b.scheduler.strategy.cost_per_qualified()
    rest = SimulatedDriver(restored, SimulatedPolicy(rates, seed=3), completions_per_tick=3).run()
    assert _view(first + rest) == _view(whole)
    assert restored.totals() == a.scheduler.totals() and a.scheduler.totals()["prompts_skipped"] > 0
