"""The text report of `openrlhf-speed advise` (cli/advise.py): the difficulty tables, the
histogram, the mechanism per step of each curriculum, the break-even, the range, the model's
assumptions and, last, the verdict in one line. Every figure comes from the result dict that
`--json` prints, so the two never disagree."""

from __future__ import annotations

import math

from openrlhf_speed.curriculum.payoff import BASELINE_NAMES

COLUMNS = ("off/uniform", "dapo", "speed")


def _k(x: float) -> str:
    """Tokens, short: 812, 8.8k, 1.23M."""
    if x is None or math.isnan(x):
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.0f}" if x < 1000 else f"{x / 1000:.1f}k" if x < 1e6 else f"{x / 1e6:.2f}M"


def _difficulty(r: dict) -> list:
    s, n = r["samples"], r["settings"]["n"]
    head = f"{'level':<22}{'prompts':>8}{'never':>8}{'some':>8}{'always':>8}{'pass':>8}"
    lines = [f"Difficulty, {s} samples per prompt at temperature {r['sampling']['temperature']:g} (observed):", head]
    for lv, row in r["difficulty"].items():
        at = row["at_S"]
        lines.append(f"{lv:<22}{row['prompts']:>8}{at['never']:>8.2f}{at['some']:>8.2f}{at['always']:>8.2f}"
                     f"{row['pass']:>8.2f}")
    lines += ["", f"The same at the training N = {n} (predicted from each prompt's posterior; prior "
              f"{_prior(r['prior'])}; +- one sd):", head]
    for lv, row in r["difficulty"].items():
        at = row["at_N"]
        cells = "".join(f"{at[k]['share']:>8.2f}" for k in ("never", "some", "always"))
        lines.append(f"{lv:<22}{row['prompts']:>8}{cells}{row['pass']:>8.2f}")
    every = r["difficulty"]["all"]["at_N"]
    lines.append(f"{'':<30}" + "".join(f"{'+-' + format(every[k]['sd'], '.2f'):>8}" for k in ("never", "some", "always")))
    return lines


def _prior(prior: dict) -> str:
    if prior.get("concentration"):
        return (f"a mixture of {len(prior['components'])} Betas on a grid of means, a + b = "
                f"{prior['concentration']:g}, weights fitted to the screening")
    parts = [f"{c['w']:.2f} Beta({c['a']:.3g}, {c['b']:.3g})" for c in prior["components"]]
    return " + ".join(parts) + f" ({prior['name']})"


def _holdout(r: dict) -> list:
    h = r.get("holdout")
    if not h:
        return []
    return ["", f"Check on the screening itself: fitted on each prompt's first {h['fitted_on']} samples, the posterior "
            f"predicts {h['predicted_zero_variance']:.3f} of prompts all wrong or all right on the last "
            f"{h['predicted_on']}; observed {h['observed_zero_variance']:.3f}"]


def _histogram(r: dict) -> list:
    total = r["prompts"]
    lines = ["", "Pass rates: prompts whose screening rate falls in the bin, and the expected number whose true "
             "rate does (posterior, +- one sd):",
             f"  {'bin':<11}{'observed':>9}{'posterior':>11}{'sd':>7}"]
    for row in r["histogram"]:
        bar = "#" * round(40 * row["expected"] / max(total, 1))
        lines.append(f"  {row['bin']:<11}{row['observed']:>9}{row['expected']:>11.1f}{row['sd']:>7.1f}  {bar}")
    return lines


