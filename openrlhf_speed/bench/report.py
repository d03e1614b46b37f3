"""Figures of a benchmark from the runs' `--log.jsonl` files: time to target accuracy,
speedups, token accounting, curriculum overhead, and the plots.

Everything here is a pure function of the run logs, so a report can be rebuilt from a
benchmark folder (`openrlhf-speed bench --report_only DIR`) without training again.

Definitions:
- accuracy: `eval_accuracy`, mean reward over all held-out samples (pass@1);
- time: `train_wall_s`, the training clock without evaluation and checkpointing;
- time to target: in the main table, the clock at the first evaluation whose accuracy >=
  target (the grid figure, an upper bound by at most one eval period); in the evidence
  section (evidence.py), read where the line between two evaluations crosses the target,
  with bootstrap intervals of the speedups, the mechanism per run and the GPU projection;
- target "auto": the highest accuracy every run reached, i.e. the minimum over runs of
  their best evaluation after step 0, so every run gets a time; target "rule"
  (`--target_rule uniform_gain:F`, fixed before the runs): step-0 accuracy + F x the
  uniform runs' gain (aggregate.py);
- several runs per curriculum (`--runs`): a curriculum's row is the mean of its runs with
  the spread of time to target and final accuracy, "k/R reached" when not every run
  reached the target, and each run's own row in `runs_summary` (aggregate.py);
- useful-token share: tokens of trained groups whose rewards are not all equal / tokens
  generated (`speed/useful_token_share_cum` of the last step);
- mean reward of trained groups: the steps' `rollout/reward_mean` (OpenRLHF's mean over
  the samples trained on), else `speed/accuracy` (the SPEED driver's mean over trained
  groups); SPEED keeps it near 0.5 (the paper's Fig. 4), uniform follows the data;
- curriculum overhead share: driver time outside generation, reward and training
  (`timing_parts/curriculum_overhead`) / the training clock;
- SPEED driver vs raw vLLM (with --driver_steps): driver.py's line, from driver.json;
- claims: the paper's, each met / missed / not measurable, with the arithmetic of a miss
  (claims.py); the plot's error bars are +-1 binomial standard error of each evaluation.
"""

from __future__ import annotations

import csv
import json
import math
import os
from typing import Optional

from openrlhf_speed.bench import aggregate, claims, driver, evidence, levels, regime


# (label, metrics key): generation is the driver's wait for the engines; the rest of the
# engines' work overlaps training (pre-fetch) and costs no step time.
_PROFILE = (("generation wait", "timing/generation"), ("experience", "timing/make_experience"),
            ("train", "timing/ppo_train"), ("weight sync", "timing/broadcast"),
            ("curriculum", "timing_parts/curriculum_overhead"))


def load_run(path: str) -> dict:
    """{'steps': [step records], 'evals': [eval records]} from a --log.jsonl file."""
    steps, evals = [], []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            (evals if rec.get("event") == "eval" else steps).append(rec)
    return {"steps": steps, "evals": evals}


def load_runs(folder: str, keys) -> dict:
    """{run key: load_run} of the runs of a benchmark folder, from each run's metrics.jsonl:
    results.json holds the figures, the per-step records stay in the runs' own logs."""
    return {key: load_run(os.path.join(folder, key, "metrics.jsonl")) for key in keys}


def time_to_target(evals: list, target: float) -> tuple[Optional[float], Optional[int]]:
    """(train_wall_s, step) of the first evaluation reaching the target, or (None, None)."""
    for e in sorted(evals, key=lambda e: e["step"]):
        if e["eval_accuracy"] >= target:
            return e["train_wall_s"], int(e["step"])
    return None, None


def _trained_reward_mean(steps: list) -> float:
    for key in ("rollout/reward_mean", "speed/accuracy"):
        values = [s[key] for s in steps if key in s and not aggregate.is_nan(s[key])]
        if values:
            return sum(values) / len(values)
    return float("nan")


def auto_target(runs: dict) -> Optional[float]:
    bests = [max((e["eval_accuracy"] for e in r["evals"] if e["step"] > 0), default=None) for r in runs.values()]
    bests = [b for b in bests if b is not None]
    return min(bests) if bests and len(bests) == len(runs) else None


