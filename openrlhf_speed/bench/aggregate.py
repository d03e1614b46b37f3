"""Several runs per curriculum (`--runs R`, seeds `--seed`, `--seed+1`, ...) folded into one
row each, and the target rule fixed before the runs (`--target_rule uniform_gain:F`).

Why aggregate at all: on a small model one run's time to target moves with its seed by as
much as the curricula differ, so a speedup from one seed each can be luck. The row of a
curriculum is the mean of its runs' figures with the spread (min, max) of the two that
decide the benchmark (time to target, final accuracy), and how many runs reached the
target: a mean over the runs that reached it would hide the ones that did not, so the
mean time is only given when every run reached it ("1/2 reached" otherwise).

Standard errors of a mean over R runs of different seeds combine as independent
estimates: sqrt(sum se^2) / R. The step-0 evaluations of all runs measure one start model
(their samples differ: vLLM's async engine batches by arrival, so one seed does not fix the
draws); the target rule still counts the start's error over the R seeds only, not over
every run: the conservative choice.

Pure functions of run summaries (report.run_summary), so they are tested without training.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Optional

from openrlhf_speed.curriculum.payoff import is_nan  # noqa: F401 (one NaN test; callers read agg.is_nan)

RULE_KINDS = ("uniform_gain", "off_final")
# The curriculum whose runs each rule measures: a benchmark with the rule must run it.
RULE_BASE = {"uniform_gain": "uniform", "off_final": "off"}


def run_key(curriculum: str, index: int, runs: int) -> str:
    """The folder (and report key) of run `index` (from 1) of a curriculum: the bare name
    when there is one run per curriculum, so single-run folders stay as they were."""
    return curriculum if runs == 1 else f"{curriculum}-r{index}"


def run_plan(curricula: list, runs: int, seed: int) -> list:
    """Every run in order, with its key and seed: run i of every curriculum gets seed + i - 1,
    so curricula are compared seed for seed. Seed by seed (every curriculum's run 1, then
    every run 2): a benchmark stopped part-way still compares all curricula on equal seeds."""
    return [{"key": run_key(name, i, runs), "curriculum": name, "run": i, "runs": runs, "seed": seed + i - 1}
            for i in range(1, runs + 1) for name in curricula]


def parse_target_rule(text: str) -> tuple[str, float]:
    """('uniform_gain', F) from 'uniform_gain:F', ('off_final', 1.0) from 'off_final'; a
    ValueError that names the flag otherwise."""
    if (text or "").strip() == "off_final":
        return "off_final", 1.0
    kind, sep, value = (text or "").partition(":")
    try:
        fraction = float(value)
    except ValueError:
        fraction = float("nan")
    if kind != "uniform_gain" or not sep or not 0.0 < fraction <= 1.0:
        raise ValueError(f"--target_rule {text!r} is not understood: use uniform_gain:F with F in (0, 1], e.g. "
                         "uniform_gain:0.75 (target = step-0 accuracy + F x the uniform runs' gain), or off_final "
                         "(target = stock OpenRLHF's final accuracy: the mean over the off runs of their last two "
                         "evaluations)")
    return kind, fraction


def sum_key(records: list, key: str) -> float:
    """records' values of key summed, a missing or NaN value counting 0."""
    return float(sum(r.get(key, 0.0) for r in records if not is_nan(r.get(key, 0.0))))


def _mean(values: list):
    """Mean; an int when every value is the same int (a step count stays a count)."""
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values) and len(set(values)) == 1:
        return values[0]
    return float(sum(values)) / len(values) if values else float("nan")


def _se_of_mean(ses: list) -> float:
    return math.sqrt(sum(se * se for se in ses)) / len(ses) if ses else float("nan")


def aggregate(summaries: list) -> dict:
    """One curriculum's row from its runs' summaries: means (per part for dicts such as the
    step profile), standard errors of the means, and the spread and count of the target."""
    n = len(summaries)
    out = {}
    for key, first in summaries[0].items():
        values = [s[key] for s in summaries]
        if key in ("time_to_target_s", "steps_to_target"):
            continue
        if isinstance(first, dict):
            out[key] = {part: _mean([v[part] for v in values]) for part in first}
        elif key.endswith("_se"):
            out[key] = _se_of_mean(values)
        elif all(isinstance(v, (int, float)) for v in values):
            out[key] = _mean(values)
    times = [s["time_to_target_s"] for s in summaries if s["time_to_target_s"] is not None]
    steps = [s["steps_to_target"] for s in summaries if s["steps_to_target"] is not None]
    everyone = len(times) == n
    out.update(
        runs=n,
        reached=len(times),
        # The mean only when every run reached the target: see the module docstring.
        time_to_target_s=_mean(times) if everyone and times else None,
        steps_to_target=_mean(steps) if everyone and steps else None,
        time_to_target_min=min(times) if times else None,
        time_to_target_max=max(times) if times else None,
        final_accuracy_min=min(s["final_accuracy"] for s in summaries),
        final_accuracy_max=max(s["final_accuracy"] for s in summaries),
    )
    return out


