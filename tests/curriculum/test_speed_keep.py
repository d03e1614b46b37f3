"""speed_keep: speed_thin that continues an all-equal screening of k responses to N where a
mixed group is likely enough, (N - k) / c <= lambda + (N - N_init), and trains the group only if
it is mixed; c is the model's (the tag prior's) until the continued groups of its key measure it.

Legend: N = 8, N_init = 4, first half m = 2, band (0, 1); lambda, the run's screening responses
per qualified prompt, is set by hand (10 unless named).
"""

import pickle

import numpy as np
import pytest

from openrlhf_speed.curriculum import Scheduler, SpeedConfig
from openrlhf_speed.curriculum.history import PromptHistory, decision_uniform
from openrlhf_speed.curriculum.keep_screen import EXPLORE, KeepScreenStrategy, keep_pays, kept_yield
from openrlhf_speed.curriculum.records import PHASE_CONTINUE, PHASE_SCREEN
from openrlhf_speed.curriculum.seq_screen import GRID, SeqScreenStrategy
from openrlhf_speed.curriculum.simulate import SimulatedDriver, SimulatedPolicy
from openrlhf_speed.curriculum.strategies import ACCEPT, REJECT, REQUEST
from openrlhf_speed.curriculum.thin_screen import screening_yield


def cfg(**kw):
    base = dict(strategy="speed_keep", n_samples_per_prompt=8, n_init=4, batch_prompts=4,
                warn_qualification_rate=0.0, seed=0, prior_key="level")
    base.update(kw)
    return SpeedConfig(**base).validate()


def point_mass(p, screenings=20.0):
    w = np.zeros_like(GRID)
    w[int(round(p * 20))] = screenings
    return w


def strategy(p, cost=10.0):
    """One tag whose prompts all pass with probability p; a run whose qualifications cost `cost`."""
    s = KeepScreenStrategy(cfg())
    s.bind_tags([0, 0, 0])
    s.tag_weights[0] = point_mass(p)
    s.qualified = 9.0
    s.spent = cost * s.qualified
    return s


def scored(history, i, rewards):
    history.record(i, 0, int(sum(r >= 0.5 for r in rewards)), len(rewards))
    return np.array(rewards, dtype=np.float64)


def test_keep_pays_by_hand():
    # 6 more responses, mixed with chance 1/2: 12 per informative group, against 10 + 4.
    assert keep_pays(0.5, 6, 10.0, 4)
    assert not keep_pays(0.4, 6, 10.0, 4)  # 15 > 14
    assert not keep_pays(0.0, 6, 10.0, 4)


def test_an_all_right_first_half_is_kept_where_a_full_group_is_likely_mixed():
    # p = 0.9: two right; two more are mixed with c = 1 - 0.81 = 0.19 (2 / 0.19 = 10.5 > 10: speed_seq
    # stops), but six more with c = 1 - 0.9^6 = 0.469 (6 / 0.469 = 12.8 <= 10.2 + 4): kept.
    s, h = strategy(0.9), PromptHistory(3)
    d = s.after_scored(0, scored(h, 0, [1, 1]), h)
    assert (d.verdict, d.reason, d.n, d.phase) == (REQUEST, "keep_all_correct", 6, PHASE_CONTINUE)
    assert s.metrics()["keep_kept"] == 1.0 and s.in_flight == {0: (0, True, 2)}
    assert s.after_scored(1, scored(h, 1, [1, 1]), h).reason == "keep_all_correct"
    # the group of 8 is trained only if it came out mixed, and each outcome is counted for its key
    h.phase = PHASE_CONTINUE
    assert s.after_scored(0, np.array([1, 1, 1, 0, 1, 1, 1, 1.0]), h).verdict == ACCEPT
    d = s.after_scored(1, np.ones(8), h)
    assert (d.verdict, d.reason) == (REJECT, "keep_unmixed") and s.metrics()["keep_unmixed"] == 1.0
    assert s.keep_counts[(0, True, 2)] == pytest.approx([1 + 31 / 32, 31 / 32]) and s.in_flight == {}
    # a kept prompt screened again (its group went stale) leaves no outcome for its old key
    h.phase = PHASE_SCREEN
    s.after_scored(2, scored(h, 2, [1, 1]), h)
    assert 2 in s.in_flight
    s.after_scored(2, scored(h, 2, [1, 0]), h)
    h.phase = PHASE_CONTINUE
    s.after_scored(2, np.array([1, 0, 1, 1, 1, 1, 1, 1.0]), h)
    assert s.keep_counts[(0, True, 2)] == pytest.approx([1 + 31 / 32, 31 / 32])