def run_summary(run: dict, target: Optional[float]) -> dict:
    steps, evals = run["steps"], run["evals"]
    last = steps[-1] if steps else {}
    wall = last.get("train_wall_s", 0.0)
    gen_s = aggregate.sum_key(steps, "timing/generation")
    tokens = {p: aggregate.sum_key(steps, f"speed/tokens_{p}")
              for p in ("screen", "continue", "full", "discarded", "generated")}
    evals = sorted(evals, key=lambda e: e["step"])
    t_target, s_target = time_to_target(evals, target) if target is not None else (None, None)
    start = evals[0] if evals and evals[0]["step"] == 0 else {}
    final = evals[-1] if evals else {}
    share = last.get("speed/useful_token_share_cum", float("nan"))
    overhead_s = aggregate.sum_key(steps, "timing_parts/curriculum_overhead")
    screened = aggregate.sum_key(steps, "speed/prompts_screened")
    return {
        "steps": len(steps),
        "train_wall_s": wall,
        "step_s_mean": wall / len(steps) if steps else float("nan"),
        "start_accuracy": start.get("eval_accuracy", float("nan")),
        "start_accuracy_se": claims.binomial_se(start.get("eval_accuracy"), start.get("eval_num_samples", 0)),
        "final_accuracy": final.get("eval_accuracy", float("nan")),
        "final_accuracy_se": claims.binomial_se(final.get("eval_accuracy"), final.get("eval_num_samples", 0)),
        "final_accuracy_last_two": levels.final_accuracy(evals),
        "best_accuracy": max((e["eval_accuracy"] for e in evals), default=float("nan")),
        "time_to_target_s": t_target,
        "steps_to_target": s_target,
        "tokens_screen": tokens["screen"],
        "tokens_continue": tokens["continue"],
        "tokens_full": tokens["full"],
        "tokens_discarded": tokens["discarded"],
        "tokens_generated": tokens["generated"],
        "useful_token_share": share,
        "trained_reward_mean": _trained_reward_mean(steps),
        # The mechanism behind a speedup, measurable even when accuracy has not moved yet:
        # tokens of groups that carry a gradient, per second of training clock.
        "useful_tokens_per_s": share * tokens["generated"] / wall if wall else float("nan"),
        "zero_gradient_steps": sum(1 for st in steps if st.get("actor_grad_norm", 1.0) == 0.0),
        "prompts_screened": screened,
        "qualification_rate": aggregate.qualification_rate(steps),
        "generation_s": gen_s,
        "generation_tokens_per_s": tokens["generated"] / gen_s if gen_s else float("nan"),
        "train_s": aggregate.sum_key(steps, "timing/ppo_train"),
        "curriculum_overhead_s": overhead_s,
        "curriculum_overhead_share": overhead_s / wall if wall else float("nan"),
        "eval_s": aggregate.sum_key(evals, "eval_time_s"),
        # Where a step's time goes (the profile of a miss): mean seconds per step.
        "step_profile_s": {part: aggregate.sum_key(steps, key) / len(steps) if steps else float("nan")
                           for part, key in _PROFILE},
    }


