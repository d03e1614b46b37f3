"""One cell of the regime map: where in (zero-variance share, batch) screening pays, and how it
compares with training only the groups DAPO kept (the ceiling, a yardstick rather than a bound).

A cell is one benchmark (a data mix and a batch size) with `off`, DAPO and SPEED runs; its
target is `off`'s final accuracy (levels.py, f = 1.0), fixed by the `off` runs alone. Per cell:

- steps to target and their ratio (`off` over SPEED), rho (SPEED's informative share of
  trained tokens over `off`'s: 1 - the zero-variance share), and alpha, the exponent in
  step ratio = rho^alpha (1: steps fall linearly with informative groups, SGD below the critical
  batch; 0: not at all, far above it; McCandlish et al. 2018). A baseline run that never reaches
  the target makes the step ratio and alpha floors.
- the ceiling: the speedup over `off` of a curriculum that generated only the groups DAPO kept,
  from DAPO's runs with their discarded tokens priced at zero: a selection that trains DAPO's
  groups without paying for the ones it drops. Beside it, SPEED's own runs with their discarded
  screenings free: SPEED selects towards pass rates near 0.5 (its screen passes those most
  often, Theorem 4.1's weighting), so it can need fewer steps than DAPO, and this is then the
  higher bound; what lies between SPEED and it is its discarded screening alone.
- accuracy at a fixed budget: each curriculum's held-out accuracy at `off`'s whole training
  clock and at `off`'s whole projected cost (a user's fixed allocation).

Pure functions of run records and the report's clocks, so they are tested without training.
The map over cells is regime_map.py.
"""

from __future__ import annotations

import math
import random
from typing import Optional

from openrlhf_speed.bench import aggregate, evidence

OURS, BASE, FILTER = "speed", "off", "dapo"
EARLY_STEPS = 5  # `off`'s zero-variance share "at step 0": its first steps, before the policy moves


def _runs_of(runs: dict, groups: dict, name: str) -> list:
    return [r for k, r in runs.items() if groups.get(k, k) == name]


def steps_to(run: dict, target: float) -> tuple[float, bool]:
    """(steps to target, reached); a run that never reaches it counts its whole horizon."""
    _, step = aggregate.interpolate_to_target(run["evals"], target)
    if step is None:
        return float(len(run["steps"])), False
    return step, True


def informative_share(steps: list) -> float:
    """1 - the zero-variance share of trained tokens (aggregate.mechanism's column)."""
    z = aggregate.mechanism(steps).get("zero_variance_share", float("nan"))
    return 1.0 - z


def _bootstrap(fn, samples: list, reps: int = aggregate.B_REPS, seed: int = aggregate.B_SEED) -> Optional[dict]:
    """{'point', 'low', 'high'} of fn(*lists) with each list resampled with replacement."""
    point = fn(*samples)
    if point is None or math.isnan(point):
        return None
    rng = random.Random(seed)
    vals = []
    for _ in range(reps):
        v = fn(*[[rng.choice(s) for _ in s] for s in samples])
        if v is not None and not math.isnan(v):
            vals.append(v)
    vals.sort()
    if not vals:
        return None
    return {"point": point, "low": aggregate.percentile(vals, 0.025), "high": aggregate.percentile(vals, 0.975)}


def _mean(xs: list) -> float:
    return sum(xs) / len(xs)


def _over(a: float, b: float) -> float:
    """a / b, NaN for b = 0: a run that met the target at step 0, or no informative group."""
    return a / b if b else float("nan")


def _alpha(base_steps, ours_steps, base_share, ours_share):
    ratio, rho = _over(_mean(base_steps), _mean(ours_steps)), _over(_mean(ours_share), _mean(base_share))
    if rho <= 1.0 or ratio <= 0:
        return float("nan")
    return math.log(ratio) / math.log(rho)


def accuracy_at(evals: list, clock: float, key: str = "train_wall_s") -> tuple[float, bool]:
    """(held-out accuracy at `clock` on the evaluations' `key` axis, linear between
    evaluations; whether the run got that far). A run that ended sooner gives its last."""
    ev = sorted(evals, key=lambda e: e[key])
    for a, b in zip(ev, ev[1:]):
        if a[key] <= clock <= b[key]:
            f = 0.0 if b[key] == a[key] else (clock - a[key]) / (b[key] - a[key])
            return a["eval_accuracy"] + f * (b["eval_accuracy"] - a["eval_accuracy"]), True
    return ev[-1]["eval_accuracy"], ev[-1][key] >= clock


