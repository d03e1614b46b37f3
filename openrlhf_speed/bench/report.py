"""Figures of a benchmark from the runs' `--log.jsonl` files: time to target accuracy,
speedups, token accounting, curriculum overhead, and the plots.

Everything here is a pure function of the run logs, so a report can be rebuilt from a
benchmark folder (`openrlhf-speed bench --report_only DIR`) without training again.

Definitions:
- accuracy: `eval_accuracy`, mean reward over all held-out samples (pass@1);
- time: `train_wall_s`, the training clock without evaluation and checkpointing;
- time to target: the clock at the first evaluation whose accuracy >= target (no
  interpolation between evaluations, so it is an upper bound by at most one eval period);
- target "auto": the highest accuracy every curriculum reached, i.e. the minimum over
  curricula of their best evaluation after step 0, so every curriculum gets a time;
- useful-token share: tokens of trained groups whose rewards are not all equal / tokens
  generated (`speed/useful_token_share_cum` of the last step);
- curriculum overhead share: driver time outside generation, reward and training
  (`timing_parts/curriculum_overhead`) / the training clock;
- claims: the paper's, each met / missed / not measurable, with the arithmetic of a miss
  (claims.py); the plot's error bars are +-1 binomial standard error of each evaluation.
"""

from __future__ import annotations

import csv
import json
import math
import os
from typing import Optional

from openrlhf_speed.bench import claims as cl


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


def _sum(steps: list, key: str) -> float:
    return float(sum(s.get(key, 0.0) for s in steps if not _nan(s.get(key, 0.0))))


def _nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)


def time_to_target(evals: list, target: float) -> tuple[Optional[float], Optional[int]]:
    """(train_wall_s, step) of the first evaluation reaching the target, or (None, None)."""
    for e in sorted(evals, key=lambda e: e["step"]):
        if e["eval_accuracy"] >= target:
            return e["train_wall_s"], int(e["step"])
    return None, None


def auto_target(runs: dict) -> Optional[float]:
    bests = [max((e["eval_accuracy"] for e in r["evals"] if e["step"] > 0), default=None) for r in runs.values()]
    bests = [b for b in bests if b is not None]
    return min(bests) if bests and len(bests) == len(runs) else None


def run_summary(run: dict, target: Optional[float]) -> dict:
    steps, evals = run["steps"], run["evals"]
    last = steps[-1] if steps else {}
    wall = last.get("train_wall_s", 0.0)
    gen_s = _sum(steps, "timing/generation")
    tokens = {p: _sum(steps, f"speed/tokens_{p}") for p in ("screen", "continue", "full", "discarded", "generated")}
    evals = sorted(evals, key=lambda e: e["step"])
    t_target, s_target = time_to_target(evals, target) if target is not None else (None, None)
    start = evals[0] if evals and evals[0]["step"] == 0 else {}
    final = evals[-1] if evals else {}
    share = last.get("speed/useful_token_share_cum", float("nan"))
    overhead_s = _sum(steps, "timing_parts/curriculum_overhead")
    screened, qualified = _sum(steps, "speed/prompts_screened"), _sum(steps, "speed/prompts_qualified")
    return {
        "steps": len(steps),
        "train_wall_s": wall,
        "step_s_mean": wall / len(steps) if steps else float("nan"),
        "start_accuracy": start.get("eval_accuracy", float("nan")),
        "start_accuracy_se": cl.binomial_se(start.get("eval_accuracy"), start.get("eval_num_samples", 0)),
        "final_accuracy": final.get("eval_accuracy", float("nan")),
        "final_accuracy_se": cl.binomial_se(final.get("eval_accuracy"), final.get("eval_num_samples", 0)),
        "best_accuracy": max((e["eval_accuracy"] for e in evals), default=float("nan")),
        "time_to_target_s": t_target,
        "steps_to_target": s_target,
        "tokens_screen": tokens["screen"],
        "tokens_continue": tokens["continue"],
        "tokens_full": tokens["full"],
        "tokens_discarded": tokens["discarded"],
        "tokens_generated": tokens["generated"],
        "useful_token_share": share,
        # The mechanism behind a speedup, measurable even when accuracy has not moved yet:
        # tokens of groups that carry a gradient, per second of training clock.
        "useful_tokens_per_s": share * tokens["generated"] / wall if wall else float("nan"),
        "zero_gradient_steps": sum(1 for st in steps if st.get("actor_grad_norm", 1.0) == 0.0),
        "prompts_screened": screened,
        "qualification_rate": qualified / screened if screened else float("nan"),
        "generation_s": gen_s,
        "generation_tokens_per_s": tokens["generated"] / gen_s if gen_s else float("nan"),
        "train_s": _sum(steps, "timing/ppo_train"),
        "curriculum_overhead_s": overhead_s,
        "curriculum_overhead_share": overhead_s / wall if wall else float("nan"),
        "eval_s": _sum(evals, "eval_time_s"),
        # Where a step's time goes (the profile of a miss): mean seconds per step.
        "step_profile_s": {part: _sum(steps, key) / len(steps) if steps else float("nan")
                           for part, key in _PROFILE},
    }


