"""The tables docs/*.md print from a published results.json, built from it rather than copied.

A doc holds such a table between two markers that name its source (a results.json; for the
others their own JSON) and the table:

    <!--table benchmarks/proving-v5/avx512/results.json runs-->
    | run | seed | ... |
    <!--/table-->

figures.check rebuilds each one and compares it line for line; `openrlhf-speed figures
--write FILE...` rewrites them after new evidence. The tables:

    runs        one row a run: clock and steps to the report's target, final accuracy, host speed
    curricula   one row a curriculum, ranges over its runs: steps, tokens a step, qualification
    intervals   each of our curricula over each baseline at the report's target, measured and
                projected, with the verdict (v4's tables, where the target is the preset's rule)
    headline    SPEED over each baseline at the headline target, every pricing the report has
    calibration the report of `proving-ground calibrate`, from its calibration.json
    soak        every figure of `make soak` (soak.json), its growth in each curriculum
    scale       the report of `make scale` (scale.json) without its title
    histogram   a difficulty.json's share of prompts per pass-rate bin
    quickstart  the summary lines of a published `make train` run (its run.json)
    quickstart_step  that run's console line for its last step
    quickstart_phases  that run's seconds a step by phase, and its useful-token share
    staleness   scripts/staleness_sim.py's simulated trade of each staleness bound (staleness.json)
    pacing      scripts/pacing_sim.py's simulated trade of each --speed.pace_batches (pacing.json)

Every figure comes from the report's own fields (evidence.runs, runs_summary, levels), so a
table shows what `bench --report_only` computed and nothing computed a second time here."""

from openrlhf_speed.bench import regime
from openrlhf_speed.curriculum.payoff import is_nan

KIND_LABELS = {"measured": "measured", "projected_linear": "projected, linear",
               "projected_concurrency": "projected, engine concurrency (H100 7B curve)",
               "cpu_concurrency": "priced on this machine's engine curve"}
SHORT_VERDICT = {"slower": ", slower", "not resolved": ", n.r."}
NAMES = {"off": "`off`", "dapo": "DAPO"}


def _missing(x) -> bool:
    return x is None or is_nan(x)


def _fmt(x, spec: str, unit: str = "", missing: str = "-") -> str:
    return missing if _missing(x) else f"{x:{spec}}{unit}"


def _span(values: list, spec: str, unit: str = "") -> str:
    values = [v for v in values if not _missing(v)]
    if not values:
        return "-"
    lo, hi = f"{min(values):{spec}}", f"{max(values):{spec}}"
    return f"{lo}{unit}" if lo == hi else f"{lo}-{hi}{unit}"


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def _header(names) -> list:
    return [_row(names), "|" + "---|" * len(names)]


def _curricula(results: dict) -> list:
    return list(dict.fromkeys(summary["curriculum"] for summary in results["runs_summary"].values()))


def runs(results: dict) -> list:
    evidence = results["evidence"]["runs"]
    lines = _header(["run", "seed", "training clock to target", "steps to target", "final (mean of last two)",
                     "training clock, all steps", "host eval tok/s"])
    for key, summary in results["runs_summary"].items():
        run = evidence.get(key, {})
        lines.append(_row([key, str(summary.get("seed", "-")),
                           _fmt(run.get("time_to_target_interp_s"), ",.0f", " s", "not reached"),
                           _fmt(run.get("steps_to_target_interp"), ".1f"),
                           _fmt(summary.get("final_accuracy_last_two"), ".3f"),
                           _fmt(summary.get("train_wall_s"), ",.0f", " s"),
                           _fmt(run.get("host_eval_tok_s"), ",.0f")]))
    return lines


