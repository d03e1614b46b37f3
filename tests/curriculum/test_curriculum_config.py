"""SpeedConfig.validate: every bad combination is reported with the command-line flags."""

import pytest

from openrlhf_speed.curriculum import STRATEGIES, Scheduler, SpeedConfig


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_init=8), "--speed.n_init (8) must be < --rollout.n_samples_per_prompt (8)"),
        (dict(n_init=1), "--speed.n_init (1) must be >= 2"),
        (dict(n_samples_per_prompt=1, strategy="uniform"), "--rollout.n_samples_per_prompt (1) must be >= 2"),
        (dict(pass_rate_low=0.6, pass_rate_high=0.4),
         "need 0 <= --speed.pass_rate_low (0.6) < --speed.pass_rate_high (0.4) <= 1"),
        (dict(pass_rate_high=1.5), "--speed.pass_rate_high (1.5) <= 1"),
        (dict(batch_prompts=8, buffer_size=4), "--speed.buffer_size (4) must be >= --rollout.batch_size (8)"),
        (dict(max_inflight_prompts=0), "--speed.max_inflight_prompts (0) must be >= 1"),
        (dict(strategy="nope"), "--speed.strategy 'nope' is not one of: cures, dapo, greso, speed, speed_bayes, speed_keep, speed_seq, speed_thin, uniform"),
        (dict(num_epochs=0), "--train.num_episodes (0) must be >= 1"),
        (dict(batch_prompts=8, max_screened_per_batch=4), "--speed.max_screened_per_batch (4) must be None or >="),
        (dict(seed=-1), "--train.seed (-1) must be >= 0"),
        (dict(warn_qualification_rate=2.0), "--speed.warn_qualification_rate (2.0) must be in [0, 1]"),
    ],
)
def test_validate_names_the_flags(kwargs, message):
    with pytest.raises(ValueError) as err:
        SpeedConfig(**kwargs).validate()
    assert message in str(err.value)


def test_all_errors_reported_at_once():
    with pytest.raises(ValueError) as err:
        SpeedConfig(n_init=9, pass_rate_low=1.0).validate()
    assert "--speed.n_init" in str(err.value) and "--speed.pass_rate_low" in str(err.value)


def test_n_init_is_ignored_by_full_group_strategies():
    for name in ("dapo", "uniform"):
        SpeedConfig(n_init=8, n_samples_per_prompt=8, strategy=name).validate()


def test_defaults_and_derived_capacities():
    cfg = SpeedConfig(batch_prompts=16).validate()
    assert (cfg.max_inflight_responses, cfg.inflight_limit, cfg.buffer_limit) == (None, 32, 48)
    assert set(STRATEGIES) >= {"speed", "dapo", "uniform"}


def test_a_response_window_derives_the_prompt_window():
    # 2BN responses: 2B prompts of N for uniform and DAPO, 2BN / N_init screenings for SPEED
    # (here N=8, N_init=4: 64 prompts); an explicit prompt window wins.
    for strategy, prompts in (("uniform", 32), ("dapo", 32), ("speed", 64), ("speed_bayes", 64)):
        cfg = SpeedConfig(batch_prompts=16, n_samples_per_prompt=8, n_init=4, strategy=strategy,
                          max_inflight_responses=256).validate()
        assert (cfg.inflight_limit, cfg.buffer_limit) == (prompts, prompts + 16)
    cfg = SpeedConfig(batch_prompts=16, max_inflight_prompts=20, max_inflight_responses=256).validate()
    assert (cfg.max_inflight_responses, cfg.inflight_limit, cfg.buffer_limit) == (256, 20, 36)
    with pytest.raises(ValueError, match=r"--speed.max_inflight_responses \(0\) must be >= 1"):
        SpeedConfig(max_inflight_responses=0).validate()


def test_scheduler_validates_and_rejects_empty_dataset():
    with pytest.raises(ValueError, match="--speed.n_init"):
        Scheduler(10, SpeedConfig(n_init=8))
    with pytest.raises(ValueError, match="empty"):
        Scheduler(0, SpeedConfig())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(explore_floor=1.5), "--speed.explore_floor (1.5) must be in [0, 1]"),
        (dict(posterior_decay=0.0), "--speed.posterior_decay (0.0) must be in (0, 1]"),
        (dict(greso_p_init=0.0), "--speed.greso_p_init (0.0) must be in (0, 1]"),
        (dict(greso_p_step=-0.1), "--speed.greso_p_step (-0.1) must be in [0, 1]"),
        (dict(greso_target_zero_variance=2.0), "--speed.greso_target_zero_variance (2.0) must be in [0, 1]"),
        (dict(cures_temperature=0.0), "--speed.cures_temperature (0.0) must be > 0"),
        (dict(bayes_skip_confidence=0.0), "--speed.bayes_skip_confidence (0.0) must be in (0, 1]"),
        (dict(bayes_admit_confidence=1.2), "--speed.bayes_admit_confidence (1.2) must be in (0, 1]"),
        (dict(strategy="greso", explore_floor=0.0), "--speed.explore_floor must be > 0 with --speed.strategy greso"),
        (dict(strategy="speed_bayes", explore_floor=0.0, posterior_decay=1.0),
         "--speed.explore_floor 0 with --speed.posterior_decay 1 would skip"),
        (dict(strategy="speed_bayes", n_init=8), "--speed.n_init (8) must be < --rollout.n_samples_per_prompt (8)"),
        (dict(strategy="cures", n_init=9), "--speed.n_init (9) must be in [2, --rollout.n_samples_per_prompt (8)]"),
        (dict(strategy="cures", n_init=1), "--speed.n_init (1) must be in [2,"),
    ],
)
def test_history_knobs_validate_with_the_flag_names(kwargs, message):
    with pytest.raises(ValueError) as err:
        SpeedConfig(**kwargs).validate()
    assert message in str(err.value)


def test_history_strategy_defaults_are_valid():
    for name in ("greso", "cures", "speed_bayes"):
        SpeedConfig(strategy=name).validate()
    SpeedConfig(strategy="cures", n_init=8).validate()  # all N at once: dapo with an ordered epoch
    SpeedConfig(strategy="speed_bayes", explore_floor=0.0).validate()  # decay still re-screens