def _with_projected(evals: list, clock: list) -> list:
    """Evaluations with 'projected_s': the projected clock at their step."""
    return [{**e, "projected_s": aggregate.clock_at_step(clock, e["step"])} for e in evals]


def ceiling_clock(steps: list, ratio: float, s_per_train_token: float) -> list:
    """The projected clock of a run whose discarded generation cost nothing."""
    kept = [{**st, "speed/tokens_generated": aggregate.num(st, "speed/tokens_generated")
             - aggregate.num(st, "speed/tokens_discarded")} for st in steps]
    return aggregate.projected_clock(kept, ratio, s_per_train_token)


def measured_ceiling_clock(steps: list) -> list:
    """The measured clock [0, c1, ...] less each step's generation seconds spent on discarded
    tokens, pro rata by tokens (the driver waits for generation between training steps)."""
    out, saved = [0.0], 0.0
    for st in steps:
        gen = aggregate.num(st, "speed/tokens_generated")
        if gen:
            saved += aggregate.num(st, "timing/generation") * aggregate.num(st, "speed/tokens_discarded") / gen
        out.append(float(st["train_wall_s"]) - saved)
    return out


def _time_at(clock: list, run: dict, target: float) -> tuple[float, bool]:
    step, reached = steps_to(run, target)
    return aggregate.clock_at_step(clock, step), reached


def _ratio_cell(base: list, ours: list) -> dict:
    """aggregate.censored_ratio from (value, reached) pairs: a run under the target carries its
    whole horizon (its steps or clock), a floor on the baseline's side, a ceiling on ours."""
    def times(pairs):
        return [v if reached else ("censored", v) for v, reached in pairs]
    return aggregate.censored_ratio(times(base), times(ours))


def engine_rate(run: dict) -> Optional[float]:
    """A run's generated tokens per second of generation over its host's speed (evidence.host_speed,
    the same evaluation prompts in every run), so the host's drift between runs divides out; None
    without both. A curriculum that sends its engines smaller batches or more round trips decodes
    fewer tokens a second, which the GPU projection does not charge: it prices tokens alone."""
    host = evidence.host_speed(run["evals"])
    gen = aggregate.mechanism(run["steps"]).get("generation_tokens_per_s")
    if not host or gen is None or math.isnan(gen):
        return None
    return gen / host


def _mean_rate(runs: list) -> Optional[float]:
    rates = [r for r in map(engine_rate, runs) if r is not None]
    return _mean(rates) if rates else None


def discarded_share(steps: list) -> float:
    gen = sum(aggregate.num(st, "speed/tokens_generated") for st in steps)
    return sum(aggregate.num(st, "speed/tokens_discarded") for st in steps) / gen if gen else float("nan")