def test_nothing_is_kept_that_would_go_stale_before_it_trains():
    # B = 4, staleness bound 2: with 8 groups complete or continuing ahead, a kept one would train
    # two policy versions late at best; speed_thin's rejection stands. With 7, it is kept.
    s = KeepScreenStrategy(cfg(max_staleness=2))
    s.bind_tags([0, 0, 0])
    s.tag_weights[0] = point_mass(0.9)
    s.qualified, s.spent = 9.0, 90.0
    h = PromptHistory(3)
    h.groups_coming = 8
    assert s.after_scored(0, scored(h, 0, [1, 1]), h).reason == "seq_stop_all_correct"
    h.groups_coming = 7
    assert s.after_scored(1, scored(h, 1, [1, 1]), h).reason == "keep_all_correct"


def test_a_solved_prompt_is_turned_away_once_its_key_is_measured_but_explored_now_and_then():
    # p = 0.95: the model's c = 1 - 0.95^6 = 0.265; with 10 continued groups of this key, 2 mixed,
    # c = (2 + 2 x 0.265) / 12 = 0.211, 6 / 0.211 = 28 > 14: rejected, but for the keyed draws
    # under EXPLORE, which are continued to measure c again.
    s, h = strategy(0.95), PromptHistory(200)
    s.keep_counts[(0, True, 2)] = [10.0, 2.0]
    s.bind_tags([0] * 200)
    reasons = []
    for i in range(200):
        s.spent = 10.0 * s.qualified  # lambda held at 10: none of these qualifies
        reasons.append(s.after_scored(i, scored(h, i, [1, 1]), h).reason)
    explored = [i for i in range(200) if decision_uniform(0, 5, i, 0) < EXPLORE]
    assert [i for i, r in enumerate(reasons) if r == "keep_explore"] == explored and 0 < len(explored) < 12
    assert all(r == "seq_stop_all_correct" for i, r in enumerate(reasons) if i not in explored)
    # Fewer than 4 groups measured: every such screening is continued, to measure c.
    s, h = strategy(0.95), PromptHistory(3)
    assert s.after_scored(0, scored(h, 0, [1, 1]), h).reason == "keep_explore"


def test_measured_groups_outweigh_the_model():
    # The same solved-looking tag, but its last 8 continued groups all came out mixed:
    # c = (8 + 2 x 0.265) / 10 = 0.853, 6 / 0.853 = 7.0 <= 14.2: kept.
    s, h = strategy(0.95), PromptHistory(3)
    s.keep_counts[(0, True, 2)] = [8.0, 8.0]
    assert s.measured_chance((0, True, 2), 1 - 0.95 ** 6) == pytest.approx((8 + 2 * (1 - 0.95 ** 6)) / 10)
    assert s.after_scored(0, scored(h, 0, [1, 1]), h).reason == "keep_all_correct"
    # and in a run whose qualifications cost 2 responses a kept group costs too much: 7.0 > 2.2 + 4
    s.spent = 2.0 * s.qualified
    assert s.after_scored(1, scored(h, 1, [1, 1]), h).verdict == REJECT


