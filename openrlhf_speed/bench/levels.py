"""The speedup at every target level, and the headline target fixed before any SPEED run.

The paper's Table 1 asks how long each method takes to reach an accuracy that the baseline
reaches late in a long run ("RLOO needs about 3.4 times longer to reach 0.45"). One target
answers one question; a curve over target levels shows where in training a curriculum gains.

- Levels: target(f) = mean step-0 accuracy + f x (off's final accuracy - that start), f from
  0.5 to 1.0 in steps of 0.1 (`LEVELS`), and above it (`ABOVE`), where the baseline may never
  get within the horizon. off's final accuracy is the mean over its runs of each run's last two
  evaluations: one evaluation is one noisy draw, two halve the chance that a late dip or spike
  moves every level. It depends on the `off` runs alone, so the headline (f = 1.0) is fixed
  before any SPEED run is looked at.
- Per level and run: the interpolated clock to the level (aggregate.interpolate_to_target),
  measured and under both GPU projections, per token (the pessimistic bound) and by the
  engine's throughput at the step's concurrency (concurrency.py); per ratio, the bootstrap
  interval of aggregate.bootstrap_ratio.
- A run that never reaches a level within the horizon is censored, not dropped, and priced at
  its whole clock: a ratio whose baseline runs are censored but ours all reached is a lower
  bound ("at least", '>='); one with censored runs of ours and none of the baseline's is an
  upper bound ("at most", '<='), which still says "slower" when its interval is under 1; with
  censored runs on both sides, no ratio.

Pure functions of run records, so they are tested without training.
"""

from __future__ import annotations

import math
from typing import Optional

from openrlhf_speed.bench import aggregate, regime

LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
ABOVE = (1.1, 1.2, 1.3, 1.5)
HEADLINE = 1.0
BASE = "off"


def final_accuracy(evals: list, last: int = 2) -> float:
    """Mean accuracy of a run's last `last` evaluations after step 0 (NaN without any)."""
    later = [e["eval_accuracy"] for e in sorted(evals, key=lambda e: e["step"]) if e["step"] > 0][-last:]
    return sum(later) / len(later) if later else float("nan")


def base_final(runs: dict, groups: dict, base: str = BASE) -> Optional[dict]:
    """{'start', 'final', 'finals'}: the mean step-0 accuracy over every run and the mean over
    the base curriculum's runs of final_accuracy; None without base runs or evaluations."""
    finals = [final_accuracy(r["evals"]) for k, r in runs.items() if groups.get(k, k) == base]
    starts = [e["eval_accuracy"] for r in runs.values() for e in r["evals"] if e["step"] == 0]
    if not finals or not starts or any(math.isnan(x) for x in finals):
        return None
    return {"start": sum(starts) / len(starts), "final": sum(finals) / len(finals), "finals": finals}


def final_rule(runs: dict, groups: dict, base: str = BASE) -> dict:
    """The `off_final` target rule in aggregate.uniform_gain_target's form: target = base_final,
    with a note (and no evidence) when the off runs did not improve on the start."""
    info = {"rule": "off_final", "fraction": 1.0, "target": None, "note": None}
    anchor = base_final(runs, groups, base)
    if anchor is None:
        info["note"] = f"the target rule off_final needs {base} runs with evaluations: add {base} to --curricula"
        return info
    gain = anchor["final"] - anchor["start"]
    info.update(start=anchor["start"], baseline_final=anchor["final"], gain=gain, target=anchor["final"])
    if gain <= 0:
        info["note"] = (f"the {base} runs did not improve (final {anchor['final']:.4f} vs step-0 {anchor['start']:.4f}): "
                        "times to their final accuracy are not evidence; train longer (--steps) or with a larger --lr")
    return info


def level_target(anchor: dict, f: float) -> float:
    return anchor["start"] + f * (anchor["final"] - anchor["start"])


def clock_sets(runs: dict, groups: dict, responses: int, batch: int, linear: dict,
               cpu_curve: Optional[dict] = None) -> dict:
    """The GPU projections' clocks, {name: {run key: cumulative clock per step}}: per token (the
    pessimistic bound: `linear`, evidence.projection's clocks) and by the engine's throughput at
    each step's concurrency (concurrency.py); each is {} without off or uniform runs to anchor its
    price. With a measured CPU engine curve, a third set prices the same steps on this machine's
    engine at the runs' own concurrency (scale 1): the model checked against the measured clock."""
    from openrlhf_speed.bench import concurrency

    sets = {"projected_linear": linear,
            "projected_concurrency": concurrency.projected_clocks(runs, groups, responses, batch)[0]}
    if cpu_curve:
        sets["cpu_concurrency"] = concurrency.projected_clocks(runs, groups, responses, batch, curve=cpu_curve,
                                                               scale=1.0)[0]
    return sets


def _times(run: dict, target: float, clocks: dict, key: str) -> dict:
    """{'measured': clock to target, one entry per projected clock set}; a run that never reaches
    the target gives ('censored', its whole clock) for each, so a baseline's miss becomes a floor."""
    t, step = aggregate.interpolate_to_target(run["evals"], target)
    if t is None:
        return {"measured": ("censored", aggregate.whole_clock(run["evals"])),
                **{name: ("censored", c[key][-1]) for name, c in clocks.items() if key in c}}
    return {"measured": t, **{name: aggregate.clock_at_step(c[key], step) for name, c in clocks.items() if key in c}}