def cell(runs: dict, groups: dict, target: Optional[float], settings: dict, model: Optional[dict],
         linear_clocks: dict) -> Optional[dict]:
    """The regime figures of one benchmark (see the module docstring); None without `off`,
    DAPO and SPEED runs or a target. model: evidence's cost model; linear_clocks: {run key:
    projected clock per step} (levels.clock_sets' projected_linear). Curricula beside these
    (e.g. speed_seq) get their own steps, discarded share and screenings-free bound in
    'curricula'."""
    names = list(dict.fromkeys(groups.get(k, k) for k in runs))
    keys = {c: [k for k in runs if groups.get(k, k) == c] for c in names}
    if target is None or not all(keys.get(c) for c in (BASE, FILTER, OURS)):
        return None
    st = {c: [steps_to(runs[k], target) for k in ks] for c, ks in keys.items()}
    share = {c: [informative_share(runs[k]["steps"]) for k in ks] for c, ks in keys.items()}
    floor = not all(r for _, r in st[BASE])
    alpha = _bootstrap(_alpha, [[s for s, _ in st[BASE]], [s for s, _ in st[OURS]], share[BASE], share[OURS]])
    rho = _bootstrap(lambda b, o: _over(_mean(o), _mean(b)), [share[BASE], share[OURS]])
    early = [1.0 - informative_share(runs[k]["steps"][:EARLY_STEPS]) for k in keys[BASE]]
    out = {"batch": settings.get("batch"), "n": settings.get("n"), "target": target,
           "off_zero_variance_early": _mean(early), "off_zero_variance": 1.0 - _mean(share[BASE]),
           "steps_to_target": {c: [round(s, 2) if r else None for s, r in st[c]] for c in (BASE, FILTER, OURS)},
           "step_ratio": _ratio_cell(st[BASE], st[OURS]), "rho": rho,
           "alpha": {**alpha, "at_least": floor} if alpha else None}
    measured = {c: [(aggregate.interpolate_to_target(runs[k]["evals"], target)[0] or _whole(runs[k]), r)
                    for k, (_, r) in zip(ks, st[c])] for c, ks in keys.items()}
    others = [c for c in names if c != BASE]
    free = {c: [_time_at(measured_ceiling_clock(runs[k]["steps"]), runs[k], target) for k in keys[c]] for c in others}
    out["ceiling"] = {"measured": _ratio_cell(measured[BASE], free[FILTER])}
    per = {c: {"steps_to_target": [round(s, 2) if r else None for s, r in st[c]],
               "step_ratio": _ratio_cell(st[BASE], st[c]),
               "discarded_share": _mean([discarded_share(runs[k]["steps"]) for k in keys[c]]),
               "engine_rate": _mean_rate([runs[k] for k in keys[c]]),
               "discards_free": {"measured": _ratio_cell(measured[BASE], free[c])}} for c in others}
    budget = {"clock_s": _mean([_whole(runs[k]) for k in keys[BASE]])}
    budget["accuracy"] = {c: _mean([accuracy_at(runs[k]["evals"], budget["clock_s"])[0] for k in ks])
                          for c, ks in keys.items()}
    if model and linear_clocks:
        proj = {c: [(aggregate.clock_at_step(linear_clocks[k], s), r) for k, (s, r) in zip(ks, st[c])]
                for c, ks in keys.items()}
        cfree = {c: [(aggregate.clock_at_step(ceiling_clock(runs[k]["steps"], model["ratio"], model["s_per_train_token"]),
                                        s), r) for k, (s, r) in zip(keys[c], st[c])] for c in others}
        out["ceiling"]["projected"] = _ratio_cell(proj[BASE], cfree[FILTER])
        for c in others:
            per[c]["discards_free"]["projected"] = _ratio_cell(proj[BASE], cfree[c])
        budget["projected_s"] = _mean([linear_clocks[k][-1] for k in keys[BASE]])
        budget["accuracy_projected"] = {
            c: _mean([accuracy_at(_with_projected(runs[k]["evals"], linear_clocks[k]), budget["projected_s"],
                                  "projected_s")[0] for k in ks]) for c, ks in keys.items()}
    out["discards_free"] = per[OURS]["discards_free"]
    out["curricula"] = per
    out["budget"] = budget
    return out


def share_of_ceiling(speedup: dict, ceiling: dict) -> Optional[float]:
    """SPEED's speedup over `off` as a share of the ceiling's (point estimates); an upper bound
    where the speedup is one (share_text prints it so)."""
    if "point" not in (speedup or {}) or "point" not in (ceiling or {}):
        return None
    return speedup["point"] / ceiling["point"]


def _whole(run: dict) -> float:
    return float(run["steps"][-1]["train_wall_s"]) if run["steps"] else 0.0


def format_ci(ci: Optional[dict], spec: str = ".2f", unit: str = "x") -> str:
    """A figure with its interval as the tables print it: 1.19x [1.04-1.39], ">=" for a floor,
    "<=" for a ceiling; a point without one (one run of a curriculum) as 1.05x, with its verdict."""
    if not ci or "point" not in ci:
        return (ci or {}).get("verdict", "-")
    mark = aggregate.bound(ci)
    if ci.get("low") is None or ci.get("high") is None:
        return f"{mark}{ci['point']:{spec}}{unit}, {ci.get('verdict', 'no interval')}"
    return f"{mark}{ci['point']:{spec}}{unit} [{ci['low']:{spec}}-{ci['high']:{spec}}]"


