"""The SPEED driver's configuration from the parsed flags (`--speed.*` and the OpenRLHF
flags it reads). Here, below cli/, because both sides need it: cli/flags.py validates and
plans with it, and our trainer (rollout/trainer.py, a Ray actor) builds the driver from it.
"""


def speed_config(args):
    """SpeedConfig from the parsed flags (None when --speed.strategy off)."""
    from openrlhf_speed.curriculum import SpeedConfig

    s = args.speed
    if s.strategy == "off":
        return None
    n = args.rollout.n_samples_per_prompt
    return SpeedConfig(
        n_samples_per_prompt=n,
        n_init=s.n_init if s.n_init is not None else max(1, min(4, n // 2)),
        pass_rate_low=s.pass_rate_low,
        pass_rate_high=s.pass_rate_high,
        batch_prompts=args.rollout.batch_size,
        max_inflight_prompts=s.max_inflight_prompts,
        max_inflight_responses=s.max_inflight_responses,
        buffer_size=s.buffer_size,
        strategy=s.strategy,
        seed=args.train.seed,
        num_epochs=args.train.num_episodes,
        correct_threshold=s.correct_threshold,
        max_screened_per_batch=s.max_screened_per_batch,
        warn_qualification_rate=s.warn_qualification_rate,
        max_staleness=s.max_staleness,
        explore_floor=s.explore_floor,
        posterior_decay=s.posterior_decay,
        greso_p_init=s.greso_p_init,
        greso_p_step=s.greso_p_step,
        greso_target_zero_variance=s.greso_target_zero_variance,
        cures_temperature=s.cures_temperature,
        bayes_skip_confidence=s.bayes_skip_confidence,
        bayes_admit_confidence=s.bayes_admit_confidence,
    )