def test_a_kept_prompt_teaches_its_tag_prior_with_its_whole_group():
    s, h = KeepScreenStrategy(cfg()), PromptHistory(2)
    ref = SeqScreenStrategy(SpeedConfig(strategy="speed_seq", n_samples_per_prompt=8, n_init=4,
                                        warn_qualification_rate=0.0).validate())
    before = s._weights(0).copy()
    d = s.after_scored(0, scored(h, 0, [1, 1, 1, 1]), h)  # all right after N_init: continued
    assert (d.verdict, d.n) == (REQUEST, 4) and d.reason in ("keep_all_correct", "keep_explore")
    assert np.array_equal(s._weights(0), before) and s.spent == 8.0 + 4  # the screening's cost counts now
    h.phase = PHASE_CONTINUE
    group = np.array([1, 1, 1, 1, 1, 1, 0, 1.0])
    s.after_scored(0, group, h)
    ref._learn(0, group)
    assert np.allclose(s._weights(0), ref._weights(0)) and s.spent == 8.0 + 4


def test_an_all_wrong_screening_of_n_init_is_kept_too():
    # p = 0.3: two wrong leave c = 1 - 0.49 = 0.51, 2 / 0.51 <= 10: speed_seq screens the rest.
    s, h = strategy(0.3), PromptHistory(3)
    d = s.after_scored(0, scored(h, 0, [0, 0]), h)
    assert (d.verdict, d.reason, d.n, d.phase) == (REQUEST, "seq_more", 2, PHASE_SCREEN)
    # Four wrong: out of the band; four more are mixed with c = 1 - 0.7^4 = 0.76, 4 / 0.76 = 5.3 <= 14.
    d = s.after_scored(0, scored(h, 0, [0, 0, 0, 0]), h)
    assert (d.verdict, d.reason, d.n, d.phase) == (REQUEST, "keep_all_wrong", 4, PHASE_CONTINUE)


def test_a_mixed_screening_goes_on_as_in_speed_thin():
    s, h = strategy(0.5), PromptHistory(3)
    d = s.after_scored(0, scored(h, 0, [1, 0]), h)
    assert (d.verdict, d.reason, d.n, d.phase) == (REQUEST, "screen_qualified", 6, PHASE_CONTINUE)
    assert s.metrics()["keep_kept"] == 0.0


def test_kept_yield_by_hand_and_in_the_price_of_a_tag():
    # p = 0.9, lambda 10: all right after two (0.81) stops there (2 / 0.19 > 10) and is kept with
    # c = 1 - 0.9^6; all wrong after two (0.01) goes on, all wrong after four (0.0001) is kept with
    # c = 1 - 0.1^4.
    added = kept_yield(point_mass(0.9), 0, 0, 2, 4, 8, cost=10.0)
    assert added == pytest.approx(0.81 * (1 - 0.9 ** 6) + 0.0001 * (1 - 0.1 ** 4))
    # p = 0.95: all right is never kept (c = 0.265); all wrong after four (0.05^4) is, with c ~ 1
    assert kept_yield(point_mass(0.95), 0, 0, 2, 4, 8, cost=10.0) == pytest.approx(0.05 ** 4 * (1 - 0.05 ** 4))
    # a measured c replaces the model's where given
    assert kept_yield(point_mass(0.95), 0, 0, 2, 4, 8, cost=10.0, chance=lambda a, k, c: 0.9) == pytest.approx(
        0.95 ** 2 * 0.9 + 0.05 ** 4 * 0.9)
    s = strategy(0.9)
    base = screening_yield(point_mass(0.9), 0, 0, 2, 4, 10.0)
    assert s.expected_yield(point_mass(0.9), 0, 0, 10.0) == pytest.approx((base[0], base[1] + added))


@pytest.mark.parametrize("kw, flag", [(dict(prior_key=None), "speed_keep screens less"),
                                      (dict(pass_rate_low=0.2, pass_rate_high=0.8), "speed_keep stops a screening early"),
                                      (dict(explore_floor=0.0), "must be > 0 with --speed.strategy speed_keep")])