def speedups(summary: dict, ours: str = "speed", baselines=("uniform", "dapo")) -> dict:
    """time_to_target(baseline) / time_to_target(ours), for the baselines that were run."""
    out = {}
    t_ours = summary.get(ours, {}).get("time_to_target_s")
    for b in baselines:
        t_b = summary.get(b, {}).get("time_to_target_s")
        if b in summary and ours in summary:
            out[f"{ours}_over_{b}"] = (t_b / t_ours) if (t_b and t_ours) else None
    return out


def build_report(runs: dict, target: Optional[float], settings: Optional[dict] = None) -> dict:
    chosen = target if target is not None else auto_target(runs)
    summary = {name: run_summary(run, chosen) for name, run in runs.items()}
    starts = [s["start_accuracy"] for s in summary.values() if not _nan(s["start_accuracy"])]
    note = None
    if chosen is None:
        note = "no target: some curriculum has no evaluation after step 0"
    elif target is None and starts and chosen <= max(starts):
        note = (f"auto target {chosen:.4f} is not above the step-0 accuracy ({max(starts):.4f}): not every curriculum "
                "improved in this budget, so times to target are not meaningful; run longer (more --steps)")
    noise = max((2 * s["start_accuracy_se"] for s in summary.values() if not _nan(s["start_accuracy_se"])),
                default=float("nan"))
    within_noise = note is None and chosen is not None and starts and chosen - max(starts) < noise
    if within_noise:
        # A target this close to where every run started can be reached by sampling noise
        # alone: a time to it says nothing about the curriculum.
        note = (f"target {chosen:.4f} is within two standard errors ({noise:.3f}) of the step-0 accuracy "
                f"({max(starts):.4f}): reaching it can be evaluation noise, so times to target and speedups are not "
                "evidence; evaluate on more prompts (--eval_prompts, --eval_k) or train longer (--steps)")
    report = {"target_accuracy": chosen, "target_mode": "auto" if target is None else "fixed", "note": note,
              "target_within_noise": bool(within_noise), "summary": summary, "speedups": speedups(summary)}
    report["claims"] = cl.check(report, settings)
    return report


def _fmt(x, spec: str, none: str = "not reached") -> str:
    if x is None:
        return none
    if _nan(x):
        return "n/a"
    return format(x, spec)


