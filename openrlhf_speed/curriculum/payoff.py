"""Whether SPEED pays, predicted from a screening: the mechanism per training step of each
curriculum, the break-even against a baseline, SPEED's step saving and speedup over alpha's
calibrated interval (ALPHA), and a one-line verdict (`openrlhf-speed advise`; docs/advise.md).

Inputs: each screened prompt's pass-rate posterior (posterior.py) and its mean response length
in tokens, measured on the same screening. Per step of B groups of N, in steady state:
- uniform (= stock OpenRLHF, `off`): B prompts, all N generated and trained; a group whose N
  rewards are all equal carries no gradient (the zero-variance share);
- dapo: all N generated for B / q_N prompts, where q_N is the chance a group passes the band,
  the others discarded;
- speed: N_init screening responses for B / q prompts (q: the chance a screening passes the
  band), N - N_init more for the B that qualify. A qualified screening is mixed, so every
  trained group is informative; discarded tokens are the failed screenings.
Costs are in trained-token units: a step costs trained + r x generated tokens, where r is the
inference-to-training cost ratio of stock OpenRLHF's step (it generates what it trains, so its
generation costs r x its training: the paper's Fig. 2 puts r at 2). It is the bench's GPU
projection (bench/aggregate.cost_ratio) applied to predicted tokens.

The rule not to break: every figure is an expectation over the posteriors (posterior.py), and
every assumption the verdict rests on is listed in ASSUMPTIONS, which the command prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import posterior

ASSUMPTIONS = (
    "the prediction is for the policy screened: as training goes on prompts saturate and the "
    "figures move (screen a checkpoint to follow them)",
    "steady state: every prompt is screened once and SPEED's buffer keeps every qualified prompt "
    "(no start-up, staleness or end-of-epoch effects)",
    "a response costs its tokens: generating one costs r times what training on it costs, r "
    "measured on stock OpenRLHF's step (generation r : 1 training); batching, overlap and "
    "engine efficiency are not modelled",
    "steps to a target fall as the informative-group ratio rho to the power alpha, with alpha "
    "fitted on the regime map's published cells at the measured batch nearest this run's (ALPHA, with "
    "its 95% interval; 1 would be linear, as below the critical batch size, 0 no saving at all, as far "
    "above it); the cells are one small model, and a larger model's critical batch is its own",
    "response lengths and pass rates are those of the screening, sampled with the training "
    "settings (temperature, top_p, max_new_tokens, chat template)",
)

CURRICULA = ("uniform", "dapo", "speed")
# alpha in (SPEED's steps / the baseline's) = rho^-alpha, fitted by `openrlhf-speed regime-map` on
# the published cells of each batch B (benchmarks/regime/regime.json, "alpha_by_batch";
# tests/bench/test_regime.py holds the two equal). Not one alpha: it rises as the batch falls
# towards the critical size, as large-batch training predicts, and the cells at B = 16 and B = 4
# disagree beyond their intervals (docs/benchmarks.md, "The regime map").
ALPHA = {
    16: {"point": 0.35, "low": 0.29, "high": 0.40,
         "cells": ("v4", "v4-avx2", "v5", "v5-avx512-amx", "high-avx512-amx")},
    4: {"point": 0.46, "low": 0.40, "high": 0.52, "cells": ("high-b4", "high-b4-avx512-amx")},
}


def alpha_for(batch: int, fits: dict = ALPHA) -> dict:
    """The alpha fit of the measured batch nearest `batch` on a log scale, with that 'batch';
    between two, the larger batch's (its smaller alpha: the cautious side)."""
    if not fits:
        raise ValueError("no alpha fit: the regime map has no cell")
    b = min(fits, key=lambda k: (abs(math.log(max(batch, 1) / k)), -k))
    return {**fits[b], "batch": b}


BASELINE_NAMES = {"off": "stock OpenRLHF", "uniform": "uniform RLOO", "dapo": "DAPO"}


@dataclass(frozen=True)
class Settings:
    """The training flags the prediction depends on (their names in cli/advise.py)."""

    n: int  # --rollout.n_samples_per_prompt
    n_init: int  # --speed.n_init
    low: float  # --speed.pass_rate_low
    high: float  # --speed.pass_rate_high
    batch: int  # --rollout.batch_size (B)
    gen_batch: int  # --speed.max_inflight_prompts (SPEED's generation batch)
    cost_ratio: float = 2.0  # r: stock OpenRLHF's generation time / training time a step
    baseline: str = "off"  # off, uniform or dapo

    def validate(self) -> "Settings":
        if not 1 <= self.n_init < self.n:
            raise ValueError(f"need 1 <= --speed.n_init ({self.n_init}) < --rollout.n_samples_per_prompt ({self.n})")
        if not self.cost_ratio > 0 or math.isinf(self.cost_ratio):
            raise ValueError(f"the cost ratio ({self.cost_ratio}) must be a positive number")
        if self.baseline not in BASELINE_NAMES:
            raise ValueError(f"baseline {self.baseline!r} is not one of: {', '.join(BASELINE_NAMES)}")
        return self


