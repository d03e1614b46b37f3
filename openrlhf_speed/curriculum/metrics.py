"""Per-batch curriculum metrics and the starvation messages built from them.

With pre-fetching, the groups a batch trains were partly generated before its window, and
some of the window's responses train later. So every per-step figure counts one named set,
and a share divides two counts of the same set (a test drives each strategy under prefetch
and checks that every share stays in [0, 1]):
- window: what happened between two training batches (two `pop_batch` calls that
  returned a batch): responses returned, prompts scored, decisions made;
- batch: the B groups trained at this step;
- settled: the batch's responses plus those discarded in the window (rejected visits,
  stale screenings). Each response is settled at exactly one step, or is still in flight,
  buffered, or dropped at the end of the run.

Metric keys (all floats, prefix `speed/`):
    screen_hist_{j/n:.2f}   window: prompts whose first request had k of m correct, n = the
                            strategy's screen size (N_init for `speed`, N for `dapo`); a first
                            request of another size m (cures, speed_bayes admissions) is binned
                            at j = round(k * n / m), so the keys stay the same n + 1
    prompts_screened        window: prompts whose first request (the whole group for dapo and
                            uniform) was scored; _qualified: of those, the ones that passed;
                            qualification_rate = qualified / screened. Both NaN for a strategy
                            that tests no band (uniform keeps every group: nothing qualifies)
    prompts_rejected / _skipped   window: visits rejected (at any stage) / skipped unscored
    prompts_consumed        groups trained so far (run total)
    tokens_screen / _continue / _full / _generated   window: tokens returned, by phase
    tokens_discarded        window: tokens of the responses discarded in it
    tokens_trained / _useful   batch: tokens of its groups / of those whose rewards are not all
                            equal (the only ones with nonzero group-baseline advantages)
    useful_token_share      settled: tokens_useful / (tokens_trained + tokens_discarded)
    useful_token_share_cum  run totals: useful tokens trained / all tokens generated (the
                            paper's measure; its denominator also holds tokens not yet settled,
                            so it reads at most the per-step shares' token-weighted mean)
    buffer_size, inflight_prompts   at the batch
    staleness_screen_mean / _max   batch: policy_version at train - version of screening samples
    staleness_screen_hist_{a}      batch: groups whose screening is a versions old
                                   (zero-filled for 0..max_staleness; see staleness.py)
    prompts_rescreened_stale       window: groups not trained because their screening was older
                                   than max_staleness; their prompts were screened again
    max_staleness                  the bound; these three only when a bound is set
    staleness_mean / _max          batch: same over all its samples
    accuracy                batch: mean reward of its groups (the paper's Fig. 4: ~0.5)
    reason/<reason>         window: decisions per reason (skips and admissions of the
                            history-based strategies too: reason/greso_skip_hard, ...)
    <strategy keys>         whatever the strategy's metrics() adds, e.g. greso_p_easy
    epoch, epoch_position   where the next prompt to start sits (ahead of the trained
                            groups by the prompts in flight and in the buffer)
    step                    0-based index of the batch
The paper reports only some of these; the rest are this project's observability.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Optional

import numpy as np

from .config import FLAGS, SpeedConfig


@dataclasses.dataclass
class Window:
    """Counters since the last training batch. hist maps (k_correct, n) -> prompts."""

    screened: int = 0
    qualified: int = 0
    rejected: int = 0
    skipped: int = 0
    stale_rescreened: int = 0
    tokens: dict = dataclasses.field(default_factory=lambda: collections.Counter())
    hist: dict = dataclasses.field(default_factory=lambda: collections.Counter())
    reasons: dict = dataclasses.field(default_factory=lambda: collections.Counter())

    def to_plain(self) -> dict:
        # Not dataclasses.asdict: it rebuilds a Counter from (key, value) pairs, which
        # counts the pairs instead of copying the counts.
        return {f.name: (dict(v) if isinstance(v, dict) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}

    @classmethod
    def from_plain(cls, d: dict) -> "Window":
        w = cls(screened=d["screened"], qualified=d["qualified"], rejected=d["rejected"],
                skipped=d["skipped"], stale_rescreened=d.get("stale_rescreened", 0))
        w.tokens.update(d["tokens"])
        w.hist.update(d["hist"])
        w.reasons.update(d["reasons"])
        return w


def histogram_text(hist: dict) -> str:
    """'0/4: 120, 1/4: 3, ...' in ascending pass rate."""
    items = sorted(hist.items(), key=lambda kv: (kv[0][0] / kv[0][1], kv[0][1]))
    return ", ".join(f"{k}/{n}: {c}" for (k, n), c in items) or "(nothing screened)"


def _band_text(cfg: SpeedConfig) -> str:
    return (
        f"A prompt qualifies when its screening pass rate is strictly inside "
        f"({FLAGS['pass_rate_low']}, {FLAGS['pass_rate_high']}) = "
        f"({cfg.pass_rate_low:g}, {cfg.pass_rate_high:g})"
    )


def starvation_warning(win: Window, cfg: SpeedConfig) -> Optional[str]:
    """A message when the window's qualification rate is below the warning threshold.
    Needs at least B screened prompts, so the first few scored prompts do not warn."""
    if win.screened < cfg.batch_prompts:
        return None
    rate = win.qualified / win.screened
    if rate >= cfg.warn_qualification_rate:
        return None
    return (
        f"SPEED starvation: {win.qualified} of {win.screened} prompts screened since the last "
        f"training batch qualified ({rate:.1%} < {FLAGS['warn_qualification_rate']} "
        f"{cfg.warn_qualification_rate:.1%}). Screening pass-rate histogram (correct/screened: "
        f"prompts): {histogram_text(win.hist)}. {_band_text(cfg)}. To qualify more prompts: "
        f"widen the band, raise {FLAGS['n_init']}, or use data closer to the model's level "
        f"(easier if most screenings are all wrong, harder if all correct)."
    )


def starvation_due(screened: int, batch_prompts: int) -> bool:
    """Whether a window that just reached `screened` screenings should be checked for
    starvation before any batch forms: at B, 2B, 4B, ... (doubling keeps a long
    starvation to a few lines while the first one comes after one batch's worth)."""
    if screened < batch_prompts or screened % batch_prompts:
        return False
    ratio = screened // batch_prompts
    return ratio & (ratio - 1) == 0


def starvation_error_message(win: Window, cfg: SpeedConfig, ready: int) -> str:
    return (
        f"SPEED starvation: {win.screened} prompts were screened since the last training "
        f"batch (limit {FLAGS['max_screened_per_batch']} = {cfg.max_screened_per_batch}) and "
        f"only {ready} of the {FLAGS['batch_prompts']} = {cfg.batch_prompts} groups of the next "
        f"batch are ready. Screening pass-rate histogram (correct/screened: prompts): "
        f"{histogram_text(win.hist)}. {_band_text(cfg)}. Fix: widen {FLAGS['pass_rate_low']}/"
        f"{FLAGS['pass_rate_high']}, raise {FLAGS['n_init']}, use data closer to the model's "
        f"level, or raise (or unset) {FLAGS['max_screened_per_batch']}."
    )


def useful_tokens(groups: list) -> int:
    """Tokens of groups whose rewards are not all equal (the only ones with nonzero
    group-baseline advantages)."""
    return sum(g.num_tokens for g in groups if np.ptp(g.rewards) > 0)


def _staleness(groups: list, version: int, screen_only: bool) -> np.ndarray:
    ages = [
        version - r.policy_version
        for g in groups
        for r in (g.responses[: g.n_screen] if screen_only else g.responses)
    ]
    return np.asarray(ages, dtype=np.float64)  # [samples]


def batch_metrics(win: Window, groups: list, cfg: SpeedConfig, *, screen_n: int,
                  reasons: tuple, totals: dict, policy_version: int, qualifies: bool = True) -> dict:
    """The `speed/*` metrics of one batch. totals: run totals after this batch
    (prompts_consumed, tokens_generated, tokens_useful); qualifies: whether the strategy
    tests a band (else the qualification figures are NaN)."""
    m = {}
    hist = collections.Counter()
    for k in range(screen_n + 1):  # zero-filled so logger keys are stable
        hist[f"speed/screen_hist_{k / screen_n:.2f}"] += 0
    for (k, n), c in win.hist.items():
        j = math.floor(k * screen_n / n + 0.5)  # k when n == screen_n
        hist[f"speed/screen_hist_{j / screen_n:.2f}"] += c
    m.update(hist)

    nan = float("nan")
    m["speed/prompts_screened"] = win.screened
    m["speed/prompts_qualified"] = win.qualified if qualifies else nan
    m["speed/prompts_rejected"] = win.rejected
    m["speed/prompts_skipped"] = win.skipped
    m["speed/qualification_rate"] = win.qualified / win.screened if qualifies and win.screened else nan
    m["speed/prompts_consumed"] = totals["prompts_consumed"]

    generated = sum(win.tokens.get(p, 0) for p in ("screen", "continue", "full"))
    for phase in ("screen", "continue", "full", "discarded"):
        m[f"speed/tokens_{phase}"] = win.tokens.get(phase, 0)
    m["speed/tokens_generated"] = generated
    trained = m["speed/tokens_trained"] = sum(g.num_tokens for g in groups)
    useful = m["speed/tokens_useful"] = useful_tokens(groups)
    settled = trained + win.tokens.get("discarded", 0)
    m["speed/useful_token_share"] = useful / settled if settled else nan
    gen_total = totals["tokens_generated"]
    m["speed/useful_token_share_cum"] = totals["tokens_useful"] / gen_total if gen_total else nan

    for name, screen_only in (("staleness_screen", True), ("staleness", False)):
        ages = _staleness(groups, policy_version, screen_only)
        m[f"speed/{name}_mean"] = float(ages.mean())
        m[f"speed/{name}_max"] = float(ages.max())
    m["speed/accuracy"] = float(np.mean([g.rewards.mean() for g in groups]))

    for r in reasons:
        m[f"speed/reason/{r}"] = 0
    for r, c in win.reasons.items():
        m[f"speed/reason/{r}"] = c
    return {k: float(v) for k, v in m.items()}