def test_combinations_that_make_no_sense_are_refused(kw, flag):
    with pytest.raises(ValueError, match=flag):
        cfg(**kw)


def _simulate(name, rates, tags, steps=30):
    config = SpeedConfig(strategy=name, n_samples_per_prompt=24, n_init=4, batch_prompts=4,
                         warn_qualification_rate=0.0, num_epochs=10, prior_key="level").validate()
    sched = Scheduler(len(rates), config, tags=tags)
    driver = SimulatedDriver(sched, SimulatedPolicy(rates, seed=1))
    return driver.run(max_steps=steps), driver.requests, sched


def test_on_an_easy_mix_it_generates_less_per_trained_group_and_trains_only_mixed_groups():
    # The low mix's shape late in a run, at the paper's N = 24: prompts solved 85-90% of the time.
    rates = [0.85 if i % 2 else 0.9 for i in range(600)]
    tags = [i % 2 for i in range(600)]
    spent = {}
    for name in ("speed_thin", "speed_keep"):
        batches, requests, sched = _simulate(name, rates, tags)
        groups = [g for b in batches for g in b.groups]
        assert len(groups) == 120 and all(len(g.responses) == 24 for g in groups)
        assert all(0 < sum(r >= 0.5 for r in g.rewards) < 24 for g in groups)
        spent[name] = sum(r.n for r in requests) / len(groups)
    assert sched.totals()["tokens_discarded"] > 0  # kept groups that ended all right are not trained
    assert sched.totals()["reason/keep_all_correct"] > 0
    assert spent["speed_keep"] < 0.9 * spent["speed_thin"]  # 25.1 against 31.9 responses a trained group


def _view(batches):
    return [[(g.prompt_index, g.epoch, tuple(g.rewards)) for g in b.groups] for b in batches]


@pytest.mark.parametrize("save_tick", [3, 17, 40])
def test_a_resumed_run_decides_as_an_uninterrupted_one(save_tick):
    rates = [0.85 if i % 3 else 0.1 for i in range(90)]
    tags = [1 if i % 3 else 0 for i in range(90)]
    config = cfg(n_samples_per_prompt=24, num_epochs=4, batch_prompts=2, max_inflight_prompts=6)
    a = SimulatedDriver(Scheduler(90, config, tags=tags), SimulatedPolicy(rates, seed=3), completions_per_tick=3)
    whole = a.run()
    b = SimulatedDriver(Scheduler(90, config, tags=tags), SimulatedPolicy(rates, seed=3), completions_per_tick=3)
    first = [x for x in (b.tick() for _ in range(save_tick)) if x is not None]
    restored = Scheduler(90, config, tags=tags)
    restored.load_state_dict(pickle.loads(pickle.dumps(b.scheduler.state_dict())))
    assert restored.strategy.cost_per_qualified() == b.scheduler.strategy.cost_per_qualified()
    rest = SimulatedDriver(restored, SimulatedPolicy(rates, seed=3), completions_per_tick=3).run()
    assert _view(first + rest) == _view(whole)
    assert restored.totals() == a.scheduler.totals()
    assert a.scheduler.totals()["reason/keep_all_correct"] > 0 and a.scheduler.totals()["reason/keep_explore"] > 0


def test_the_scheduler_tells_each_decision_how_many_groups_are_coming():
    rates = [0.85 if i % 2 else 0.9 for i in range(200)]
    config = cfg(n_samples_per_prompt=24, max_staleness=2, max_inflight_prompts=16, num_epochs=2)
    sched = Scheduler(200, config, tags=[i % 2 for i in range(200)])
    seen, decide = [], sched.strategy.after_scored

    def spy(i, rewards, history):
        seen.append((history.groups_coming, sched.groups_coming))
        return decide(i, rewards, history)

    sched.strategy.after_scored = spy
    SimulatedDriver(sched, SimulatedPolicy(rates, seed=1)).run(max_steps=10)
    assert seen and all(a == b for a, b in seen) and max(a for a, _ in seen) > 0
