"""Hand-computed cases: exact request sequences, counters and metrics.

Four prompts with scripted rewards (legend: each script is the N = 4 rewards the prompt's
responses get, in order; screening takes the first N_init = 2):
    prompt 0: 0 0 | 0 0   all wrong      tokens per response 10
    prompt 1: 1 1 | 1 1   all correct    20
    prompt 2: 1 0 | 1 1   mixed          30
    prompt 3: 0 1 | 0 0   mixed          40
"""

import math

import pytest

from openrlhf_speed.curriculum import (STRATEGIES, Decision, Response, Scheduler, SpeedConfig,
                                       Strategy, qualify, register_strategy)

SCRIPTS = {0: [0, 0, 0, 0], 1: [1, 1, 1, 1], 2: [1, 0, 1, 1], 3: [0, 1, 0, 0]}
TOKENS = {0: 10, 1: 20, 2: 30, 3: 40}


def scripted(req, version):
    """Responses for a request: continuation rewards start after the screening ones."""
    start = 2 if req.phase == "continue" else 0
    rewards = SCRIPTS[req.prompt_index][start: start + req.n]
    return [Response(float(r), TOKENS[req.prompt_index], version, (req.request_id, j))
            for j, r in enumerate(rewards)]


def cfg(**kw):
    base = dict(n_samples_per_prompt=4, n_init=2, batch_prompts=2, max_inflight_prompts=4,
                buffer_size=6, seed=0)
    base.update(kw)
    return SpeedConfig(**base)


def test_speed_exact_sequence_and_metrics():
    sched = Scheduler(4, cfg())
    order = [int(i) for i in sched.epoch_order(0)]
    sched.policy_version = 1
    screens = sched.next_requests()
    assert [(r.prompt_index, r.n, r.phase, r.request_id, r.epoch, r.engine_hint) for r in screens] == [
        (p, 2, "screen", i, 0, None) for i, p in enumerate(order)
    ]
    assert sched.next_requests() == []  # inflight bound (4) reached
    assert sched.pop_batch() is None
    for r in screens:
        sched.submit(r.request_id, scripted(r, 1), engine=100 + r.request_id)
    sched.policy_version = 2
    conts = sched.next_requests()
    mixed = [p for p in order if p in (2, 3)]
    assert [(r.prompt_index, r.n, r.phase, r.request_id) for r in conts] == [
        (p, 2, "continue", 4 + i) for i, p in enumerate(mixed)
    ]
    screen_id = {r.prompt_index: r.request_id for r in screens}
    assert [r.engine_hint for r in conts] == [100 + screen_id[p] for p in mixed]
    assert sched.next_requests() == []  # the only epoch is fully started
    for r in reversed(conts):  # out of order on purpose: batch follows completion order
        sched.submit(r.request_id, scripted(r, 2))
    sched.policy_version = 3
    batch = sched.pop_batch()
    assert [g.prompt_index for g in batch.groups] == mixed[::-1]
    for g in batch.groups:
        assert list(g.rewards) == SCRIPTS[g.prompt_index] and g.n_screen == 2
    expected = {
        "speed/screen_hist_0.00": 1, "speed/screen_hist_0.50": 2, "speed/screen_hist_1.00": 1,
        "speed/prompts_screened": 4, "speed/prompts_qualified": 2, "speed/prompts_rejected": 2,
        "speed/prompts_skipped": 0, "speed/qualification_rate": 0.5, "speed/prompts_consumed": 2,
        "speed/tokens_screen": 200, "speed/tokens_continue": 140, "speed/tokens_full": 0,
        "speed/tokens_discarded": 60, "speed/tokens_generated": 340, "speed/tokens_trained": 280,
        "speed/tokens_useful": 280,
        # Settled this step: the batch's 280 tokens and the 60 discarded with the rejected screenings.
        "speed/useful_token_share": 280 / (280 + 60), "speed/useful_token_share_cum": 280 / 340,
        "speed/staleness_screen_mean": 2, "speed/staleness_screen_max": 2,
        "speed/staleness_mean": 1.5, "speed/staleness_max": 2, "speed/accuracy": 0.5,
        "speed/reason/screen_all_wrong": 1, "speed/reason/screen_all_correct": 1,
        "speed/reason/screen_qualified": 2, "speed/reason/screen_too_hard": 0,
        "speed/reason/screen_too_easy": 0, "speed/reason/group_complete": 2,
        "speed/buffer_size": 0, "speed/inflight_prompts": 0, "speed/epoch": 1,
        "speed/epoch_position": 0, "speed/step": 0,
    }
    assert batch.metrics == pytest.approx(expected)
    assert batch.starvation_warning is None
    assert sched.exhausted and sched.pop_batch() is None
    assert sched.totals()["groups_dropped_at_end"] == 0