def group(run_summaries: dict, groups: dict) -> dict:
    """{curriculum: aggregate of its runs}, curricula in the order of their first run."""
    members = {}
    for key, summary in run_summaries.items():
        members.setdefault(groups.get(key, key), []).append(summary)
    return {name: aggregate(rows) for name, rows in members.items()}


# What SPEED's clock is compared with, in report order: `off` (stock OpenRLHF) first.
BASELINES = ("off", "uniform", "dapo")


def same_driver(ours: str, baselines=BASELINES) -> list:
    """The baselines `ours` is measured over: each, and where ours runs paced (speed+pace2) each
    paced the same way too (dapo+pace2). A pace is the driver's, not the curriculum's: the screen's
    own worth is its ratio at equal pacing, and over the unpaced baseline it counts the pace too."""
    from openrlhf_speed.bench.commands import curriculum_tails

    pace = curriculum_tails(ours)[2]
    return list(baselines) + ([f"{b}+pace{pace}" for b in baselines] if pace else [])


def speedups(summary: dict, ours: str = "speed", baselines=BASELINES) -> tuple[dict, dict]:
    """({'ours_over_b': mean time of b / mean time of ours or None}, {same key: why None}).
    A speedup needs every run of both curricula to have reached the target. `off` (stock
    OpenRLHF) comes first: it is what a user would run instead."""
    out, why = {}, {}
    if ours not in summary:
        return out, why
    for b in baselines:
        if b not in summary:
            continue
        key = f"{ours}_over_{b}"
        t_b, t_ours = summary[b]["time_to_target_s"], summary[ours]["time_to_target_s"]
        out[key] = (t_b / t_ours) if (t_b and t_ours) else None
        if out[key] is None:
            missed = [f"{c} {summary[c]['reached']}/{summary[c]['runs']} runs reached the target" for c in (b, ours)
                      if summary[c]["reached"] < summary[c]["runs"]]
            why[key] = "; ".join(missed) if missed else "a curriculum reached the target at step 0, in 0 s"
    return out, why


def uniform_gain_target(run_summaries: dict, groups: dict, fraction: float, baseline: str = "uniform") -> dict:
    """The rule's arithmetic: target = mean step-0 accuracy over all runs + fraction x (mean
    final accuracy of the baseline's runs - that start). 'note' says why the target is no
    evidence (None when it is); 'target' is None when the rule cannot be applied."""
    rule = f"{RULE_KINDS[0]}:{fraction:g}"
    base = [s for k, s in run_summaries.items() if groups.get(k, k) == baseline]
    info = {"rule": rule, "fraction": fraction, "target": None, "note": None}
    if not base:
        info["note"] = f"the target rule {rule} needs {baseline} runs: add {baseline} to --curricula"
        return info
    starts = [s["start_accuracy"] for s in run_summaries.values()]
    finals = [s["final_accuracy"] for s in base]
    if any(is_nan(x) for x in starts + finals):
        info["note"] = (f"the target rule {rule} needs a step-0 and a final evaluation of every run; some run has "
                        "none (was --eval.at_start turned off, or did a run stop early?)")
        return info
    seeds = max(Counter(groups.get(k, k) for k in run_summaries).values())  # runs per curriculum
    start_ses = [s["start_accuracy_se"] for s in run_summaries.values()]
    start = sum(starts) / len(starts)
    start_se = math.sqrt(sum(se * se for se in start_ses) / len(start_ses) / seeds)
    final = sum(finals) / len(finals)
    final_se = _se_of_mean([s["final_accuracy_se"] for s in base])
    gain, gain_se = final - start, math.hypot(start_se, final_se)
    info.update(start=start, start_se=start_se, baseline_final=final, baseline_final_se=final_se, gain=gain,
                gain_se=gain_se, target=start + fraction * gain)
    if gain <= 0:
        info["note"] = (f"the {baseline} runs did not improve (mean final accuracy {final:.4f} vs step-0 {start:.4f}): "
                        f"the rule's target {info['target']:.4f} is not above the start, so times to target and "
                        "speedups are not evidence; train longer (--steps) or with a larger --lr")
    elif not is_nan(gain_se) and gain <= 2 * gain_se:
        info["note"] = (f"the {baseline} runs' gain {gain:.4f} is within two standard errors ({2 * gain_se:.3f}) of "
                        f"the step-0 accuracy ({start:.4f}): the rule's target can be reached by evaluation noise, so "
                        "times to target and speedups are not evidence; evaluate on more prompts (--eval_prompts, "
                        "--eval_k), run more seeds (--runs) or train longer (--steps)")
    return info