def curricula(results: dict) -> list:
    evidence = results["evidence"]["runs"]
    lines = _header(["curriculum, runs", "steps to target", "tokens/step screen + continue (full)",
                     "discarded/step", "qualification", "zero-variance share", "trained reward"])
    for name in _curricula(results):
        mine = [run for key, run in evidence.items() if run["curriculum"] == name]

        def span(field, spec, unit=""):
            return _span([run.get(field) for run in mine], spec, unit)

        if any(run.get("tokens_per_step_screen") for run in mine):
            tokens = f"{span('tokens_per_step_screen', ',.0f')} + {span('tokens_per_step_continue', ',.0f')}"
        else:
            tokens = f"({span('tokens_per_step_full', ',.0f')})"
        lines.append(_row([f"{name}, {len(mine)}", span("steps_to_target_interp", ".1f"), tokens,
                           span("tokens_per_step_discarded", ",.0f"), span("qualification_rate", ".2f"),
                           span("zero_variance_share", ".2f"), span("trained_accuracy_mean", ".3f")]))
    return lines


def intervals(results: dict) -> list:
    measured, projected = (results["evidence"][k] for k in ("intervals_measured", "intervals_projected"))
    pairs = [key.split("_over_") for key in measured]
    ours = list(dict.fromkeys(o for o, _ in pairs))
    bases = list(dict.fromkeys(b for _, b in pairs))

    def cell(ci):
        return regime.format_ci(ci) + SHORT_VERDICT.get(ci.get("verdict", ""), "") if ci else "-"

    lines = _header(["over"] + [f"{NAMES.get(b, b)} {kind}" for b in bases
                                for kind in ("measured", "projected")])
    for o in ours:
        lines.append(_row([o] + [cell(table.get(f"{o}_over_{b}")) for b in bases for table in (measured, projected)]))
    return lines


def headline(results: dict) -> list:
    kinds = results["levels"]["kinds"]
    lines = _header(["SPEED over"] + [KIND_LABELS.get(k, k) for k in kinds])
    for key, ratios in results["headline"]["ratios"].items():
        base = key.split("_over_", 1)[1]
        lines.append(_row([NAMES.get(base, base)] + [regime.format_ci(ratios.get(k)) for k in kinds]))
    return lines


def calibration(result: dict) -> list:
    """The whole report `proving-ground calibrate` prints, from its calibration.json."""
    from openrlhf_speed.bench.calibrate import format_calibration

    return format_calibration(result).splitlines()


def soak(result: dict) -> list:
    """Every soak figure's growth from the reference record to the last, a column per curriculum."""
    names = list(result["runs"])
    keys = list(dict.fromkeys(k for run in result["runs"].values() for k in run["growth"]))
    lines = _header(["figure, step 200 -> 1,000" if all(
        v["ref_step"] == 200 and v["last_step"] == 1000 for run in result["runs"].values()
        for v in run["growth"].values()) else "figure, reference -> last step"] + [f"`{n}`" for n in names])
    for key in keys:
        cells = []
        for name in names:
            v = result["runs"][name]["growth"].get(key)
            cells.append("-" if v is None else f"{v['ref']:.4g} -> {v['last']:.4g} ({v['growth']:+.1%})"
                         + (" **flagged**" if v["flagged"] else ""))
        lines.append(_row([key] + cells))
    return lines


def scale(result: dict) -> list:
    """The `make scale` report (bench/scale.markdown) without its title."""
    from openrlhf_speed.bench import scale as scale_bench

    lines = scale_bench.markdown(result).splitlines()
    while lines and (lines[0].startswith("# ") or not lines[0].strip()):
        lines.pop(0)
    return lines


def histogram(difficulty: dict) -> list:
    """A difficulty.json's share of prompts in each pass-rate bin (`proving-ground difficulty`)."""
    bins = difficulty["histogram"]
    total = sum(count for _, count in bins)
    return _header(["pass rate"] + [label for label, _ in bins]) + [
        _row(["prompts"] + [f"{count / total:.2f}" for _, count in bins])]


def quickstart(run: dict) -> list:
    """The figure lines of a published `make train` run's summary (scripts/publish_quickstart.py
    writes run.json: the run's metrics records and its wall clock), in a code block, as the
    README quotes them."""
    from openrlhf_speed.rollout.run_summary import RunFiles, build_summary, run_records

    text = build_summary(run_records(run["records"]), RunFiles("", None, None, None, None), "", "", run["wall_s"])
    figures = []
    for line in (line for line in text.splitlines() if line.startswith("- ")):
        figures.append(line)
        if line.startswith("- qualification"):  # the last figure; the summary's file list follows
            break
    return ["```", *figures, "```"]