def table_markdown(report: dict) -> str:
    rows = ["| curriculum | steps | time to target | steps to target | final acc | best acc | train time | "
            "tokens screen/continue/full/discarded | useful-token share | gen tok/s | overhead |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in report["summary"].items():
        ttt = _fmt(s["time_to_target_s"], ".0f")
        rows.append(
            f"| {name} | {s['steps']} | {ttt if ttt == 'not reached' else ttt + ' s'} | "
            f"{_fmt(s['steps_to_target'], 'd', '-')} | {_fmt(s['final_accuracy'], '.3f')} | "
            f"{_fmt(s['best_accuracy'], '.3f')} | {s['train_wall_s']:.0f} s | "
            f"{s['tokens_screen']:.0f}/{s['tokens_continue']:.0f}/{s['tokens_full']:.0f}/{s['tokens_discarded']:.0f} | "
            f"{_fmt(s['useful_token_share'], '.2f')} | {_fmt(s['generation_tokens_per_s'], '.0f')} | "
            f"{_fmt(100 * s['curriculum_overhead_share'], '.2f')}% |"
        )
    lines = [f"target accuracy {_fmt(report['target_accuracy'], '.4f', 'none')} ({report['target_mode']})", "", *rows]
    sp = ", ".join(f"{k} " + ("n/a" if v is None else f"{v:.2f}x") for k, v in report["speedups"].items())
    if sp:
        lines += ["", f"speedups (time to target): {sp}"]
    useful = {n: s["useful_tokens_per_s"] for n, s in report["summary"].items()}
    if not any(_nan(v) for v in useful.values()):
        lines += ["", "useful tokens per second of training clock (the mechanism of a speedup): " +
                  ", ".join(f"{n} {v:.1f}" for n, v in useful.items()) +
                  "; steps whose gradient was zero (every group's rewards equal): " +
                  ", ".join(f"{n} {s['zero_gradient_steps']}" for n, s in report["summary"].items())]
    lines += ["", "mean seconds per step (" + " / ".join(p for p, _ in _PROFILE) + "): " +
              "; ".join(f"{n} " + " / ".join(_fmt(v, ".1f") for v in s["step_profile_s"].values())
                        for n, s in report["summary"].items())]
    if report.get("engine"):
        e = report["engine"]
        lines += ["", f"engine limit on the same requests: {e['tokens_per_s']:.0f} tokens/s "
                      f"({e['tokens']:.0f} tokens in {e['generation_s']:.1f} s, all requests at once)"]
    v = report.get("versions") or {}
    if "cpu_dtype" in v:  # which kind of CPU the timings came from
        lines += ["", f"machine: {v.get('cpus')} CPUs, {v['cpu_isa']}, {v['cpu_dtype']}"]
    if report.get("note"):
        lines += ["", f"note: {report['note']}"]
    if report.get("claims"):
        lines += ["", "the paper's claims, checked:", "", cl.claims_markdown(report["claims"])]
    return "\n".join(lines)


def write_csv(runs: dict, path: str) -> None:
    keys = ["curriculum", "event", "step", "train_wall_s", "eval_accuracy", "rollout/reward_mean",
            "speed/tokens_generated", "speed/useful_token_share_cum", "timing/generation", "timing/ppo_train",
            "timing_parts/curriculum_overhead"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for name, run in runs.items():
            for rec in sorted(run["steps"] + run["evals"], key=lambda r: (r["step"], r.get("event") == "eval")):
                w.writerow({"curriculum": name, **rec})


def plot(runs: dict, report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, run in runs.items():
        ev = sorted(run["evals"], key=lambda e: e["step"])
        acc = [e["eval_accuracy"] for e in ev]
        # +-1 binomial standard error: how far apart two points must be to mean anything.
        se = [0.0 if math.isnan(x) else x for x in
              (cl.binomial_se(e["eval_accuracy"], e.get("eval_num_samples", 0)) for e in ev)]
        ax_t.errorbar([e["train_wall_s"] / 60 for e in ev], acc, yerr=se, marker="o", capsize=3, label=name)
        ax_s.errorbar([e["step"] for e in ev], acc, yerr=se, marker="o", capsize=3, label=name)
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
             (("json", "results.json"), ("csv", "results.csv"), ("md", "summary.md"), ("png", "accuracy.png"))}
    with open(paths["json"], "w") as f:
        json.dump({**report, "runs": runs}, f, indent=1, default=str)
    write_csv(runs, paths["csv"])
    with open(paths["md"], "w") as f:
        f.write(table_markdown(report) + "\n")
    plot(runs, report, paths["png"])
    return paths
