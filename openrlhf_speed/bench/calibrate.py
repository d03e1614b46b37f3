"""Whether a proving-ground horizon sits in the paper's regime, read off `off` runs alone
(`openrlhf-speed proving-ground calibrate`), before any curriculum is compared on it.

The criteria (docs/benchmarks.md, "Proving ground v5"):
- the horizon H: at least 100 steps, so a 10-step lr warm-up is at most 10% of it;
- stock OpenRLHF still learning at the end: its held-out accuracy rises over the last quarter
  of H by more than twice the seeds' spread. Per run the rise is the mean of the last two
  evaluations (the `off_final` rule) minus the mean of the two evaluations ending at 3H/4; the
  spread is the standard deviation over seeds of the final accuracy;
- a frontier that moves: per-prompt pass rates on the RL split (difficulty.json files from
  `proving-ground difficulty --model <checkpoint>`) at steps 0, H/2 and H, compared prompt by
  prompt: how many enter the intermediate band (0 < pass < 1, where a group's rewards differ
  and RLOO has a gradient) and how many leave it;
- every run's training clock (evaluations excluded) under 25 minutes.

Nothing here reads a curriculum other than `off`: the other run folders of a bench folder are
skipped unread (and named), so the calibration cannot look at SPEED.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from openrlhf_speed.bench.levels import final_accuracy
from openrlhf_speed.bench.report import load_run

MIN_HORIZON = 100
CLOCK_BUDGET_S = 25 * 60


def _mean_at(evals: list, end_step: float) -> float:
    """Mean accuracy of the two evaluations after step 0 ending at `end_step` (the nearest at or
    before it): the bench's `off_final` rule (levels.final_accuracy) cut at that step."""
    upto = [e for e in evals if 0 < e["step"] <= end_step + 1e-9]
    if len(upto) < 2:
        raise ValueError(f"fewer than two evaluations up to step {end_step:g}")
    return final_accuracy(upto)


def read_runs(runs_dir: Path) -> tuple[list[dict], list[str]]:
    """The `off` runs of a bench folder (per run its seed, evaluations and training clock), and
    the names of the other run folders, skipped unread."""
    runs_dir = Path(runs_dir)
    bench = json.loads((runs_dir / "bench.json").read_text()) if (runs_dir / "bench.json").is_file() else {}
    plan = {p["key"]: p for p in bench.get("plan", [])}
    out, skipped = [], []
    for folder in sorted(p for p in runs_dir.iterdir() if (p / "metrics.jsonl").is_file()):
        planned = plan.get(folder.name, {})
        # The plan names each run's curriculum; the folder name is the fallback for a hand-made folder.
        curriculum = planned.get("curriculum") or folder.name.rsplit("-r", 1)[0]
        if curriculum != "off":
            skipped.append(folder.name)
            continue
        run = load_run(str(folder / "metrics.jsonl"))
        evals = sorted({e["step"]: e for e in run["evals"]}.values(), key=lambda e: e["step"])  # one per step
        if not evals:
            raise ValueError(f"{folder / 'metrics.jsonl'} has no evaluation: is the run finished?")
        # The last step's clock, as the bench report reads it, so both documents print one figure.
        wall = run["steps"][-1].get("train_wall_s", 0.0) if run["steps"] else 0.0
        out.append({"key": folder.name, "seed": planned.get("seed"), "evals": evals,
                    "train_wall_s": wall})
    if not out:
        raise ValueError(f"{runs_dir} holds no `off` run folder with a metrics.jsonl"
                         + (f" (skipped, not `off`: {', '.join(skipped)})" if skipped else ""))
    return out, skipped


def frontier(tables: list[tuple[int, dict]]) -> dict:
    """Per-prompt pass rates at each step (difficulty.json records), on the prompts common to
    all: the never / some / always shares, and prompt by prompt between consecutive steps, how
    many entered and left the intermediate band."""
    def state(solved: int, k: int) -> str:
        return "never" if solved == 0 else "always" if solved == k else "some"

    common = set.intersection(*(set(t["ids"]) for _, t in tables))
    if not common:
        raise ValueError("the difficulty tables share no prompt id: measure them on the same --variant and --prompts")
    per_step = []
    for step, t in sorted(tables, key=lambda x: x[0]):
        by_id = {i: s for i, s in zip(t["ids"], t["solved_per_prompt"]) if i in common}
        states = {i: state(s, t["samples"]) for i, s in by_id.items()}
        n = len(states)
        per_step.append({"step": step, "prompts": n, "samples": t["samples"],
                         **{k: round(sum(v == k for v in states.values()) / n, 3) for k in ("never", "some", "always")},
                         "pass_rate": round(sum(by_id.values()) / (n * t["samples"]), 4), "_states": states})
    moves = []
    for a, b in zip(per_step, per_step[1:]):
        pairs = [(a["_states"][i], b["_states"][i]) for i in common]
        moves.append({"from": a["step"], "to": b["step"],
                      "entered": sum(x != "some" and y == "some" for x, y in pairs),
                      "left_solved": sum(x == "some" and y == "always" for x, y in pairs),
                      "left_unsolved": sum(x == "some" and y == "never" for x, y in pairs),
                      "stayed": sum(x == "some" and y == "some" for x, y in pairs)})
    for s in per_step:
        del s["_states"]
    return {"prompts": len(common), "steps": per_step, "moves": moves}