def run_full(strategy):
    """dapo/uniform on the scripts: one request of N per prompt, all completed at once."""
    sched = Scheduler(4, cfg(strategy=strategy))
    reqs = sched.next_requests()
    assert [(r.n, r.phase) for r in reqs] == [(4, "full")] * 4
    for r in reqs:
        sched.submit(r.request_id, scripted(r, 0))
    return sched, [int(i) for i in sched.epoch_order(0)]


def test_dapo_keeps_mixed_groups_and_counts_discards():
    sched, order = run_full("dapo")
    batch = sched.pop_batch()
    assert [g.prompt_index for g in batch.groups] == [p for p in order if p in (2, 3)]
    m = batch.metrics
    assert m["speed/reason/group_all_wrong"] == 1 and m["speed/reason/group_all_correct"] == 1
    assert m["speed/reason/group_qualified"] == 2 and m["speed/prompts_rejected"] == 2
    assert m["speed/tokens_full"] == 400 and m["speed/tokens_discarded"] == 120
    assert m["speed/tokens_screen"] == 0 and m["speed/tokens_continue"] == 0
    assert m["speed/useful_token_share"] == pytest.approx(280 / 400)
    # dapo's first look is the whole group: histogram over k/N.
    hist = {k: v for k, v in m.items() if k.startswith("speed/screen_hist_")}
    assert hist == {"speed/screen_hist_0.00": 1, "speed/screen_hist_0.25": 1,
                    "speed/screen_hist_0.50": 0, "speed/screen_hist_0.75": 1,
                    "speed/screen_hist_1.00": 1}
    assert sched.exhausted


def test_uniform_keeps_everything():
    sched, order = run_full("uniform")
    b1, b2 = sched.pop_batch(), sched.pop_batch()
    assert [g.prompt_index for g in b1.groups + b2.groups] == order
    assert b1.metrics["speed/reason/uniform_kept"] == 4 and b1.metrics["speed/prompts_rejected"] == 0
    assert b2.metrics["speed/prompts_screened"] == 0  # nothing new generated in its window
    # Each step's share is over its own trained groups (uniform discards nothing), whichever
    # window generated them: the second batch's window generated nothing, yet its share is defined.
    for batch, prompts in ((b1, order[:2]), (b2, order[2:])):
        useful = sum(4 * TOKENS[p] for p in prompts if p in (2, 3))  # only 2 and 3 are mixed
        assert batch.metrics["speed/tokens_useful"] == useful
        assert batch.metrics["speed/useful_token_share"] == pytest.approx(
            useful / sum(4 * TOKENS[p] for p in prompts))
    assert b2.metrics["speed/useful_token_share_cum"] == pytest.approx(280 / 400)
    # Uniform tests no band: no prompt "qualified", so no rate of 1.0 that reads like SPEED's.
    assert math.isnan(b1.metrics["speed/prompts_qualified"]) and math.isnan(b1.metrics["speed/qualification_rate"])
    assert sched.exhausted


def test_buffer_bound_limits_new_screening():
    # Each in-flight prompt reserves a buffer slot: buffer_size 2 admits 2 prompts.
    sched = Scheduler(4, cfg(batch_prompts=1, max_inflight_prompts=4, buffer_size=2))
    first = sched.next_requests()
    assert len(first) == 2 and sched.next_requests() == []
    for r in first:
        sched.submit(r.request_id, scripted(r, 0))
    assert sched.buffer_len + sched.inflight_prompts <= 2


def test_epochs_follow_seeded_permutations():
    sched = Scheduler(3, cfg(strategy="uniform", batch_prompts=1, num_epochs=2, seed=7))
    seen = []
    while not sched.exhausted:
        for r in sched.next_requests():
            seen.append((r.epoch, r.prompt_index))
            sched.submit(r.request_id, [Response(1.0, 1, 0)] * 4)
        while sched.pop_batch() is not None:
            pass
    expected = [(e, int(i)) for e in range(2) for i in sched.epoch_order(e)]
    assert seen == expected
    assert list(Scheduler(3, cfg(seed=7)).epoch_order(1)) == list(sched.epoch_order(1))


def test_qualify_reasons():
    assert qualify(0.0, 0.0, 1.0, "screen") == (False, "screen_all_wrong")
    assert qualify(1.0, 0.0, 1.0, "screen") == (False, "screen_all_correct")
    assert qualify(0.5, 0.0, 1.0, "screen") == (True, "screen_qualified")
    assert qualify(0.25, 0.25, 0.75, "group") == (False, "group_too_hard")
    assert qualify(0.75, 0.25, 0.75, "group") == (False, "group_too_easy")


def test_submit_errors():
    sched = Scheduler(4, cfg())
    r = sched.next_requests()[0]
    with pytest.raises(ValueError, match="asked for 2 responses, got 1"):
        sched.submit(r.request_id, [Response(1.0, 1, 0)])
    sched.submit(r.request_id, scripted(r, 0))
    with pytest.raises(ValueError, match="not outstanding"):
        sched.submit(r.request_id, scripted(r, 0))
    with pytest.raises(ValueError, match="not outstanding"):
        sched.submit(999, [])


