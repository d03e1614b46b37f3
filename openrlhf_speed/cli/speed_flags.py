"""The `--speed.*` group: the curriculum's flags, shared by `train` and `advise`.

Kept apart from flags.py, which prepares and validates the parsed args: here only what each
flag means and its default, so `advise` can read the same flags without the training set-up.
Combinations are checked in flags._validate_speed and SpeedConfig.validate.
"""


def add_speed_arguments(parser) -> None:
    g = parser.add_argument_group("SPEED curriculum (--speed.*)")
    g.add_argument("--speed.strategy", type=str, default="speed",
                   choices=["speed", "dapo", "uniform", "greso", "cures", "speed_bayes", "speed_seq", "speed_thin",
                            "speed_keep", "off"],
                   help="speed: screen each prompt with N_init responses and continue only those whose pass rate lies "
                   "in (pass_rate_low, pass_rate_high) (default); dapo: generate all N, keep mixed groups (DAPO dynamic "
                   "sampling); uniform: generate all N, keep every group (plain RLOO/GRPO through the same driver); "
                   "greso: skip prompts whose recent groups were all correct or all wrong before any rollout (GRESO, "
                   "arXiv 2506.02177), then generate all N and keep mixed groups; cures: order each epoch by a Beta "
                   "posterior of the pass rate (prompts near 0.5 first) and size each prompt's first request from it "
                   "(CurES, arXiv 2510.01037); speed_bayes: speed, but a decaying per-prompt posterior skips "
                   "screenings that would confidently fail and requests all N at once for prompts that confidently "
                   "qualify; speed_seq: speed's screening in two halves, the second only where the prompt's posterior "
                   "(a prior per --speed.prior_key value, learned online, times its own counts) makes it cheaper than "
                   "screening a new prompt (docs/design.md); speed_thin: speed_seq, but a prompt whose tag's "
                   "qualifications cost more than the run's average is screened only with probability average / "
                   "its cost (at least --speed.explore_floor), skipped otherwise; needs --speed.prior_key; "
                   "speed_keep: speed_thin that continues a screening that is all right or all wrong to N where the "
                   "prompt's posterior makes a mixed group of N likely enough to cost no more than a new "
                   "qualification, and trains it only if mixed; "
                   "off: OpenRLHF's own samples generator, untouched.")
    g.add_argument("--speed.n_init", type=int, default=None,
                   help="N_init, screening responses per prompt (speed, speed_bayes; for cures the smallest first "
                   "request); N_cont = n_samples_per_prompt - N_init. Default: min(4, n_samples_per_prompt // 2).")
    g.add_argument("--speed.pass_rate_low", type=float, default=0.0,
                   help="a prompt qualifies when its screening pass rate is strictly above this")
    g.add_argument("--speed.pass_rate_high", type=float, default=1.0,
                   help="... and strictly below this")
    g.add_argument("--speed.correct_threshold", type=float, default=0.5,
                   help="a response counts as correct for the pass rate when its reward is >= this")
    g.add_argument("--speed.max_inflight_responses", type=int, default=None,
                   help="no new prompt starts while this many responses are outstanding on the engines (their load; "
                   "2 * rollout.batch_size * n_samples_per_prompt gives every curriculum uniform's). Default: no bound. "
                   "On 2 CPU cores that window made SPEED's steps 11%% slower (README)")
    g.add_argument("--speed.max_inflight_prompts", type=int, default=None,
                   help="prompts with generation outstanding at once (pre-fetching depth). Default: 2 * rollout.batch_size, "
                   "or with --speed.max_inflight_responses as many first requests (n_init or n_samples_per_prompt "
                   "responses) as fit it")
    g.add_argument("--speed.buffer_size", type=int, default=None,
                   help="bound on complete groups waiting for a step plus prompts in flight; when full, no new prompt is "
                   "screened (nothing is generated and thrown away). Default: max_inflight_prompts + rollout.batch_size")
    g.add_argument("--speed.max_screened_per_batch", type=int, default=None,
                   help="fail with a StarvationError when more prompts than this were screened without filling a batch "
                   "(default: no limit; a low qualification rate only warns)")
    g.add_argument("--speed.warn_qualification_rate", type=float, default=0.1,
                   help="warn, with the screening pass-rate histogram, when fewer than this share of screened prompts qualify")
    g.add_argument("--speed.explore_floor", type=float, default=None,
                   help="greso, speed_bayes, speed_thin, speed_keep: least probability that a prompt the history (speed_thin: its "
                   "tag) says to skip is tried anyway, so no prompt is skipped forever (default: greso 0.01 as in "
                   "GRESO, speed_bayes 0.05, speed_thin and speed_keep 0.1)")
    g.add_argument("--speed.posterior_decay", type=float, default=None,
                   help="cures, speed_bayes: per-epoch factor on a prompt's correct/wrong counts, so the posterior "
                   "follows a changing policy (default: cures 1.0, speed_bayes 0.9)")
    g.add_argument("--speed.greso_p_init", type=float, default=0.5,
                   help="greso: initial base keep probability p (easy and hard); a prompt with k zero-variance visits "
                   "in a row is kept with probability max(p^k, explore_floor)")
    g.add_argument("--speed.greso_p_step", type=float, default=0.01,
                   help="greso: change of p_easy / p_hard after each training batch, toward the target share")
    g.add_argument("--speed.greso_target_zero_variance", type=float, default=0.25,
                   help="greso: share of zero-variance groups among rolled-out groups that p_easy / p_hard steer to "
                   "(1/3 all-correct, 2/3 all-wrong)")
    g.add_argument("--speed.cures_temperature", type=float, default=0.1,
                   help="cures: tau of the prompt weights exp(sqrt(p(1-p)) / tau); smaller puts prompts near p = 0.5 "
                   "earlier in each epoch")
    g.add_argument("--speed.bayes_skip_confidence", type=float, default=0.8,
                   help="speed_bayes: skip a prompt's screening when the posterior predictive probability that it "
                   "falls outside the pass-rate band is at least this")
    g.add_argument("--speed.bayes_admit_confidence", type=float, default=0.9,
                   help="speed_bayes: request all N responses at once, without screening, when the posterior "
                   "predictive probability that the full group is inside the band is at least this")
    g.add_argument("--speed.seq_first", type=int, default=None,
                   help="speed_seq, speed_thin, speed_keep: responses in the first half of the screening; the rest of N_init follow only where "
                   "they can still pay (default: N_init // 2)")
    g.add_argument("--speed.prior_key", type=str, default=None,
                   help="speed_seq, speed_thin, speed_keep: a field of --data.prompt_dataset's rows (e.g. a difficulty level or source) whose "
                   "values tag prompts; each tag gets its own pass-rate prior, learned online from its screenings. "
                   "Default: one prior for every prompt")
    from openrlhf_speed.curriculum.config import DEFAULT_MAX_STALENESS

    # Not SpeedConfig's default (None, the paper's unbounded algorithm): the trainer
    # pre-fetches across weight syncs, so its default bounds what that lets train.
    g.add_argument("--speed.max_staleness", type=int, default=DEFAULT_MAX_STALENESS,
                   help="oldest screening samples, in policy versions (weight syncs), a trained group may hold; an "
                   "older group is not trained, its prompt is screened again (counted: speed/prompts_rescreened_stale). "
                   "0: strictly on-policy (pre-fetched work is re-screened after every sync). The paper has no bound. "
                   f"Default: {DEFAULT_MAX_STALENESS}")
    g.add_argument("--speed.pace_batches", type=int, default=None,
                   help="P: start a new prompt only while the groups expected from the work ahead (complete groups, "
                   "continuations, first requests in flight times the recent qualification rate) are fewer than "
                   "P x --rollout.batch_size; at most --speed.max_staleness + 1. On an easy mix the work in flight "
                   "otherwise qualifies more groups than the bound lets train, and the surplus is screened again. "
                   "Default: unpaced, fill to --speed.max_inflight_prompts")
    g.add_argument("--speed.is_correction", type=str, default="auto", choices=["auto", "off"],
                   help="auto: when --speed.max_staleness > 0 lets stale samples train and "
                   "--algo.advantage.is_correction_level is off, turn on OpenRLHF's importance-sampling correction "
                   "(token level, mask mode: weights pi_current / pi_rollout from the engine's log-probs); off: leave "
                   "the --algo.advantage.is_correction_* flags as given")
    g.add_argument("--speed.feed_during_training", type=str, default="off", choices=["on", "off"],
                   help="on: while the actor trains, a thread of the driver keeps the engines fed (a finished "
                   "screening's continuation at once, new screenings until the next batch is on its way), until the "
                   "drain before the weight sync; for engines with devices of their own. off (default): the work in "
                   "flight when a batch is complete runs on, nothing new is sent until the next step; on CPU, where "
                   "engines and actor share the cores, 'on' measured 14%% (B=16) and 25%% (B=8) slower steps (README)")
    g.add_argument("--speed.schedule", type=str, default="auto", choices=["auto", "overlap", "serial"],
                   help="overlap: requests still in flight when a batch is complete keep generating during the "
                   "step's experience making and training, which hides generation where engines have devices of "
                   "their own. serial: they are collected first, so the engines idle while the actor works; for "
                   "CPU, where both share the cores (11-15%% cheaper driver steps on 2 cores, docs/cpu.md). auto "
                   "(default): serial on CPU, overlap on GPUs, and overlap with --speed.feed_during_training on, "
                   "--train.async_enable or --train.generation_only; the run's first lines say which. OpenRLHF's own "
                   "generation (--speed.strategy off) is serial already")
    g.add_argument("--speed.trace_path", type=str, default=None,
                   help="append one JSON line per curriculum event (prompt started, batch, restore) to this file")
    g.add_argument("--speed.trace_max_mb", type=float, default=1024,
                   help="rotate the trace when it passes this size: it becomes PATH.1 (replacing the previous one) "
                   "and a new PATH starts with the engine settings again, so at most twice this is kept; 0: never "
                   "rotate. Default: 1024")