def rule_line(info: Optional[dict]) -> str:
    """How the rule's target was computed, for the report's first line."""
    if not info or info.get("target") is None:
        return ""
    if info["rule"] == "off_final":
        return (f"rule off_final: stock OpenRLHF's final accuracy {info['baseline_final']:.4f} (mean over the off runs "
                f"of their last two evaluations; step-0 {info['start']:.4f})")
    return (f"rule {info['rule']}: step-0 {info['start']:.4f} + {info['fraction']:g} x uniform gain "
            f"{info['gain']:.4f} (final {info['baseline_final']:.4f})")


# --- time to target between evaluations, speedup intervals, the GPU projection ---------------
#
# Interpolation: the grid figure (the clock at the first evaluation at or above the target)
# is an upper bound by up to one evaluation period; a straight line between that evaluation
# and the one before reads the clock where the line crosses the target. Both are reported.
#
# Bootstrap: each curriculum's runs are resampled with replacement (B_REPS times, a fixed RNG
# seed so a report is reproducible); the ratio of the resampled means of the baseline's and
# ours times gives the 2.5% and 97.5% percentiles. An interval holding 1 is "not resolved".
#
# Projection (labelled as such everywhere): a run's cost = c_train x (trained tokens +
# ratio x generated tokens), ratio fixed so that stock OpenRLHF's generation costs 2x its training
# per step (the paper's Fig. 2, right, where inference dominates on GPUs), c_train = its measured
# training seconds per trained token (evidence.cost_model: `off`'s runs, else uniform's). It prices the tokens each run really spent; it
# does not model batching, overlap or engine efficiency.

B_REPS = 2000
B_SEED = 20250611
GEN_OVER_TRAIN = 2.0  # stock OpenRLHF's inference time / its training time per step (paper Fig. 2, right)


def interpolate_to_target(evals: list, target: float) -> tuple:
    """(clock, step) where the accuracy line between consecutive evaluations first reaches the
    target; (None, None) when no evaluation does. At step 0 (or a first evaluation already at
    the target) that evaluation's own clock and step."""
    prev = None
    for e in sorted(evals, key=lambda e: e["step"]):
        acc = e["eval_accuracy"]
        if acc >= target:
            if prev is None or acc == prev["eval_accuracy"]:
                return float(e["train_wall_s"]), float(e["step"])
            f = (target - prev["eval_accuracy"]) / (acc - prev["eval_accuracy"])
            return (prev["train_wall_s"] + f * (e["train_wall_s"] - prev["train_wall_s"]),
                    prev["step"] + f * (e["step"] - prev["step"]))
        prev = e
    return None, None


def whole_clock(evals: list) -> Optional[float]:
    """A run's whole measured clock as its evaluations read it (the last one's), the time a run
    that never reached a target is priced at; None without evaluations."""
    return max((e["train_wall_s"] for e in evals), default=None)