@pytest.fixture
def temp_strategy():
    names = []

    def _register(name, cls):
        names.append(name)
        register_strategy(name, cls)

    yield _register
    for name in names:
        STRATEGIES.pop(name, None)


def test_registered_strategy_can_skip_and_is_counted(temp_strategy):
    class SkipOdd(Strategy):
        """Skips odd prompts before generation (the hook GRESO-like strategies use)."""

        reasons = ("skip_odd", "kept")

        def start(self, prompt_index, history):
            if prompt_index % 2:
                return Decision("skip", "skip_odd")
            return super().start(prompt_index, history)

        def after_scored(self, prompt_index, rewards, history):
            assert sum(history.counts(prompt_index)) == len(rewards)  # history sees every request
            return Decision("accept", "kept")

    temp_strategy("skip_odd_test", SkipOdd)
    sched = Scheduler(4, cfg(strategy="skip_odd_test", batch_prompts=2))
    reqs = sched.next_requests()
    assert sorted(r.prompt_index for r in reqs) == [0, 2]
    for r in reqs:
        sched.submit(r.request_id, scripted(r, 0))
    m = sched.pop_batch().metrics
    assert m["speed/prompts_skipped"] == 2 and m["speed/reason/skip_odd"] == 2
    assert sched.totals()["prompts_skipped"] == 2 and sched.exhausted


def test_strategy_accepting_a_short_group_fails_loudly(temp_strategy):
    class Broken(Strategy):
        def start(self, prompt_index, history):
            return Decision("request", "start", 1, "screen")

        def after_scored(self, prompt_index, rewards, history):
            return Decision("accept", "short")

    temp_strategy("broken_test", Broken)
    sched = Scheduler(4, cfg(strategy="broken_test"))
    r = sched.next_requests()[0]
    with pytest.raises(RuntimeError, match="exactly --rollout.n_samples_per_prompt = 4"):
        sched.submit(r.request_id, [Response(1.0, 1, 0)])


def test_groups_coming_counts_ready_and_completing_prompts_and_start_new_false_sends_only_continuations():
    """The driver's feeding thread (rollout/speed_generator.py) starts new prompts only while
    fewer than B groups are complete or being completed."""
    sched = Scheduler(4, cfg(num_epochs=2))
    screens = sched.next_requests()
    assert sched.groups_coming == 0  # screenings do not count: most may be rejected
    for r in screens:
        sched.submit(r.request_id, scripted(r, 0))
    conts = sched.next_requests(start_new=False)
    assert sorted(r.prompt_index for r in conts) == [2, 3] and all(r.phase == "continue" for r in conts)
    assert sched.groups_coming == 2  # the two continuations in flight
    assert sched.next_requests(start_new=False) == []  # room under the in-flight bound, but no new prompt
    sched.submit(conts[0].request_id, scripted(conts[0], 0))
    assert sched.groups_coming == 2 and sched.buffer_len == 1  # one ready, one still continuing
    assert [r.phase for r in sched.next_requests()] == ["screen"] * 3  # start_new=True: the next epoch's prompts


def test_groups_coming_counts_full_requests_of_uniform():
    sched = Scheduler(4, cfg(strategy="uniform"))
    assert len(sched.next_requests()) == 4 and sched.groups_coming == 4


def test_the_response_window_bounds_new_prompts_not_continuations():
    # Window 8 responses, N_init 2: 4 screenings fill it (the prompt bound derived from it is 4
    # too); the buffer bound is set out of the way.
    sched = Scheduler(16, SpeedConfig(n_samples_per_prompt=4, n_init=2, batch_prompts=2, max_inflight_responses=8,
                                      buffer_size=100, seed=0))
    assert sched.config.inflight_limit == 4
    screens = sched.next_requests()
    assert [r.n for r in screens] == [2, 2, 2, 2] and sched.outstanding_responses == 8

    def answer(req, rewards):
        sched.submit(req.request_id, [Response(float(x), 1, 0, None) for x in rewards])

    answer(screens[0], [1, 0])  # mixed: qualifies
    # Its continuation goes out at once, though 6 + 2 = 8 responses are outstanding again:
    # the window holds new prompts back, never a prompt already started.
    out = sched.next_requests()
    assert [(r.prompt_index, r.phase, r.n) for r in out] == [(screens[0].prompt_index, "continue", 2)]
    assert sched.outstanding_responses == 8
    answer(screens[1], [0, 0])  # rejected: 6 outstanding, room for one more screening of 2
    out = sched.next_requests()
    assert [r.phase for r in out] == ["screen"] and sched.outstanding_responses == 8