def build_report(runs: dict, target: Optional[float], settings: Optional[dict] = None,
                 groups: Optional[dict] = None, rule: Optional[str] = None, engine_curve: Optional[dict] = None) -> dict:
    """The report of runs {run key: run}; groups maps a run key to its curriculum (default:
    the key itself, one run each); rule is a --target_rule, exclusive with target."""
    if target is not None and rule is not None:
        raise ValueError("--target and --target_rule both given: a fixed target or a rule, not both")
    groups = {key: (groups or {}).get(key, key) for key in runs}
    # `off` logs no driver token counts: fill them in so its table row and projection count
    # what it generated (B x N responses a step).
    responses = int((settings or {}).get("batch", 0) or 0) * int((settings or {}).get("n", 0) or 0)
    runs = {key: {**run, "steps": evidence.with_tokens(run["steps"], responses)} for key, run in runs.items()}
    auto = auto_target(runs) if target is None and rule is None else None
    rule_info = None
    if rule is not None:
        kind, fraction = aggregate.parse_target_rule(rule)
        rule_info = (levels.final_rule(runs, groups) if kind == "off_final" else
                     aggregate.uniform_gain_target({k: run_summary(r, None) for k, r in runs.items()}, groups,
                                                   fraction))
    chosen = target if target is not None else (rule_info["target"] if rule_info else auto)
    run_rows = {key: {"curriculum": groups[key], **run_summary(run, chosen)} for key, run in runs.items()}
    summary = aggregate.group(run_rows, groups)  # aggregate skips the text field "curriculum"
    mode = "fixed" if target is not None else ("rule" if rule is not None else "auto")
    starts = [s["start_accuracy"] for s in summary.values() if not aggregate.is_nan(s["start_accuracy"])]
    note, not_evidence = None, False
    if chosen is None:
        note = (rule_info or {}).get("note") or "no target: some run has no evaluation after step 0"
    elif rule_info and rule_info["note"]:
        note, not_evidence = rule_info["note"], True
    elif mode == "auto" and starts and chosen <= max(starts):
        note = (f"auto target {chosen:.4f} is not above the step-0 accuracy ({max(starts):.4f}): not every curriculum "
                "improved in this budget, so times to target are not meaningful; run longer (more --steps)")
    noise = max((2 * s["start_accuracy_se"] for s in summary.values() if not aggregate.is_nan(s["start_accuracy_se"])),
                default=float("nan"))
    within_noise = note is None and chosen is not None and starts and chosen - max(starts) < noise
    if within_noise:
        # A target this close to where every run started can be reached by sampling noise
        # alone: a time to it says nothing about the curriculum.
        note = (f"target {chosen:.4f} is within two standard errors ({noise:.3f}) of the step-0 accuracy "
                f"({max(starts):.4f}): reaching it can be evaluation noise, so times to target and speedups are not "
                "evidence; evaluate on more prompts (--eval_prompts, --eval_k) or train longer (--steps)")
    sp, sp_why = aggregate.speedups(summary)
    report = {"target_accuracy": chosen, "target_mode": mode, "target_rule": rule_info, "note": note,
              "target_within_noise": bool(within_noise or not_evidence), "summary": summary,
              "runs_summary": run_rows, "speedups": sp, "speedup_notes": sp_why}
    report["claims"] = claims.check(report, settings)
    model, linear = evidence.projection(runs, groups, responses)  # once: the evidence and the levels price alike
    report["evidence"] = evidence.build(runs, groups, chosen, settings, (model, linear))
    ours = [c for c in dict.fromkeys(groups.values()) if evidence.is_ours(c)]
    batch = int((settings or {}).get("batch", 0) or 0)
    clocks = levels.clock_sets(runs, groups, responses, batch, linear, engine_curve)
    report["levels"] = levels.table(runs, groups, clocks, ours)
    report["headline"] = levels.headline(report["levels"])
    report["headlines"] = {c: levels.headline(report["levels"], c) for c in ours}
    report["regime"] = regime.cell(runs, groups, (report["headline"] or {}).get("target"), settings or {},
                                   report["evidence"]["cost_model"], clocks["projected_linear"])
    return report


def _fmt(x, spec: str, none: str = "not reached") -> str:
    if x is None:
        return none
    if aggregate.is_nan(x):
        return "n/a"
    return format(x, spec)


def _count(x) -> str:
    """A count, or the mean of counts over runs (3 or 3.5)."""
    return "-" if x is None else (str(x) if isinstance(x, int) else f"{x:.1f}")


def _time_cell(s: dict) -> str:
    """Mean time to target [min-max]; 'k/R reached [min-max]' when not every run reached it,
    so a mean over the lucky runs is never shown as the curriculum's."""
    runs, reached = s.get("runs", 1), s.get("reached", int(s["time_to_target_s"] is not None))
    spread = f" [{s['time_to_target_min']:.0f}-{s['time_to_target_max']:.0f}]" if runs > 1 and reached else ""
    if reached == runs:
        return f"{s['time_to_target_s']:.0f} s{spread}"
    return "not reached" if reached == 0 and runs == 1 else f"{reached}/{runs} reached{spread}"


def _acc_cell(s: dict) -> str:
    if s.get("runs", 1) > 1:
        return f"{_fmt(s['final_accuracy'], '.3f')} [{s['final_accuracy_min']:.3f}-{s['final_accuracy_max']:.3f}]"
    return _fmt(s["final_accuracy"], ".3f")