def percentile(sorted_values: list, q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of an ascending list, q in [0, 1]."""
    pos = q * (len(sorted_values) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def bootstrap_ratio(baseline: list, ours: list, reps: int = B_REPS, seed: int = B_SEED,
                    level: float = 0.95) -> Optional[tuple]:
    """(point, low, high): mean(baseline) / mean(ours) and its percentile-bootstrap interval,
    resampling each curriculum's runs with replacement; None when a run did not reach the
    target (None in a list) or either list is empty or a mean is 0."""
    import random

    if not baseline or not ours or any(x is None for x in baseline + ours):
        return None
    if min(ours) <= 0 or sum(baseline) <= 0:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(reps):
        b = [rng.choice(baseline) for _ in baseline]
        o = [rng.choice(ours) for _ in ours]
        ratios.append((sum(b) / len(b)) / (sum(o) / len(o)))
    ratios.sort()
    tail = (1.0 - level) / 2
    point = (sum(baseline) / len(baseline)) / (sum(ours) / len(ours))
    return point, percentile(ratios, tail), percentile(ratios, 1.0 - tail)


def resolution(interval: Optional[tuple]) -> str:
    """'faster' / 'slower' when the interval (point, low, high) excludes 1, 'not resolved' when
    it holds 1, 'not measured' without an interval."""
    if interval is None:
        return "not measured"
    _, low, high = interval
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "not resolved"


def censored_ratio(base: list, ours: list) -> dict:
    """The interval cell of one speedup, baseline time / ours, from per-run times to a target
    (None = no clock; a run that never reached it carries its whole clock as ('censored',
    clock)). Censored baseline runs make the ratio a floor ('at_least'); censored runs of ours
    make it a ceiling ('at_most'): their real times are later than their clocks. Censored runs
    on both sides: no ratio. The one rule for every speedup the reports print (levels,
    evidence, regime), so a summary and the map never disagree about a run under the target."""
    if not base or not ours:
        return {"verdict": "not measured (no runs)"}
    if any(t is None or (isinstance(t, tuple) and t[1] is None) for t in base + ours):
        return {"verdict": "not measured (a run has no clock)"}
    censored = [t for t in base if isinstance(t, tuple)]
    short = [t for t in ours if isinstance(t, tuple)]
    if censored and short:
        return {"verdict": "not measured (a run of ours and a baseline run did not reach the target)"}
    ci = bootstrap_ratio([t[1] if isinstance(t, tuple) else t for t in base],
                         [t[1] if isinstance(t, tuple) else t for t in ours])
    if ci is None:
        return {"verdict": "not measured (a time of 0 s)"}
    cell = {"point": ci[0], "low": ci[1], "high": ci[2]}
    if short:
        # Only "slower" survives a ceiling: an interval above 1 says nothing about the real ratio.
        lead = "slower" if ci[2] < 1.0 else "not resolved"
        if min(len(base), len(ours)) < 2:
            return {"point": ci[0], "at_most": True, "verdict": f"{lead}, a ceiling (one run of a curriculum)"}
        return {**cell, "at_most": True,
                "verdict": f"{lead}, a ceiling ({len(short)}/{len(ours)} runs of ours did not reach it)"}
    if min(len(base), len(ours)) < 2:
        return {"point": ci[0], "verdict": "not resolved (one run of a curriculum)"}
    if censored:
        # The censored runs' real times are later than their clocks, so every figure is a floor.
        cell["at_least"] = True
        lead = "faster" if ci[1] > 1.0 else "not resolved"
        cell["verdict"] = f"{lead}, a floor ({len(censored)}/{len(base)} baseline runs did not reach it)"
        return cell
    cell["verdict"] = resolution(ci)
    return cell


def bound(ci: Optional[dict]) -> str:
    """'>=' before a floor's figures, '<=' before a ceiling's, '' before a measured one's."""
    return ">=" if (ci or {}).get("at_least") else "<=" if (ci or {}).get("at_most") else ""


def cost_ratio(gen_tokens_per_step: float, train_tokens_per_step: float,
               gen_over_train: float = GEN_OVER_TRAIN) -> float:
    """Cost of a generated token / cost of a trained token such that the anchor curriculum's
    generation per step costs gen_over_train x its training per step."""
    return gen_over_train * train_tokens_per_step / gen_tokens_per_step


def projected_clock(steps: list, ratio: float, s_per_train_token: float) -> list:
    """Cumulative projected seconds after each step [0, c1, c2, ...] (index = step), pricing the
    step's tokens: s_per_train_token x (trained + ratio x generated)."""
    out, total = [0.0], 0.0
    for st in steps:
        total += s_per_train_token * (num(st, "speed/tokens_trained") + ratio * num(st, "speed/tokens_generated"))
        out.append(total)
    return out


def clock_at_step(clock: list, step: Optional[float]) -> Optional[float]:
    """The cumulative clock at a fractional step, linear between steps; None for None."""
    if step is None:
        return None
    if step >= len(clock) - 1:
        return clock[-1]
    lo = int(math.floor(step))
    return clock[lo] + (step - lo) * (clock[lo + 1] - clock[lo])


def num(record: dict, key: str) -> float:
    v = record.get(key, 0.0)
    return 0.0 if v is None or is_nan(v) else float(v)


def useful_tokens(step: dict):
    """The tokens of a step's trained groups whose rewards are not all equal, or None when the
    step does not say. Step logs without `speed/tokens_useful` give them through their share,
    then useful / tokens generated in the window, NaN when the window generated nothing (its
    trained tokens must not count as zero-variance: that read DAPO, which trains no such
    group, as 0.33 zero-variance)."""
    if step.get("speed/tokens_useful") is not None:
        return num(step, "speed/tokens_useful")
    share = step.get("speed/useful_token_share")
    return None if share is None or is_nan(share) else share * num(step, "speed/tokens_generated")


def _share_of_screened(steps: list, count) -> float:
    """sum(count(step)) / prompts screened over the steps that count qualification (NaN for a
    curriculum that tests no band: uniform logs NaN, `off` logs nothing)."""
    counted = [s for s in steps if s.get("speed/prompts_qualified") is not None
               and not is_nan(s["speed/prompts_qualified"])]
    screened = sum(num(s, "speed/prompts_screened") for s in counted)
    return sum(count(s) for s in counted) / screened if screened else float("nan")


def qualification_rate(steps: list) -> float:
    """Prompts qualified / prompts screened (_share_of_screened)."""
    return _share_of_screened(steps, lambda s: num(s, "speed/prompts_qualified"))


def rejected_solved_share(steps: list) -> float:
    """Share of the screened prompts turned away as solved (every screening response right, or
    above the band): where this rises through a run, the policy is learning prompts out of a
    few-sample screen's band while a full group of N of them would still be mixed (DAPO's
    qualification stays flat on the same mix)."""
    return _share_of_screened(steps, lambda s: sum(num(s, k) for k in s if k.startswith("speed/reason/")
                                                   and k.endswith(("_all_correct", "_too_easy"))))


QUARTERS = 4


def by_quarter(steps: list, share) -> list:
    """share(steps) over each quarter of a run's steps in order (NaN for an empty one): a run's
    mean hides a drift that a screening at step 0 cannot see and `advise` therefore cannot price."""
    n = len(steps)
    return [share(steps[i * n // QUARTERS:(i + 1) * n // QUARTERS]) for i in range(QUARTERS)]


def _per_step_counts(steps: list) -> dict:
    """Prompts qualified a step, and prompts whose responses waited past the staleness bound
    and were discarded: a curriculum whose generation batch outruns its training batch (DAPO
    at a high qualification rate) pays those tokens without any rejection. NaN where the run
    does not log the count (`off`; uniform's qualification; no staleness bound)."""
    out = {}
    for name, key in (("prompts_qualified_per_step", "speed/prompts_qualified"),
                      ("prompts_stale_per_step", "speed/prompts_rescreened_stale")):
        logged = any(s.get(key) is not None and not is_nan(s[key]) for s in steps)
        out[name] = sum_key(steps, key) / len(steps) if logged else float("nan")
    return out


def mechanism(steps: list) -> dict:
    """A run's mechanism columns from its step records: tokens per step by phase, qualification
    rate (over the run and by quarter, with the share turned away as solved), share of trained
    tokens in groups with zero reward variance (uniform's wasted groups), mean gradient norm,
    mean reward of trained groups (Fig. 4) and generation tokens per second."""
    n = len(steps)
    if not n:
        return {}
    per_step = {p: sum(num(s, f"speed/tokens_{p}") for s in steps) / n
                for p in ("screen", "continue", "full", "discarded", "trained")}
    gen_s = sum(num(s, "timing/generation") for s in steps)
    gen_tokens = sum(num(s, "speed/tokens_generated") for s in steps)
    # Token-weighted: the trained tokens of groups whose rewards are all equal (no gradient).
    # Steps that log neither the useful tokens nor a share (`off` before it did) are left out,
    # not counted as all-zero.
    counted = [(useful, num(s, "speed/tokens_trained")) for s in steps
               if (useful := useful_tokens(s)) is not None]
    useful = sum(u for u, _ in counted)
    trained = sum(t for _, t in counted)
    grads = [s["actor_grad_norm"] for s in steps if s.get("actor_grad_norm") is not None
             and not is_nan(s["actor_grad_norm"])]
    acc = []
    for key in ("speed/accuracy", "rollout/reward_mean"):  # the driver's, else OpenRLHF's (`off`)
        acc = acc or [s[key] for s in steps if s.get(key) is not None and not is_nan(s[key])]
    nan = float("nan")
    return {**{f"tokens_per_step_{p}": v for p, v in per_step.items()},
            **_per_step_counts(steps),
            "qualification_rate": qualification_rate(steps),
            "qualification_by_quarter": by_quarter(steps, qualification_rate),
            "rejected_solved_by_quarter": by_quarter(steps, rejected_solved_share),
            "zero_variance_share": 1.0 - useful / trained if trained else nan,
            "grad_norm_mean": sum(grads) / len(grads) if grads else nan,
            "trained_accuracy_mean": sum(acc) / len(acc) if acc else nan,
            "generation_tokens_per_s": gen_tokens / gen_s if gen_s else nan}