def table(runs: dict, groups: dict, clocks: dict, ours_list: list, baselines=aggregate.BASELINES,
          levels=LEVELS + ABOVE, base: str = BASE) -> Optional[dict]:
    """Per level: its target, each curriculum's share of runs reaching it within the horizon,
    and each ours-over-baseline ratio measured and under each projection. clocks: {projection
    name: {run key: cumulative clock per step}} (empty without a cost model)."""
    anchor = base_final(runs, groups, base)
    if anchor is None:
        return None
    curricula = list(dict.fromkeys(groups.get(k, k) for k in runs))
    kinds = ["measured"] + [name for name, c in clocks.items() if c]
    rows = []
    for f in levels:
        target = level_target(anchor, f)
        per = {c: [] for c in curricula}
        for key, run in runs.items():
            per[groups.get(key, key)].append(_times(run, target, clocks, key))
        reached = {c: sum(1 for t in v if not isinstance(t["measured"], tuple)) / len(v) for c, v in per.items()}
        ratios = {}
        for ours in (c for c in ours_list if c in per):
            for b in (b for b in aggregate.same_driver(ours, baselines) if b in per):
                ratios[f"{ours}_over_{b}"] = {
                    kind: aggregate.censored_ratio([t.get(kind) for t in per[b]], [t.get(kind) for t in per[ours]])
                    for kind in kinds}
        rows.append({"f": f, "target": target, "reached": reached, "ratios": ratios})
    return {"base": base, "start": anchor["start"], "base_final": anchor["final"], "base_finals": anchor["finals"],
            "headline_f": HEADLINE, "kinds": kinds, "levels": rows}


def headline(tab: Optional[dict], ours: str = "speed") -> Optional[dict]:
    """The row at f = 1.0 (off's final accuracy): {'target', 'ratios': {ratio: {kind: cell}}}."""
    if not tab:
        return None
    row = next((r for r in tab["levels"] if abs(r["f"] - HEADLINE) < 1e-9), None)
    if row is None:
        return None
    return {"target": row["target"], "ratios": {k: v for k, v in row["ratios"].items() if _is_ratio_of(k, ours)}}


def _is_ratio_of(key: str, ours: str) -> bool:
    """Whether ratio key `<curriculum>_over_<baseline>` is one of `ours` over a baseline."""
    return key.split("_over_")[0] == ours


def markdown(tab: Optional[dict], ours: str = "speed") -> list:
    """The speedup-against-target table and the reach shares, as report lines."""
    if not tab:
        return []
    keys = [k for k in tab["levels"][0]["ratios"] if _is_ratio_of(k, ours)]
    curricula = list(tab["levels"][0]["reached"])
    lines = ["", f"speedup at every target level: target = step-0 {tab['start']:.4f} + f x ({tab['base']}'s final "
             f"{tab['base_final']:.4f} - start); {tab['base']}'s final = mean over its runs of the last two "
             "evaluations, fixed by the " f"{tab['base']} runs alone; cells: " + " / ".join(tab["kinds"]) + ", bootstrap "
             "95% interval; "
             "'>=' a floor (baseline runs that never reached the level count their whole clock), '<=' a ceiling "
             f"(runs of {ours} that never reached it count theirs); 'not reached': runs of both did not reach the "
             "level within the horizon", "",
             # One join over all columns: before any run of ours, `keys` is empty and a join per
             # part would leave an empty header cell that the separator row does not count.
             "| " + " | ".join(["f", "target"] + [k.replace("_over_", " over ") for k in keys]
                               + [f"{c} reached" for c in curricula]) + " |",
             "|---|---|" + "---|" * (len(keys) + len(curricula))]
    for r in tab["levels"]:
        cells = [" / ".join(regime.table_ci(r["ratios"][k][kind]) for kind in tab["kinds"]) for k in keys]
        reach = [f"{r['reached'][c]:.2f}" for c in curricula]
        lines.append(f"| {r['f']:g} | {r['target']:.4f} | " + " | ".join(cells + reach) + " |")
    return lines


def plot(tab: Optional[dict], path: str, ours: str = "speed") -> Optional[str]:
    """Speedup against target level, one line per baseline, measured and projected, with the
    intervals as error bars; None when there is nothing to plot."""
    if not tab:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = tab["kinds"]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.5 * len(kinds), 4.2), sharey=True, squeeze=False)
    axes = axes[0]
    keys = [k for k in tab["levels"][0]["ratios"] if _is_ratio_of(k, ours)]
    for ax, kind in zip(axes, kinds):
        for i, k in enumerate(keys):
            pts = [(r["f"], r["ratios"][k][kind]) for r in tab["levels"] if "low" in r["ratios"][k][kind]]
            if not pts:
                continue
            xs = [f + (i - 1) * 0.008 for f, _ in pts]
            ys = [c["point"] for _, c in pts]
            err = [[c["point"] - c["low"] for _, c in pts], [c["high"] - c["point"] for _, c in pts]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=f"C{i}", label=k.replace("_over_", " over "))
            for bound, marker in (("at_least", "^"), ("at_most", "v")):
                marked = [(x, c["point"]) for x, (_, c) in zip(xs, pts) if c.get(bound)]
                if marked:
                    ax.scatter(*zip(*marked), marker=marker, s=70, color=f"C{i}", zorder=3)
        ax.axhline(1.0, color="grey", linewidth=1)
        ax.axvline(HEADLINE, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel(f"target level f (start + f x {tab['base']}'s final gain)")
        ax.set_title(kind.replace("_", " ") + (" (a model)" if kind != "measured" else " clock"))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("speedup (baseline time / ours), 95% interval; ^ = floor, v = ceiling")
    axes[0].legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