def quickstart_step(run: dict) -> list:
    """The console line of the published run's last step, rebuilt from its record."""
    from openrlhf_speed.rollout.run_summary import run_records
    from openrlhf_speed.rollout.trainer import step_line

    last = [r for r in run_records(run["records"]) if r.get("event") == "step"][-1]
    return ["```", "[openrlhf-speed] " + step_line(int(last["step"]), last), "```"]


# (column, record key, format): the phases of a step as the trainer times them.
PHASES = (("s/step", "timing/step_total", ".1f"), ("generation", "timing/generation", ".1f"),
          ("experience", "timing/make_experience", ".1f"), ("train", "timing/ppo_train", ".1f"),
          ("weight sync", "timing/broadcast", ".1f"), ("useful-token share", "speed/useful_token_share", ".2f"))


def quickstart_phases(run: dict) -> list:
    """Each step of the published run by phase (seconds), then the median step: where a step's
    time goes on this CPU kind, from the run's own timers."""
    from statistics import median

    from openrlhf_speed.rollout.run_summary import run_records

    steps = [r for r in run_records(run["records"]) if r.get("event") == "step"]
    out = ["| step | " + " | ".join(c for c, _, _ in PHASES) + " |", "|---|" + "---|" * len(PHASES)]
    for r in steps:
        out.append(f"| {int(r['step'])} | " + " | ".join(_fmt(r.get(k), f) for _, k, f in PHASES) + " |")
    mid = [median(r[k] for r in steps if not _missing(r.get(k))) if any(not _missing(r.get(k)) for r in steps)
           else None for _, k, _ in PHASES]
    out.append("| median | " + " | ".join(_fmt(m, f) for m, (_, _, f) in zip(mid, PHASES)) + " |")
    return out


def staleness(sim: dict) -> list:
    """One row a bound: trained groups by screening age (a range where ages run long),
    prompts screened again, the share of generated tokens discarded as stale."""
    out = ["| bound | trained groups by screening age | re-screened | stale tokens |", "|---|---|---|---|"]
    for r in sim["rows"]:
        bound = "none" if r["bound"] is None else f"{r['bound']}" + (" (default)" if r["bound"] == 2 else "")
        ages = r["trained_groups_by_age"]
        shown = ("{" + ", ".join(f"{a}: {n}" for a, n in ages.items()) + "}" if len(ages) <= 4
                 else f"ages 0-{r['max_age']}")
        out.append(f"| {bound} | {shown} | {r['rescreened']} | {r['stale_token_share']:.1%} |")
    return out


def pacing(sim: dict) -> list:
    """One row a (mix, curriculum, pace): groups lost to the bound, tokens generated and
    discarded per step against the same curriculum unpaced, trained screenings' mean age."""
    out = ["| mix | curriculum | pace | stale groups a step | tokens a step | discarded a step | screening age |",
           "|---|---|---|---|---|---|---|"]
    base = {(r["mix"], r["strategy"]): r for r in sim["rows"] if r["pace"] is None}
    for r in sim["rows"]:
        b = base[(r["mix"], r["strategy"])]
        rel = "" if r is b else f" ({r['tokens_generated_per_step'] / b['tokens_generated_per_step'] - 1:+.0%})"
        out.append(f"| {r['mix']} | {NAMES.get(r['strategy'], r['strategy'])} | "
                   f"{'unpaced' if r['pace'] is None else r['pace']} | {r['stale_groups_per_step']:.1f} | "
                   f"{r['tokens_generated_per_step']:,.0f}{rel} | {r['tokens_discarded_per_step']:,.0f} | "
                   f"{r['screening_age_mean']:.2f} |")
    return out


TABLES = {"runs": runs, "curricula": curricula, "intervals": intervals, "headline": headline,
          "calibration": calibration, "soak": soak, "scale": scale, "quickstart": quickstart,
          "quickstart_step": quickstart_step, "quickstart_phases": quickstart_phases,
          "histogram": histogram, "staleness": staleness, "pacing": pacing}