def calibrate(runs_dir: Path, tables: list[tuple[int, dict]] | None = None) -> dict:
    runs, skipped = read_runs(runs_dir)
    horizon = min(r["evals"][-1]["step"] for r in runs)
    quarter = horizon * 3 / 4
    for r in runs:
        r["final"] = _mean_at(r["evals"], horizon)
        r["at_three_quarters"] = _mean_at(r["evals"], quarter)
        r["rise"] = r["final"] - r["at_three_quarters"]
    finals = [r["final"] for r in runs]
    # One seed has no spread to compare the rise with: None (JSON null), and the check is not met.
    spread = statistics.stdev(finals) if len(finals) > 1 else None
    rise = statistics.mean(r["rise"] for r in runs)
    slowest = max(r["train_wall_s"] for r in runs)
    checks = {
        "horizon": {"value": horizon, "pass": horizon >= MIN_HORIZON, "rule": f"H >= {MIN_HORIZON} steps"},
        "still_learning": {"value": rise, "spread": spread, "pass": bool(spread is not None and rise > 2 * spread),
                           "rule": "mean rise over the last quarter > 2 x the seeds' spread of the final accuracy"},
        "clock": {"value": slowest, "budget_s": CLOCK_BUDGET_S, "pass": slowest < CLOCK_BUDGET_S,
                  "rule": f"every run's training clock < {CLOCK_BUDGET_S / 60:.0f} min (evaluations excluded)"},
    }
    out = {"runs": [{k: r[k] for k in ("key", "seed", "final", "at_three_quarters", "rise", "train_wall_s")}
                    | {"curve": [[e["step"], e["eval_accuracy"]] for e in r["evals"]]} for r in runs],
           "horizon": horizon, "off_final": statistics.mean(finals), "checks": checks, "skipped_unread": skipped}
    if tables:
        f = frontier(tables)
        moved = sum(m["entered"] + m["left_solved"] + m["left_unsolved"] for m in f["moves"])
        checks["frontier_moves"] = {
            "value": moved, "pass": all(m["entered"] > 0 and m["left_solved"] > 0 for m in f["moves"]),
            "rule": "between consecutive checkpoints prompts enter the band and leave it solved"}
        out["frontier"] = f
    return out


def format_calibration(c: dict) -> str:
    skipped = f" (other curricula skipped unread: {', '.join(c['skipped_unread'])})" if c["skipped_unread"] else ""
    lines = [f"`off` runs: {len(c['runs'])}, horizon {c['horizon']:g} steps; off_final {c['off_final']:.4f}{skipped}",
             "",
             "| run | seed | accuracy at 0 | at H/2 | at 3H/4 (2 evals) | final (2 evals) | rise, last quarter | "
             "training clock |", "|---|---|---|---|---|---|---|---|"]
    for r in c["runs"]:
        curve = dict((s, a) for s, a in r["curve"])
        half = curve.get(c["horizon"] / 2, math.nan)
        lines.append(f"| {r['key']} | {r['seed']} | {curve.get(0.0, math.nan):.4f} | {half:.4f} | "
                     f"{r['at_three_quarters']:.4f} | {r['final']:.4f} | {r['rise']:+.4f} | "
                     f"{r['train_wall_s'] / 60:.1f} min |")
    lines += ["", "| criterion | figure | met |", "|---|---|---|"]
    for name, ch in c["checks"].items():
        if name == "still_learning":
            fig = (f"rise {ch['value']:+.4f} against 2 x spread {2 * ch['spread']:.4f}" if ch["spread"] is not None
                   else f"rise {ch['value']:+.4f}; one seed has no spread (the check needs 2 or more)")
        elif name == "clock":
            fig = f"slowest {ch['value'] / 60:.1f} min"
        else:
            fig = f"{ch['value']:g}"
        lines.append(f"| {ch['rule']} | {fig} | {'yes' if ch['pass'] else 'NO'} |")
    if "frontier" in c:
        f = c["frontier"]
        lines += ["", f"Frontier on {f['prompts']} RL prompts (pass rate at {f['steps'][0]['samples']} samples):", "",
                  "| step | never solved | intermediate | always solved | mean pass rate |", "|---|---|---|---|---|"]
        lines += [f"| {s['step']} | {s['never']:.3f} | {s['some']:.3f} | {s['always']:.3f} | {s['pass_rate']:.3f} |"
                  for s in f["steps"]]
        lines += ["", "| steps | entered the band | left it solved | left it unsolved | stayed in it |",
                  "|---|---|---|---|---|"]
        lines += [f"| {m['from']} -> {m['to']} | {m['entered']} | {m['left_solved']} | {m['left_unsolved']} | "
                  f"{m['stayed']} |" for m in f["moves"]]
    return "\n".join(lines)