def _runs_table(report: dict) -> list:
    """Each run's own row, when a curriculum has several."""
    if all(s.get("runs", 1) == 1 for s in report["summary"].values()):
        return []
    rows = ["| run | curriculum | seed | time to target | steps to target | final acc | train time | "
            "useful-token share | trained reward |", "|---|---|---|---|---|---|---|---|---|"]
    for key, r in report["runs_summary"].items():
        rows.append(f"| {key} | {r['curriculum']} | {'-' if r.get('seed') is None else r['seed']} | "
                    f"{_fmt(r['time_to_target_s'], '.0f')}{'' if r['time_to_target_s'] is None else ' s'} | "
                    f"{_count(r['steps_to_target'])} | {_fmt(r['final_accuracy'], '.3f')} | "
                    f"{r['train_wall_s']:.0f} s | {_fmt(r['useful_token_share'], '.2f')} | "
                    f"{_fmt(r['trained_reward_mean'], '.3f')} |")
    return ["", "each run:", "", *rows]


def start_model(model: Optional[str]) -> Optional[str]:
    """The shipped start model's sha256 and pass table (proving.shipped.describe), None when
    the model is not a shipped proving ground or that module is absent."""
    from openrlhf_speed import proving

    if not model or not proving.is_proving(model):
        return None
    try:
        from openrlhf_speed.proving import shipped
    except ImportError:
        return None
    try:
        d = shipped.describe(model)
    except Exception as e:  # a missing or changed copy: the report still renders, and says so
        return f"start model {model}: no shipped description ({type(e).__name__}: {e})"
    return d["text"] if isinstance(d, dict) else str(d)


def _start_model_lines(report: dict) -> list:
    text = report.get("start_model")
    return [text, ""] if text else []


def _target_line(report: dict) -> str:
    how = report["target_mode"]
    if report.get("target_rule"):
        how = aggregate.rule_line(report["target_rule"]) or f"rule {report['target_rule']['rule']}: not computable"
    return f"target accuracy {_fmt(report['target_accuracy'], '.4f', 'none')} ({how})"


