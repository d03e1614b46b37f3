"""speed_seq: SPEED's screening in two halves, the second only where the prompt's posterior
makes it cheaper than screening a new prompt.

Legend: N = 8, N_init = 4, first half m = 2, band (0, 1). The chance c that two more responses
make an all-wrong screening mixed is 1 - (1 - p)^2 under the posterior; the rule screens on
when 2 / c <= the run's screening responses per qualified prompt (8 before any is measured).
"""

import numpy as np
import pytest

from openrlhf_speed.curriculum import Scheduler, SpeedConfig
from openrlhf_speed.curriculum.history import PromptHistory
from openrlhf_speed.curriculum.records import PHASE_CONTINUE, PHASE_SCREEN
from openrlhf_speed.curriculum.seq_screen import GRID, SeqScreenStrategy, chance_mixed
from openrlhf_speed.curriculum.simulate import SimulatedDriver, SimulatedPolicy
from openrlhf_speed.curriculum.strategies import ACCEPT, REJECT, REQUEST


def cfg(**kw):
    base = dict(strategy="speed_seq", n_samples_per_prompt=8, n_init=4, batch_prompts=4,
                warn_qualification_rate=0.0, seed=0)
    base.update(kw)
    return SpeedConfig(**base).validate()


def point_mass(p):
    w = np.zeros_like(GRID)
    w[int(round(p * 20))] = 1.0
    return w


def test_chance_mixed_by_hand():
    # A prompt known to pass half the time: two more after two wrong are not both wrong 3/4.
    assert chance_mixed(point_mass(0.5), 0, 2, 2, all_correct=False) == pytest.approx(0.75)
    # Half the tag's prompts never solved, half at 0.5: two wrong move the odds to 1 : 1/4, so
    # c = (1/4 x 3/4) / (5/4) = 0.15.
    w = point_mass(0.0) + point_mass(0.5)
    assert chance_mixed(w, 0, 2, 2, all_correct=False) == pytest.approx(0.15)
    assert chance_mixed(point_mass(1.0), 2, 0, 2, all_correct=True) == 0.0


def _after(strategy, history, i, rewards, phase=PHASE_SCREEN):
    history.record(i, 0, int(np.sum(np.asarray(rewards) >= 0.5)), len(rewards))
    history.phase = phase
    return strategy.after_scored(i, np.asarray(rewards, float), history)


def test_decisions_by_hand():
    s, h = SeqScreenStrategy(cfg()), PromptHistory(4)
    assert s.start(0, h).n == 2
    d = _after(s, h, 0, [1.0, 0.0])  # mixed after 2: qualified, 6 more
    assert (d.verdict, d.n, d.phase, d.reason) == (REQUEST, 6, PHASE_CONTINUE, "screen_qualified")
    assert _after(s, h, 0, [1.0, 0.0] + [0.0] * 6, PHASE_CONTINUE).verdict == ACCEPT
    s.tag_weights[0] = point_mass(0.5)  # the tag's prompts pass half the time: c = 3/4, 2 / c <= 8
    d = _after(s, h, 1, [0.0, 0.0])
    assert (d.verdict, d.n, d.reason) == (REQUEST, 2, "seq_more")
    d = _after(s, h, 1, [0.0, 0.0, 0.0, 0.0])  # the whole screening all wrong: SPEED's verdict
    assert (d.verdict, d.reason) == (REJECT, "screen_all_wrong")
    s.tag_weights[0] = point_mass(0.0) + 0.01 * point_mass(0.5)  # the tag is almost never solved
    d = _after(s, h, 2, [0.0, 0.0])
    assert (d.verdict, d.reason) == (REJECT, "seq_stop_all_wrong")
    assert s.metrics()["seq_more_share"] == pytest.approx(0.5)


def test_tags_learn_their_own_priors():
    s, h = SeqScreenStrategy(cfg()), PromptHistory(40)
    s.bind_tags([0] * 20 + [1] * 20)
    for i in range(20):  # tag 0 always wrong, tag 1 mixed
        h.phase = PHASE_SCREEN
        s._learn(i, np.zeros(4))
        s._learn(20 + i, np.array([1.0, 0.0, 1.0, 0.0]))
        s.qualified += 1  # the mixed one qualified: 168 responses for 21 qualified, 8 each
    assert _after(s, h, 5, [0.0, 0.0]).reason == "seq_stop_all_wrong"
    assert _after(s, h, 25, [0.0, 0.0]).reason == "seq_more"


