"""Run several curriculum strategies on one simulated policy and tabulate what each spends.

Same prompts, pass rates (or drift), seeds and scheduler capacities for every strategy;
only `--speed.strategy` changes. Figures per strategy, all floats:

    steps, groups_trained              batches handed out, and B groups per batch
    tokens_total                       every generated token (screen + continue + full)
    tokens_screen / _continue / _full  by phase; tokens_discarded: of rejected visits
    tokens_per_group                   tokens_total / groups_trained
    useful_token_share                 tokens of trained groups with non-constant rewards /
                                       tokens_total (the paper's efficiency measure; the run's
                                       speed/useful_token_share_cum, metrics.py)
    zero_variance_share                trained groups whose rewards are all equal / all trained
    prompts_started, prompts_skipped   visits begun, visits skipped before any rollout

A simulation: it measures what each rule spends on a known pass-rate mix, not how well a
model would train. Not in the papers, which compare on real models only.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from .config import SpeedConfig
from .scheduler import Scheduler
from .simulate import SimulatedDriver, SimulatedPolicy

_SIM_KNOBS = ("rate_fn", "completions_per_tick", "min_tokens", "max_tokens", "max_steps")


def compare_strategies(strategies: list[str], pass_rates: Sequence[float], epochs: int,
                       batch_prompts: int, n: int, n_init: int, seed: int, **kw) -> dict[str, dict[str, float]]:
    """{strategy: figures} (see the module docstring) over `epochs` passes of the prompts.

    kw: SpeedConfig fields (max_inflight_prompts, pass_rate_low, explore_floor, ...) and
    simulation knobs: rate_fn(prompt, epoch, version) -> p for drifting pass rates,
    completions_per_tick (None: all outstanding per tick), min_tokens / max_tokens,
    max_steps (stop after that many batches: equal trained groups for every strategy).
    Starvation warnings are off unless warn_qualification_rate is given.
    """
    sim = {k: kw.pop(k) for k in _SIM_KNOBS if k in kw}
    fields = {f.name for f in dataclasses.fields(SpeedConfig)}
    unknown = sorted(set(kw) - fields)
    if unknown:
        raise TypeError(f"compare_strategies: unknown keyword(s) {unknown}; "
                        f"expected SpeedConfig fields or {_SIM_KNOBS}")
    kw.setdefault("warn_qualification_rate", 0.0)
    out = {}
    for name in strategies:
        cfg = SpeedConfig(strategy=name, n_samples_per_prompt=n, n_init=n_init, batch_prompts=batch_prompts,
                          num_epochs=epochs, seed=seed, **kw)
        sched = Scheduler(len(pass_rates), cfg)
        policy = SimulatedPolicy(pass_rates, seed=seed, min_tokens=sim.get("min_tokens", 16),
                                 max_tokens=sim.get("max_tokens", 256), rate_fn=sim.get("rate_fn"))
        driver = SimulatedDriver(sched, policy, sim.get("completions_per_tick"))
        batches = driver.run(max_steps=sim.get("max_steps"))
        out[name] = _figures(sched.totals(), [g for b in batches for g in b.groups])
    return out


def _figures(t: dict, groups: list) -> dict[str, float]:
    total = t.get("tokens_generated", 0.0)
    trained = len(groups)
    zero_variance = sum(1 for g in groups if np.ptp(g.rewards) == 0)
    return {
        "steps": t["steps"],
        "groups_trained": float(trained),
        "tokens_total": total,
        "tokens_screen": t.get("tokens_screen", 0.0),
        "tokens_continue": t.get("tokens_continue", 0.0),
        "tokens_full": t.get("tokens_full", 0.0),
        "tokens_discarded": t.get("tokens_discarded", 0.0),
        "tokens_per_group": total / trained if trained else float("nan"),
        "useful_token_share": t.get("tokens_useful", 0.0) / total if total else float("nan"),
        "zero_variance_share": zero_variance / trained if trained else float("nan"),
        "prompts_started": t.get("prompts_started", 0.0),
        "prompts_skipped": t.get("prompts_skipped", 0.0),
    }