def _mechanism(r: dict) -> list:
    s, p = r["settings"], r["predicted"]
    cols = [p["uniform"], p["dapo"], p["speed"]]
    band = f"({s['low']:g}, {s['high']:g})"
    lines = ["", f"Mechanism per training step, predicted (B {s['batch']} prompts x N {s['n']}, N_init {s['n_init']}, "
             f"band {band}, generation batch {s['gen_batch']} prompts; off and uniform sample alike):",
             f"  {'':<36}" + "".join(f"{c:>13}" for c in COLUMNS)]

    def row(label, values):
        lines.append(f"  {label:<36}" + "".join(f"{v:>13}" for v in values))

    row("prompts screened", [f"{c['prompts_screened']:.1f}" for c in cols])
    row("qualification rate", [f"{c['qualification_rate']:.2f}" for c in cols])
    row("screenings per qualified prompt", [f"{c['screenings_per_qualified']:.2f}" for c in cols])
    for phase in ("screen", "continue", "full", "discarded", "generated", "trained"):
        row(f"tokens {phase}", [_k(c["tokens"][phase]) for c in cols])
    row("discarded share of generated", [f"{c['tokens']['discarded_share']:.2f}" for c in cols])
    row("informative groups trained", [f"{c['informative_groups']:.1f}" for c in cols])
    row("zero-variance share (groups)", [f"{c['zero_variance_share']:.2f}" for c in cols])
    row("zero-variance share (trained tokens)", [f"{c['zero_variance_token_share']:.2f}" for c in cols])
    row("mean p(1-p) of trained groups", [f"{c['mean_pq']:.3f}" for c in cols])
    row("generation batches per step", [f"{c['generation_rounds']:.2f}" for c in cols])
    return lines


def _at_batch(c: dict) -> str:
    src = c.get("alpha_from") or {}
    if "batch" not in src:
        return ""
    return f" at B = {src['batch']}, the measured batch nearest this run's ({', '.join(src.get('cells', ()))})"


def _comparison(r: dict) -> list:
    c, src = r["comparison"], r["cost_ratio"]
    name = BASELINE_NAMES[c["baseline"]]
    where = src["source"]
    if "steps" in src:
        where += (f", {src['steps']} steps: generation {src['generation_s_per_step']:.1f} s, training "
                  f"{src['training_s_per_step']:.1f} s a step, priced {src['priced']}")
        if src.get("driver_run"):
            where += "; a SPEED-driver run, whose generation overlaps training: an `off` run measures it best"
    sv, sp, a = c["step_saving"], c["speedup"], c["alpha"]
    return ["", f"SPEED against {name}, inference : training = {c['cost_ratio']:.2f} : 1 ({where}):",
            f"  step cost                 {c['step_cost']:.2f}x {name}'s ({c['generated_tokens_ratio']:.2f}x the "
            f"generated tokens, {c['trained_tokens_ratio']:.2f}x the trained)",
            f"  break-even                {c['break_even']:.2f}x of its steps (SPEED must take fewer to be faster)",
            f"  informative groups        {c['informative_ratio']:.2f}x a step",
            f"  step saving               {sv['low']:.0%} to {sv['high']:.0%} ({sv['point']:.0%} at alpha "
            f"{a['point']:.2f}; steps = its x ratio^-alpha, alpha {a['low']:.2f}-{a['high']:.2f} fitted on the "
            f"regime map's cells{_at_batch(c)})",
            f"  speedup                   {sp['low']:.2f}x to {sp['high']:.2f}x ({sp['point']:.2f}x at alpha "
            f"{a['point']:.2f})"]


def render_report(r: dict) -> str:
    sc = r["screening"]
    lines = [f"openrlhf-speed advise: {r['model']} on {r['prompts']} prompts of {r['data']} x {r['samples']} "
             f"responses ({sc['seconds']:.1f} s, {sc['tokens']} tokens; reward statuses {sc['reward_statuses']})", ""]
    if r.get("screened"):
        w = r["screened"]
        lines[-1:-1] = [f"  the screening saved in {w['from']}, judged again with these settings"
                        + (f" (screened on {w['machine']})" if w.get("machine") else "")]
    lines += _difficulty(r) + _histogram(r) + _holdout(r) + _mechanism(r) + _comparison(r)
    lines += ["", "Assumptions of the model (docs/advise.md):"] + [f"  - {a}" for a in r["assumptions"]]
    lines += ["", r["verdict"]["line"]]
    return "\n".join(lines)