def table_markdown(report: dict) -> str:
    rows = ["| curriculum | runs | time to target mean [min-max] | steps to target | final acc mean [min-max] | "
            "best acc | train time | tokens screen/continue/full/discarded | useful-token share | gen tok/s | "
            "overhead |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in report["summary"].items():
        rows.append(
            f"| {name} | {s.get('runs', 1)} | {_time_cell(s)} | {_count(s['steps_to_target'])} | {_acc_cell(s)} | "
            f"{_fmt(s['best_accuracy'], '.3f')} | {s['train_wall_s']:.0f} s | "
            f"{s['tokens_screen']:.0f}/{s['tokens_continue']:.0f}/{s['tokens_full']:.0f}/{s['tokens_discarded']:.0f} | "
            f"{_fmt(s['useful_token_share'], '.2f')} | {_fmt(s['generation_tokens_per_s'], '.0f')} | "
            f"{_fmt(100 * s['curriculum_overhead_share'], '.2f')}% |"
        )
    lines = [*_start_model_lines(report), _target_line(report), "", *rows, *_runs_table(report)]
    why = report.get("speedup_notes") or {}
    sp = ", ".join(f"{k} " + (f"n/a ({why[k]})" if v is None and k in why else "n/a" if v is None else f"{v:.2f}x")
                   for k, v in report["speedups"].items())
    if sp:
        many = any(s.get("runs", 1) > 1 for s in report["summary"].values())
        lines += ["", f"speedups ({'mean ' if many else ''}time to target): {sp}"]
    rewards = {n: s.get("trained_reward_mean", float("nan")) for n, s in report["summary"].items()}
    if not all(aggregate.is_nan(v) for v in rewards.values()):
        lines += ["", "mean reward of trained groups (the paper's Fig. 4 keeps SPEED's near 0.5): " +
                  ", ".join(f"{n} {_fmt(v, '.3f')}" for n, v in rewards.items())]
    useful = {n: s["useful_tokens_per_s"] for n, s in report["summary"].items()}
    if not any(aggregate.is_nan(v) for v in useful.values()):
        lines += ["", "useful tokens per second of training clock (the mechanism of a speedup): " +
                  ", ".join(f"{n} {v:.1f}" for n, v in useful.items()) +
                  "; steps whose gradient was zero (every group's rewards equal): " +
                  ", ".join(f"{n} {_count(s['zero_gradient_steps'])}" for n, s in report["summary"].items())]
    lines += ["", "mean seconds per step (" + " / ".join(p for p, _ in _PROFILE) + "): " +
              "; ".join(f"{n} " + " / ".join(_fmt(v, ".1f") for v in s["step_profile_s"].values())
                        for n, s in report["summary"].items())]
    if report.get("evidence"):
        lines += evidence.markdown(report["evidence"])
    lines += levels.markdown(report.get("levels"))
    lines += regime.markdown(report.get("regime"), report.get("headlines") or {"speed": report.get("headline")})
    if report.get("engine"):
        e = report["engine"]
        lines += ["", f"engine limit on the same requests: {e['tokens_per_s']:.0f} tokens/s "
                      f"({e['tokens']:.0f} tokens in {e['generation_s']:.1f} s, all requests at once)"]
    if report.get("driver"):  # --driver_steps: the SPEED driver against raw vLLM (driver.py)
        lines += ["", driver.driver_line(report["driver"])]
    v = report.get("versions") or {}
    if "cpu_dtype" in v:  # which kind of CPU the timings came from
        lines += ["", f"machine: {v.get('cpus')} CPUs, {v['cpu_isa']}, {v['cpu_dtype']}"]
    if report.get("note"):
        lines += ["", f"note: {report['note']}"]
    if report.get("claims"):
        lines += ["", "the paper's claims, checked:", "", claims.claims_markdown(report["claims"])]
    return "\n".join(lines)


def _curricula(runs: dict, report: Optional[dict]) -> dict:
    """{run key: curriculum} from the report (the key itself for reports of one run each)."""
    rows = (report or {}).get("runs_summary") or {}
    return {key: rows.get(key, {}).get("curriculum", key) for key in runs}


def write_csv(runs: dict, path: str, report: Optional[dict] = None) -> None:
    curricula = _curricula(runs, report)
    keys = ["curriculum", "run", "event", "step", "train_wall_s", "eval_accuracy", "rollout/reward_mean",
            "speed/tokens_generated", "speed/useful_token_share_cum", "timing/generation", "timing/ppo_train",
            "timing_parts/curriculum_overhead"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for name, run in runs.items():
            for rec in sorted(run["steps"] + run["evals"], key=lambda r: (r["step"], r.get("event") == "eval")):
                w.writerow({"curriculum": curricula[name], "run": name, **rec})


def plot(runs: dict, report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(11, 4.2))
    curricula = _curricula(runs, report)
    colours = {c: f"C{i}" for i, c in enumerate(dict.fromkeys(curricula.values()))}
    labelled = set()
    for name, run in runs.items():
        # One colour per curriculum, its runs as separate lines, one legend entry each.
        c = curricula[name]
        style = dict(marker="o", capsize=3, color=colours[c], label=None if c in labelled else c)
        labelled.add(c)
        ev = sorted(run["evals"], key=lambda e: e["step"])
        acc = [e["eval_accuracy"] for e in ev]
        # +-1 binomial standard error: how far apart two points must be to mean anything.
        se = [0.0 if math.isnan(x) else x for x in
              (claims.binomial_se(e["eval_accuracy"], e.get("eval_num_samples", 0)) for e in ev)]
        ax_t.errorbar([e["train_wall_s"] / 60 for e in ev], acc, yerr=se, **style)
        ax_s.errorbar([e["step"] for e in ev], acc, yerr=se, **style)
    target = report.get("target_accuracy")
    for ax in (ax_t, ax_s):
        if target is not None:
            ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:.3f}")
        ax.set_ylabel("held-out accuracy (pass@1, +-1 s.e.)")
        ax.grid(alpha=0.3)
    ax_t.set_xlabel("training wall-clock (min, excl. eval/ckpt)")
    ax_s.set_xlabel("training step")
    ax_s.legend(loc="best")
    fig.suptitle("openrlhf-speed bench: accuracy vs time and vs step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(out_dir: str, runs: dict, report: dict) -> dict:
    """results.json, results.csv, summary.md, accuracy.png in out_dir; returns their paths."""
    paths = {k: os.path.join(out_dir, f) for k, f in
             (("json", "results.json"), ("csv", "results.csv"), ("md", "summary.md"), ("png", "accuracy.png"),
              ("levels_png", "speedup_levels.png"))}
    # Without the runs' step records: each run's metrics.jsonl beside it holds them (publish
    # copies both), and a copy here made results.json 50-100 times the size of its figures.
    with open(paths["json"], "w") as f:
        json.dump(report, f, indent=1, default=str)
    write_csv(runs, paths["csv"], report)
    with open(paths["md"], "w") as f:
        f.write(table_markdown(report) + "\n")
    plot(runs, report, paths["png"])
    if not levels.plot(report.get("levels"), paths["levels_png"]):
        del paths["levels_png"]
    return paths