def _tokens(screen=0.0, cont=0.0, full=0.0, discarded=0.0, trained=0.0) -> dict:
    generated = screen + cont + full
    return {"screen": screen, "continue": cont, "full": full, "discarded": discarded,
            "generated": generated, "trained": trained,
            "discarded_share": discarded / generated if generated else float("nan")}


def _weighted(values: np.ndarray, weights: np.ndarray) -> float:
    total = weights.sum()
    return float((values * weights).sum() / total) if total > 0 else float("nan")


def predict(post: posterior.Posteriors, lengths, s: Settings) -> dict:
    """{curriculum: per-step figures} for uniform, dapo and speed (see the module docstring).
    lengths: mean response tokens of each screened prompt [P]."""
    lengths = np.asarray(lengths, dtype=float)  # [P]
    B, N = s.batch, s.n
    mean_len = float(lengths.mean())
    zero = post.prob_zero_variance(N)  # [P]
    pq = post.mean_pq()  # [P]
    out = {"uniform": {
        "prompts_screened": float(B), "qualification_rate": 1.0, "screenings_per_qualified": 1.0,
        "tokens": _tokens(full=B * N * mean_len, trained=B * N * mean_len),
        "informative_groups": B * (1.0 - float(zero.mean())),
        "zero_variance_share": float(zero.mean()),
        "zero_variance_token_share": _weighted(zero, lengths),
        "mean_pq": float(pq.mean()), "generation_rounds": 1.0,
    }}
    # A group or screening that passes a band inside [0, 1] has both rewards in it, so the
    # filtering curricula train informative groups only.
    for name, size in (("dapo", N), ("speed", s.n_init)):
        q_i = post.prob_in_band(size, s.low, s.high)  # [P]
        q = float(q_i.mean())
        screened = B / q if q > 0 else math.inf
        kept_len = _weighted(lengths, q_i)  # mean length of the prompts that pass
        trained = B * N * kept_len
        lost = screened * size * float(((1.0 - q_i) * lengths).mean())  # failed screenings (dapo: groups)
        if name == "dapo":
            tokens = _tokens(full=screened * N * mean_len, discarded=lost, trained=trained)
        else:
            tokens = _tokens(screen=screened * s.n_init * mean_len, cont=B * (N - s.n_init) * kept_len,
                             discarded=lost, trained=trained)
        out[name] = {
            "prompts_screened": screened, "qualification_rate": q, "screenings_per_qualified": 1.0 / q if q else math.inf,
            "tokens": tokens, "informative_groups": float(B), "zero_variance_share": 0.0,
            "zero_variance_token_share": 0.0,
            "mean_pq": float(post.pq_in_band(size, s.low, s.high).sum() / q_i.sum()) if q else float("nan"),
            "generation_rounds": screened / s.gen_batch,
        }
    return out


def step_cost(figures: dict, cost_ratio: float) -> float:
    """A step's cost in trained-token units: trained + r x generated."""
    t = figures["tokens"]
    return t["trained"] + cost_ratio * t["generated"]


def compare(pred: dict, s: Settings, alpha: dict = None) -> dict:
    """SPEED against the baseline: its step cost, the break-even step share, and its step
    saving and speedup at alpha's point and interval ends (SPEED's steps = the baseline's x
    rho^-alpha, rho the informative-group ratio). alpha: the calibrated fit nearest the
    settings' batch (alpha_for) unless given."""
    alpha = alpha_for(s.batch) if alpha is None else alpha
    base = pred["uniform" if s.baseline == "off" else s.baseline]
    speed = pred["speed"]
    cost = step_cost(speed, s.cost_ratio) / step_cost(base, s.cost_ratio)
    ratio = speed["informative_groups"] / base["informative_groups"] if base["informative_groups"] else math.inf
    ends = ("low", "point", "high")
    share = {k: ratio ** -alpha[k] for k in ends}  # SPEED's steps / the baseline's
    return {
        "baseline": s.baseline, "cost_ratio": s.cost_ratio, "step_cost": cost, "break_even": 1.0 / cost,
        "generated_tokens_ratio": speed["tokens"]["generated"] / base["tokens"]["generated"],
        "trained_tokens_ratio": speed["tokens"]["trained"] / base["tokens"]["trained"],
        "informative_ratio": ratio, "alpha": {k: alpha[k] for k in ends},
        "alpha_from": {k: alpha[k] for k in ("batch", "cells") if k in alpha}, "step_share": share,
        "step_saving": {k: 1.0 - share[k] for k in ends},
        "speedup": {k: 1.0 / (share[k] * cost) for k in ends},
    }


