"""Configuration of the SPEED scheduler and the one function that validates it.

Every field maps to a command-line flag (`FLAGS`); validation messages name the flags, not
the field names, because users meet them on the command line. OpenRLHF's own flags keep
their names (`--rollout.n_samples_per_prompt`, `--rollout.batch_size`, `--train.seed`,
`--train.num_episodes`); SPEED adds the `--speed.*` namespace.

Departures from the paper (SPEED-RL, arXiv 2506.09016):
- the pass-rate band (P_low, P_high) is configurable; the paper and its reference code fix
  it at (0, 1);
- "correct" is `reward >= correct_threshold`, so shaped rewards (e.g. a small format bonus
  on wrong answers) cannot make an all-wrong screening look mixed;
- the reference code crashes after a fixed number of generation rounds when too few
  prompts qualify; here that hard limit is optional (`max_screened_per_batch`) and a
  low qualification rate only warns (`warn_qualification_rate`);
- the trainer bounds the age of trained screening samples (`max_staleness`, flag default
  2); the paper has no bound, and neither has SpeedConfig by default.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

# The trainer's bound (`--speed.max_staleness`'s default; SpeedConfig's own is None, see
# its docstring): pre-fetched work (1 version old after the weight sync) plus one more
# step in the buffer.
DEFAULT_MAX_STALENESS = 2

# Field name -> command-line flag, used in every validation and starvation message.
FLAGS = {
    "n_samples_per_prompt": "--rollout.n_samples_per_prompt",
    "batch_prompts": "--rollout.batch_size",
    "n_init": "--speed.n_init",
    "pass_rate_low": "--speed.pass_rate_low",
    "pass_rate_high": "--speed.pass_rate_high",
    "max_inflight_prompts": "--speed.max_inflight_prompts",
    "max_inflight_responses": "--speed.max_inflight_responses",
    "buffer_size": "--speed.buffer_size",
    "strategy": "--speed.strategy",
    "seed": "--train.seed",
    "num_epochs": "--train.num_episodes",
    "correct_threshold": "--speed.correct_threshold",
    "max_screened_per_batch": "--speed.max_screened_per_batch",
    "warn_qualification_rate": "--speed.warn_qualification_rate",
    "max_staleness": "--speed.max_staleness",
    "explore_floor": "--speed.explore_floor",
    "posterior_decay": "--speed.posterior_decay",
    "greso_p_init": "--speed.greso_p_init",
    "greso_p_step": "--speed.greso_p_step",
    "greso_target_zero_variance": "--speed.greso_target_zero_variance",
    "cures_temperature": "--speed.cures_temperature",
    "bayes_skip_confidence": "--speed.bayes_skip_confidence",
    "bayes_admit_confidence": "--speed.bayes_admit_confidence",
    "seq_first": "--speed.seq_first",
    "prior_key": "--speed.prior_key",
    "pace_batches": "--speed.pace_batches",
}

# Strategy name -> class. Filled by `strategies.register_strategy` (the package's __init__
# imports every strategy module); held here, not in strategies.py, so that `validate` needs no
# import of the strategies, which import this module for SpeedConfig and FLAGS.
STRATEGIES: dict[str, type] = {}

# Fields a resumed run may change (load_state_dict accepts them); the others define the
# epoch order or the group layout, so changing them would lose or repeat prompts.
RESUMABLE_CHANGES = (
    "num_epochs",
    "max_screened_per_batch",
    "warn_qualification_rate",
    "max_staleness",
    "max_inflight_prompts",
    "max_inflight_responses",
    "buffer_size",
    "pace_batches",
    "pass_rate_low",
    "pass_rate_high",
    # History-based knobs: they steer future decisions only; the current epoch's order is
    # checkpointed, so changing them loses or repeats nothing.
    "explore_floor",
    "posterior_decay",
    "greso_p_init",
    "greso_p_step",
    "greso_target_zero_variance",
    "cures_temperature",
    "bayes_skip_confidence",
    "bayes_admit_confidence",
)


@dataclasses.dataclass
class SpeedConfig:
    """Knobs of the curriculum. `None` for the two capacity knobs means "derive from B".

    n_samples_per_prompt: N, responses per trained group (OpenRLHF's flag).
    n_init: N_init, screening responses per prompt (`speed` strategy only); N_cont = N - N_init.
    pass_rate_low / pass_rate_high: a prompt qualifies when low < pass rate < high.
    batch_prompts: B, groups per training batch (OpenRLHF's `--rollout.batch_size`).
    max_inflight_responses: no new prompt starts while this many responses are
        outstanding (the engines' load). Default None: no such bound.
    max_inflight_prompts: prompts with generation outstanding; default 2 * B, or with
        max_inflight_responses as many first requests as fit it (`inflight_limit`).
    buffer_size: bound on complete groups plus prompts in flight; default
        max_inflight_prompts + B (see Scheduler for why in-flight prompts count).
    pace_batches: P; start a new prompt only while the groups expected from the work ahead
        (complete groups, continuations, and first requests in flight times the recent
        qualification rate) are fewer than P * B: this batch's and the next P - 1. At most
        max_staleness + 1, the batches that train before a group screened now goes stale.
        Default None: the pipeline fills to max_inflight_prompts, and on an easy mix the
        surplus is screened again (docs/design.md#pacing-the-screenings).
    strategy: a name in STRATEGIES.
    seed: seeds the per-epoch permutation of prompt indices.
    num_epochs: passes over the prompt set.
    correct_threshold: a response is correct when its reward >= this.
    max_screened_per_batch: raise StarvationError when more prompts than this were
        screened since the last batch and the next batch is still not full. None: no limit.
    warn_qualification_rate: warn when a batch window's qualification rate is below this.
    max_staleness: the oldest screening samples (in policy versions) a trained group may
        hold; older groups are screened again (see `staleness.py`). 0: strictly on-policy.
        Default None, no bound: the paper's algorithm, which the pure scheduler, the
        simulator and the Theorem 4.1 tests reproduce. The trainer's flag defaults to 2
        (DEFAULT_MAX_STALENESS) instead, because its pre-fetching runs ahead of training
        while the weights change: 2 lets a batch pre-fetched during one step and waiting
        one more in the buffer train, so pre-fetching stays useful, and bounds the rest.

    History-based strategies (`history_strategies.py`; None = the strategy's default):
    explore_floor: least probability that a prompt the history says to skip is started
        anyway (greso: 0.01 as in GRESO; speed_bayes: 0.05; speed_thin, speed_keep: 0.1).
    posterior_decay: per-epoch factor on a prompt's pass/fail counts (cures: 1.0, CurES
        accumulates; speed_bayes: 0.9).
    greso_p_init / greso_p_step / greso_target_zero_variance: GRESO's base keep
        probabilities (easy and hard start equal), their step per training batch, and the
        share of zero-variance groups among rolled-out groups they steer to (1/3 easy,
        2/3 hard). Paper defaults 0.5 / 0.01 / 0.25.
    cures_temperature: tau of CurES's prompt weights exp(sqrt(p(1-p)) / tau).
    bayes_skip_confidence: speed_bayes skips screening when the posterior predictive
        probability that the screening fails the band is at least this.
    bayes_admit_confidence: speed_bayes requests all N at once, without screening, when
        the posterior predictive probability that the full group qualifies is at least this.

    speed_seq (`seq_screen.py`), speed_thin (`thin_screen.py`) and speed_keep (`keep_screen.py`):
    seq_first: the first half of its screening (None: N_init // 2).
    prior_key: the dataset field whose values tag prompts for its prior (e.g. a difficulty
        level); the driver reads it, the scheduler gets the tags. None: one prior for all.
    """

    n_samples_per_prompt: int = 8
    n_init: int = 4
    pass_rate_low: float = 0.0
    pass_rate_high: float = 1.0
    batch_prompts: int = 32
    max_inflight_prompts: Optional[int] = None
    max_inflight_responses: Optional[int] = None
    buffer_size: Optional[int] = None
    strategy: str = "speed"
    seed: int = 0
    num_epochs: int = 1
    correct_threshold: float = 0.5
    max_screened_per_batch: Optional[int] = None
    warn_qualification_rate: float = 0.1
    max_staleness: Optional[int] = None  # the trainer's flag: DEFAULT_MAX_STALENESS
    explore_floor: Optional[float] = None
    posterior_decay: Optional[float] = None
    greso_p_init: float = 0.5
    greso_p_step: float = 0.01
    greso_target_zero_variance: float = 0.25
    cures_temperature: float = 0.1
    bayes_skip_confidence: float = 0.8
    bayes_admit_confidence: float = 0.9
    seq_first: Optional[int] = None
    prior_key: Optional[str] = None
    pace_batches: Optional[int] = None

    @property
    def inflight_limit(self) -> int:
        """2B prompts, or with a response window (`max_inflight_responses`) as many first
        requests as fit it: 2BN responses give uniform 2B prompts and SPEED 2BN/N_init. That
        window is not the default: it gives SPEED's engines uniform's load (about 256 sequences
        against 100 at B=8, N=16), but on 2 CPU cores the engines then generate through the
        training, which slowed steps 11% (2.98 -> 3.32 s), and its screenings ran far enough
        ahead that 35 groups in 16 steps went stale (proving benchmark, B=8, N=16, seed 42;
        docs/benchmarks.md)."""
        if self.max_inflight_prompts is not None:
            return self.max_inflight_prompts
        if self.max_inflight_responses is None:
            return 2 * self.batch_prompts
        strategy = STRATEGIES.get(self.strategy)  # an unknown name is reported by validate()
        first = strategy.screen_n(self) if strategy is not None else self.n_samples_per_prompt
        return max(1, self.max_inflight_responses // max(1, first))

    @property
    def buffer_limit(self) -> int:
        if self.buffer_size is None:
            return self.inflight_limit + self.batch_prompts
        return self.buffer_size

    def validate(self) -> "SpeedConfig":
        """Raise ValueError listing every bad flag combination; return self when fine."""
        errors = _generic_errors(self)
        if self.strategy not in STRATEGIES:
            errors.append(
                f"{FLAGS['strategy']} {self.strategy!r} is not one of: {', '.join(sorted(STRATEGIES))}"
            )
        else:
            errors.extend(STRATEGIES[self.strategy].check_config(self))
        if errors:
            raise ValueError("invalid SPEED configuration:\n  " + "\n  ".join(errors))
        return self


def _generic_errors(cfg: SpeedConfig) -> list[str]:
    f = FLAGS
    errors = []
    if cfg.n_samples_per_prompt < 2:
        errors.append(
            f"{f['n_samples_per_prompt']} ({cfg.n_samples_per_prompt}) must be >= 2: "
            "group baselines (RLOO, GRPO) need at least two responses per prompt"
        )
    if not 0.0 <= cfg.pass_rate_low < cfg.pass_rate_high <= 1.0:
        errors.append(
            f"need 0 <= {f['pass_rate_low']} ({cfg.pass_rate_low}) < "
            f"{f['pass_rate_high']} ({cfg.pass_rate_high}) <= 1"
        )
    if cfg.batch_prompts < 1:
        errors.append(f"{f['batch_prompts']} ({cfg.batch_prompts}) must be >= 1")
    if cfg.max_inflight_responses is not None and cfg.max_inflight_responses < 1:
        errors.append(f"{f['max_inflight_responses']} ({cfg.max_inflight_responses}) must be >= 1")
    elif cfg.inflight_limit < 1:
        errors.append(f"{f['max_inflight_prompts']} ({cfg.max_inflight_prompts}) must be >= 1")
    if cfg.buffer_limit < cfg.batch_prompts:
        errors.append(
            f"{f['buffer_size']} ({cfg.buffer_limit}) must be >= {f['batch_prompts']} "
            f"({cfg.batch_prompts}): a batch is taken from the buffer"
        )
    if cfg.seed < 0:
        errors.append(f"{f['seed']} ({cfg.seed}) must be >= 0 (it seeds numpy's permutation)")
    if cfg.num_epochs < 1:
        errors.append(f"{f['num_epochs']} ({cfg.num_epochs}) must be >= 1")
    limit = cfg.max_screened_per_batch
    if limit is not None and limit < cfg.batch_prompts:
        errors.append(
            f"{f['max_screened_per_batch']} ({limit}) must be None or >= "
            f"{f['batch_prompts']} ({cfg.batch_prompts})"
        )
    if not 0.0 <= cfg.warn_qualification_rate <= 1.0:
        errors.append(
            f"{f['warn_qualification_rate']} ({cfg.warn_qualification_rate}) must be in [0, 1]"
        )
    strategy = STRATEGIES.get(cfg.strategy)  # None: an unknown name, reported by validate()
    if (cfg.seq_first is not None or cfg.prior_key) and (strategy is None or not strategy.reads_tags):
        which = f['seq_first'] if cfg.seq_first is not None else f['prior_key']
        names = sorted(name for name, c in STRATEGIES.items() if c.reads_tags)
        readers = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        errors.append(f"{which} is read by --speed.strategy {readers} only (it sizes and informs "
                      f"their two-stage screening); {f['strategy']} is {cfg.strategy}: drop the flag or use speed_seq")
    pace = cfg.pace_batches
    if pace is not None and cfg.max_staleness is None:
        errors.append(f"{f['pace_batches']} paces the screenings to the groups that train within "
                      f"{f['max_staleness']}, which is None (no bound): set {f['max_staleness']} or drop the flag")
    elif pace is not None and not 1 <= pace <= cfg.max_staleness + 1:
        errors.append(f"{f['pace_batches']} ({pace}) must be in [1, {f['max_staleness']} + 1 = {cfg.max_staleness + 1}]: "
                      "a group expected beyond that many batches goes stale before it trains")
    if cfg.max_staleness is not None and cfg.max_staleness < 0:
        errors.append(f"{f['max_staleness']} ({cfg.max_staleness}) must be >= 0 (0: strictly on-policy)")
    for field, low, high, closed_low in _HISTORY_RANGES:
        value = getattr(cfg, field)
        if value is not None and not (low <= value <= high and (closed_low or value > low)):
            span = f"in {'[' if closed_low else '('}{low:g}, {high:g}]" if high < math.inf else f"> {low:g}"
            errors.append(f"{f[field]} ({value}) must be {span}")
    return errors


# (field, low, high, low end included): the history-based knobs are probabilities or factors.
_HISTORY_RANGES = (
    ("explore_floor", 0.0, 1.0, True),
    ("posterior_decay", 0.0, 1.0, False),
    ("greso_p_init", 0.0, 1.0, False),
    ("greso_p_step", 0.0, 1.0, True),
    ("greso_target_zero_variance", 0.0, 1.0, True),
    ("cures_temperature", 0.0, math.inf, False),
    ("bayes_skip_confidence", 0.0, 1.0, False),
    ("bayes_admit_confidence", 0.0, 1.0, False),
)