@pytest.mark.parametrize("kw, flag", [(dict(pass_rate_low=0.2, pass_rate_high=0.8), "needs the band"),
                                      (dict(seq_first=4), "--speed.seq_first"),
                                      (dict(n_init=1), "--speed.n_init")])
def test_combinations_that_make_no_sense_are_refused(kw, flag):
    with pytest.raises(ValueError, match=flag):
        cfg(**kw)


def test_its_flags_need_the_strategy():
    with pytest.raises(ValueError, match="--speed.prior_key is read by --speed.strategy speed_keep, speed_seq and speed_thin only"):
        SpeedConfig(strategy="speed", prior_key="level").validate()
    with pytest.raises(ValueError, match="--speed.seq_first is read by"):
        SpeedConfig(strategy="dapo", seq_first=2).validate()


def _simulate(strategy, rates, tags=None, steps=30, **kw):
    config = SpeedConfig(strategy=strategy, n_samples_per_prompt=8, n_init=4, batch_prompts=4,
                         warn_qualification_rate=0.0, num_epochs=3, **kw).validate()
    sched = Scheduler(len(rates), config, tags=tags)
    driver = SimulatedDriver(sched, SimulatedPolicy(rates, seed=1))
    return driver.run(max_steps=steps), driver.requests, sched


def test_fewer_screening_responses_per_trained_group_than_speed_with_full_groups():
    # Two tags: a third of the prompts never solved (tag 1), the rest near 0.4.
    rates = [0.0 if i % 3 == 0 else 0.4 for i in range(300)]
    tags = [1 if i % 3 == 0 else 0 for i in range(300)]
    spent = {}
    for name, t in (("speed", None), ("speed_seq", tags)):
        batches, requests, _ = _simulate(name, rates, t)
        groups = [g for b in batches for g in b.groups]
        assert len(groups) == 120 and all(len(g.responses) == 8 for g in groups)
        screen = sum(r.n for r in requests if r.phase == PHASE_SCREEN)
        spent[name] = screen / len(groups)
    assert spent["speed_seq"] < 0.8 * spent["speed"]


def test_state_survives_a_checkpoint():
    rates = [0.0 if i % 3 == 0 else 0.4 for i in range(90)]
    tags = [i % 3 == 0 for i in range(90)]
    _, _, sched = _simulate("speed_seq", rates, tags, steps=5, prior_key="level")
    state = sched.state_dict()
    config = SpeedConfig(strategy="speed_seq", n_samples_per_prompt=8, n_init=4, batch_prompts=4,
                         warn_qualification_rate=0.0, num_epochs=3, prior_key="level").validate()
    fresh = Scheduler(90, config, tags=tags)
    fresh.load_state_dict(state)
    a, b = sched.strategy, fresh.strategy
    assert set(a.tag_weights) == set(b.tag_weights) == {0, 1}
    for t in a.tag_weights:
        np.testing.assert_allclose(a.tag_weights[t], b.tag_weights[t])
    assert (a.spent, a.qualified) == (b.spent, b.qualified)


def test_a_screening_in_two_halves_counts_once_when_it_is_decided():
    rates = [0.0 if i % 3 == 0 else 0.4 for i in range(300)]
    tags = [1 if i % 3 == 0 else 0 for i in range(300)]
    batches, requests, sched = _simulate("speed_seq", rates, tags)
    visits = {(r.prompt_index, r.epoch) for r in requests}
    totals = sched.totals()
    # one count per visit, once decided: the second half of a screening is not a second screening
    assert len(visits) - sched.inflight_prompts <= totals["prompts_screened"] <= len(visits)
    assert sum(1 for r in requests if r.phase == PHASE_SCREEN) > len(visits)  # some asked for the rest
    # qualified screenings are the visits that asked for a continuation (the last ones may not be
    # handed out yet when the run stops)
    continued = {(r.prompt_index, r.epoch) for r in requests if r.phase == PHASE_CONTINUE}
    assert len(continued) <= totals["prompts_qualified"] <= len(continued) + sched.inflight_prompts