def _range(low: float, high: float, fmt: str = ".2f", suffix: str = "x") -> str:
    if f"{low:{fmt}}" == f"{high:{fmt}}":
        return f"{low:{fmt}}{suffix}"
    return f"{low:{fmt}}-{high:{fmt}}{suffix}"


def _measured_at(cmp: dict) -> str:
    b = (cmp.get("alpha_from") or {}).get("batch")
    return "" if b is None else f"measured at B = {b}; "


def verdict(pred: dict, cmp: dict, s: Settings) -> dict:
    """{"pays": "likely" | "unlikely" | "even", "line": one line with the reason}: likely when
    the whole speedup range (alpha's interval) is at or above 1, unlikely when below, even
    when it straddles 1."""
    name = BASELINE_NAMES[s.baseline]
    lo, hi, be = cmp["speedup"]["low"], cmp["speedup"]["high"], cmp["break_even"]
    base = pred["uniform" if s.baseline == "off" else s.baseline]
    speed = pred["speed"]
    head = f"{_range(lo, hi)} over {name} (break-even: {be:.2f}x of its steps)"
    costs = (f"a SPEED step costs {cmp['step_cost']:.2f}x {name}'s ({cmp['generated_tokens_ratio']:.2f}x the "
             f"generated tokens, {speed['tokens']['discarded_share']:.0%} of them discarded screenings, at "
             f"{s.cost_ratio:.3g}:1 inference to training)")
    zero = base["zero_variance_share"]
    sv, a = cmp["step_saving"], cmp["alpha"]
    if s.baseline == "dapo":
        why = (f"both train only informative groups; SPEED screens with N_init {s.n_init} where DAPO generates "
               f"all {s.n}: {costs}")
    elif lo >= 1.0:
        why = (f"{zero:.0%} of {name}'s groups carry no gradient at N {s.n} and {speed['qualification_rate']:.0%} "
               f"of screened prompts qualify; {costs}")
    else:
        why = (f"SPEED must save {1 - be:.0%} of the steps to pay; {zero:.0%} of {name}'s groups carry no gradient "
               f"at N {s.n}, and at the calibrated alpha {a['low']:.2f}-{a['high']:.2f} ({_measured_at(cmp)}"
               f"docs/advise.md) that saves "
               f"{_range(sv['low'], sv['high'], '.0%', '')}: {costs}")
    if lo >= 1.0:
        return {"pays": "likely", "line": f"SPEED likely pays: {head}; {why}"}
    if hi < 1.0:
        return {"pays": "unlikely", "line": f"SPEED unlikely to pay here: {head}; {why}"}
    return {"pays": "even", "line": f"SPEED about even here: {head}; {why}"}


TRAINING_TIMINGS = ("timing/make_experience", "timing/ppo_train", "timing/broadcast")


def step_totals(steps: list) -> dict:
    """Seconds and tokens over a run's step records (metrics.jsonl, event "step"): generation,
    training and their tokens. Training is everything a step does but generate: experience
    making (the forward passes over what is trained), the update and the weight sync. The one
    definition behind both the bench's GPU projection (bench/evidence.cost_model) and
    `advise --from_run`."""
    def total(key):
        return sum(float(st.get(key) or 0.0) for st in steps if not is_nan(st.get(key)))

    return {"steps": len(steps), "generation_s": total("timing/generation"),
            "training_s": sum(total(k) for k in TRAINING_TIMINGS),
            "tokens_generated": total("speed/tokens_generated"), "tokens_trained": total("speed/tokens_trained")}


def cost_ratio_from_steps(steps: list) -> dict:
    """r from a run's step records: seconds per generated token over seconds per trained token
    (step_totals), so a run that generates more than it trains (SPEED, DAPO) still prices stock
    OpenRLHF's step; seconds alone when no tokens were logged."""
    t = step_totals(steps)
    gen_s, train_s = t["generation_s"], t["training_s"]
    if not steps or gen_s <= 0 or train_s <= 0:
        raise ValueError(f"{len(steps)} step records with generation {gen_s:.1f} s and training {train_s:.1f} s: "
                         "need a training run's timings (not --train.generation_only)")
    gen_tok, train_tok = t["tokens_generated"], t["tokens_trained"]
    per_token = gen_tok > 0 and train_tok > 0
    ratio = (gen_s / gen_tok) / (train_s / train_tok) if per_token else gen_s / train_s
    return {"ratio": ratio, "steps": len(steps), "generation_s_per_step": gen_s / len(steps),
            "training_s_per_step": train_s / len(steps), "priced": "per token" if per_token else "per step",
            "driver_run": any("speed/prompts_screened" in st for st in steps)}


def is_nan(v) -> bool:
    """A float NaN (metrics log NaN for figures a step has none of); the bench's test too."""
    return isinstance(v, float) and math.isnan(v)