def table_ci(ci: Optional[dict], spec: str = ".2f", unit: str = "x") -> str:
    """format_ci for a table cell (the map's and the speedup-by-level table's): "not reached"
    where a run never reached the target, the one part of the verdict a cell has room for."""
    if ci and "point" not in ci and "did not reach" in ci.get("verdict", ""):
        return "not reached"
    return format_ci(ci, spec, unit)


def share_text(share: Optional[float], speedup: Optional[dict]) -> str:
    """A share of the ceiling as the tables print it: '<=' where the speedup is a ceiling."""
    return "-" if share is None else f"{'<=' if (speedup or {}).get('at_most') else ''}{share:.0%}"


def rate_over_speed(d: dict, ours: Optional[dict]) -> Optional[float]:
    """A curriculum's engine rate (engine_rate) over SPEED's, from their cell entries; None without both."""
    mine, theirs = d.get("engine_rate"), (ours or {}).get("engine_rate")
    return mine / theirs if mine and theirs else None


def _engine_note(d: dict, ours: dict) -> str:
    """Its engine rate against SPEED's where it is lower: what the projection leaves out."""
    rate = rate_over_speed(d, ours)
    if rate is None or rate >= 1.0:
        return ""
    return (f"; its engines decode {rate:.2f}x SPEED's tokens a second of the same host (smaller batches, "
            "more round trips), which the projection, pricing tokens alone, does not charge")


def markdown(c: Optional[dict], headlines: Optional[dict]) -> list:
    """The report's regime lines for one cell; headlines: {curriculum: levels.headline}."""
    if not c:
        return []
    ratios = ((headlines or {}).get(OURS) or {}).get("ratios", {})
    lines = ["", f"regime (target {c['target']:.4f} = off's final accuracy; B {c['batch']}, N {c['n']}; off's "
             f"zero-variance share {c['off_zero_variance_early']:.2f} over its first {EARLY_STEPS} steps, "
             f"{c['off_zero_variance']:.2f} over the run):",
             f"- steps to target: " + "; ".join(f"{k} " + ", ".join("-" if s is None else f"{s:.1f}" for s in v)
                                                for k, v in c["steps_to_target"].items()),
             f"- step ratio off / speed {format_ci(c['step_ratio'])}; rho (informative share, speed / off) {format_ci(c['rho'])}; "
             f"alpha (step ratio = rho^alpha) {format_ci(c['alpha'], '.2f', '')}"]
    for kind, label in (("measured", "measured"), ("projected", "GPU projection")):
        ceil = c["ceiling"].get(kind)
        if ceil is None:
            continue
        sp = ratios.get("speed_over_off", {}).get("measured" if kind == "measured" else "projected_linear")
        share = share_of_ceiling(sp, ceil)
        lines.append(f"- ceiling over off ({label}; DAPO's kept groups, its discards free): {format_ci(ceil)}; SPEED "
                     f"{format_ci(sp)}" + ("" if share is None else f", {share_text(share, sp)} of the ceiling")
                     + f"; SPEED with its discarded screenings free {format_ci(c['discards_free'].get(kind))}")
    for name, d in c.get("curricula", {}).items():
        if name in (FILTER, OURS):
            continue
        r = ((headlines or {}).get(name) or {}).get("ratios", {})
        sp = r.get(f"{name}_over_off", {}).get("projected_linear")
        share = share_of_ceiling(sp, c["ceiling"].get("projected"))
        lines.append(f"- {name}: steps to target " + ", ".join("-" if s is None else f"{s:.1f}"
                                                               for s in d["steps_to_target"])
                     + f"; over off, projected {format_ci(sp)}" + ("" if share is None else f", {share_text(share, sp)} of the ceiling")
                     + f"; discarded share {d['discarded_share']:.2f}; its discards free "
                     f"{format_ci(d['discards_free'].get('projected'))}" + _engine_note(d, c["curricula"][OURS]))
    b = c["budget"]
    lines.append(f"- held-out accuracy at off's whole clock ({b['clock_s']:.0f} s): "
                 + ", ".join(f"{k} {v:.3f}" for k, v in b["accuracy"].items()))
    if "projected_s" in b:
        lines.append(f"- at off's whole projected cost ({b['projected_s']:.0f} s, a model): "
                     + ", ".join(f"{k} {v:.3f}" for k, v in b["accuracy_projected"].items()))
    return lines
