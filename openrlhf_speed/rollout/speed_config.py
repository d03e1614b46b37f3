"""The SPEED driver's configuration from the parsed flags (`--speed.*` and the OpenRLHF
flags it reads), and the schedule `--speed.schedule auto` stands for on a device. Here,
below cli/, because every side needs it: cli/flags.py validates and plans with it, our
trainer (rollout/trainer.py, a Ray actor) builds the driver from it, and the benchmark
records the schedule its runs use (bench/commands.py).
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
        seq_first=getattr(s, "seq_first", None),
        prior_key=getattr(s, "prior_key", None),
        pace_batches=getattr(s, "pace_batches", None),
    )


SCHEDULES = ("auto", "overlap", "serial")


def resolve_schedule(requested: str, device: str, *, feed_during_training: str = "off",
                     async_enable: bool = False, generation_only: bool = False) -> tuple:
    """(schedule, reason) for `--speed.schedule`: an explicit overlap or serial as given; auto
    becomes serial where the engines share the CPU with the actor (the CPU mode: the overlap
    slows the actor's passes more than it hides, docs/cpu.md) and overlap where they have
    devices of their own. A flag that keeps the engines generating while the actor works
    (--speed.feed_during_training on, --train.async_enable) makes auto overlap: serial
    would contradict it; so does --train.generation_only, where the actor never works and
    serial would only stop the stream being measured. device: "cpu" or "cuda", as
    compat/device.py decided for the run."""
    if requested not in SCHEDULES:
        raise ValueError(f"--speed.schedule {requested!r}: expected one of {', '.join(SCHEDULES)}")
    if requested != "auto":
        return requested, "--speed.schedule " + requested
    for on, flag in ((feed_during_training == "on", "--speed.feed_during_training on"),
                     (async_enable, "--train.async_enable")):
        if on:
            return "overlap", f"auto: {flag} keeps the engines generating while the actor works"
    if generation_only:
        return "overlap", "auto: --train.generation_only has no actor work to idle the engines for"
    if device == "cpu":
        return "serial", "auto: engines share the CPU with the actor"
    return "overlap", "auto: engines have devices of their own"
