"""The benchmark's evidence beside its table: time to target read between evaluations, a
bootstrap 95% interval of every speedup ratio ("not resolved" when it holds 1), the
mechanism per run and a GPU projection of each run's clock (aggregate.py's pure functions).

Ratios: each curriculum of ours (OURS, with its N_init variant `speed@8` or tails `+level`)
over each of `off`, `uniform`, `dapo`, from the interpolated training clock to the target,
measured on this machine and projected. A run that did not reach the target counts its whole
clock: a floor on a baseline's side, a ceiling on ours (aggregate.censored_ratio).

Projection, labelled as such: the tokens each run generated and trained on, priced so that
stock OpenRLHF's (`off`'s, else uniform's) generation costs 2x its training per step (the
paper's Fig. 2, right: inference dominates a GPU step), in seconds of its measured training
per trained token (cost_model).
"""

from __future__ import annotations

import statistics
from typing import Optional

from openrlhf_speed.bench import aggregate
from openrlhf_speed.curriculum import payoff

OURS = ("speed", "greso", "speed_bayes", "speed_seq", "speed_thin", "speed_keep")
BASELINES = aggregate.BASELINES  # one list for the speedups line, the claims and the intervals
ANCHORS = ("off", "uniform")
# Host speed indices of the runs farther apart than this make their clocks hard to compare.
HOST_SPREAD_WARN = 1.10


def is_ours(curriculum: str) -> bool:
    """A curriculum whose speedup is reported: one of OURS, or one with another N_init (speed@8) or
    a prior key (speed_seq+level)."""
    return curriculum.split("@")[0].split("+")[0] in OURS


def host_speed(evals: list) -> Optional[float]:
    """The host's speed during a run: the median engine throughput (generated tokens per second)
    of its held-out evaluations after the first, which pays the engine's warm-up. Every run
    evaluates the same prompts off the clock, so this is one fixed workload measured beside
    each run. On a shared host it measured 1.57x between two runs of one day, 06:40 and 10:00
    (median evaluation 16.6 s against 26.0 s, the same 1,200 prompts and mean length)."""
    rates = [float(e["eval_num_samples"]) * float(e["eval_response_length_mean"]) / float(e["eval_time_s"])
             for e in evals[1:] if e.get("eval_time_s") and e.get("eval_num_samples")
             and e.get("eval_response_length_mean") is not None]
    return statistics.median(rates) if rates else None


def with_tokens(steps: list, responses: int) -> list:
    """Step records with speed/tokens_generated, _full and _trained, filled in for `off` runs
    that predate its token counts, from OpenRLHF's mean response length x the step's responses
    (every one is a full group)."""
    out = []
    for st in steps:
        if "speed/tokens_generated" not in st and "rollout/response_length_mean" in st and responses:
            tokens = float(st["rollout/response_length_mean"]) * responses
            st = {**st, "speed/tokens_generated": tokens, "speed/tokens_full": tokens, "speed/tokens_trained": tokens}
        out.append(st)
    return out


def anchor(groups: dict) -> Optional[str]:
    """The curriculum whose step the projection prices at GEN_OVER_TRAIN: stock OpenRLHF's
    (`off`) where it ran, as the paper's 2:1 and `advise` describe it, else uniform."""
    present = set(groups.values())
    return next((c for c in ANCHORS if c in present), None)


def cost_model(runs: dict, groups: dict, responses: int) -> Optional[dict]:
    """{'anchor', 'ratio', 's_per_train_token', 'gen_over_train', 'measured_ratio'} from the
    anchor's runs (payoff.step_totals: training = experience + update + weight sync), None
    without any. 'measured_ratio' is this machine's, as `advise --from_run` reads it."""
    name = anchor(groups)
    steps = [st for k, r in runs.items() if groups.get(k, k) == name for st in with_tokens(r["steps"], responses)]
    t = payoff.step_totals(steps)
    gen, trained, train_s = t["tokens_generated"], t["tokens_trained"], t["training_s"]
    if not steps or not gen or not trained or not train_s:
        return None
    measured = payoff.cost_ratio_from_steps(steps)["ratio"] if t["generation_s"] > 0 else None
    return {"anchor": name, "ratio": aggregate.cost_ratio(gen / len(steps), trained / len(steps)),
            "s_per_train_token": train_s / trained, "gen_over_train": aggregate.GEN_OVER_TRAIN,
            "measured_ratio": measured}


def projection(runs: dict, groups: dict, responses: int) -> tuple[Optional[dict], dict]:
    """(cost model, {run key: cumulative projected clock per step}): the per-token GPU projection
    of every run, computed once for the evidence (per_run) and the level table
    (levels.clock_sets' projected_linear); (None, {}) without a cost model."""
    model = cost_model(runs, groups, responses)
    if not model:
        return None, {}
    return model, {key: aggregate.projected_clock(with_tokens(run["steps"], responses), model["ratio"],
                                                  model["s_per_train_token"]) for key, run in runs.items()}


def per_run(runs: dict, groups: dict, target: Optional[float], responses: int, clocks: dict) -> dict:
    """{run key: interpolated and grid time/step to target, projected clocks, mechanism};
    clocks: projection's, {} without a cost model."""
    rows = {}
    for key, run in runs.items():
        steps = with_tokens(run["steps"], responses)
        t, step = aggregate.interpolate_to_target(run["evals"], target) if target is not None else (None, None)
        row = {"curriculum": groups.get(key, key), "time_to_target_interp_s": t, "steps_to_target_interp": step,
               "measured_total_s": aggregate.whole_clock(run["evals"]),
               "host_eval_tok_s": host_speed(run["evals"]), **aggregate.mechanism(steps)}
        if key in clocks:
            clock = clocks[key]
            row.update(projected_total_s=clock[-1], projected_time_to_target_s=aggregate.clock_at_step(clock, step))
        rows[key] = row
    return rows


def intervals(rows: dict, key: str, whole: str) -> dict:
    """{'ours_over_base': aggregate.censored_ratio's cell} for the time field key; a run under
    the target is priced at its whole clock (the field whole), which makes the ratio a floor
    or a ceiling as the levels' table and the regime map print it."""
    by = {}
    for r in rows.values():
        t = r.get(key)
        censored = t is None and r.get(whole) is not None
        by.setdefault(r["curriculum"], []).append(("censored", r[whole]) if censored else t)
    out = {}
    for ours in (c for c in by if is_ours(c)):
        for base in (b for b in aggregate.same_driver(ours, BASELINES) if b in by):
            out[f"{ours}_over_{base}"] = aggregate.censored_ratio(by[base], by[ours])
    return out


def build(runs: dict, groups: dict, target: Optional[float], settings: Optional[dict],
          projected: tuple[Optional[dict], dict]) -> dict:
    """The evidence section of results.json; projected: projection's (model, clocks)."""
    s = settings or {}
    responses = int(s.get("batch", 0) or 0) * int(s.get("n", 0) or 0)
    model, clocks = projected
    rows = per_run(runs, groups, target, responses, clocks)
    hosts = [r["host_eval_tok_s"] for r in rows.values() if r.get("host_eval_tok_s")]
    return {"runs": rows, "cost_model": model,
            "host_spread": max(hosts) / min(hosts) if hosts else None,
            "intervals_measured": intervals(rows, "time_to_target_interp_s", "measured_total_s"),
            "intervals_projected": intervals(rows, "projected_time_to_target_s", "projected_total_s") if model else {},
            "bootstrap": {"reps": aggregate.B_REPS, "seed": aggregate.B_SEED, "level": 0.95}}


def _cell(ci: dict) -> str:
    if "point" not in ci:
        return ci["verdict"]
    mark = aggregate.bound(ci)
    if "low" not in ci:
        return f"{mark}{ci['point']:.2f}x, {ci['verdict']}"
    return f"{mark}{ci['point']:.2f}x [{ci['low']:.2f}-{ci['high']:.2f}] {ci['verdict']}"


def _f(x, spec: str) -> str:
    return "-" if x is None or aggregate.is_nan(x) else format(x, spec)


def markdown(ev: dict) -> list:
    """Lines of the report: intervals, then one row per run with the mechanism and projection."""
    lines = ["", "speedup, interpolated training clock to target, bootstrap 95% interval "
             f"({ev['bootstrap']['reps']} resamples of each curriculum's runs, seed {ev['bootstrap']['seed']}):"]
    lines += [f"- {k}: measured {_cell(v)}" + (f"; GPU projection {_cell(ev['intervals_projected'][k])}"
                                               if k in ev["intervals_projected"] else "")
              for k, v in ev["intervals_measured"].items()] or ["- none (needs speed/greso/speed_bayes and a baseline)"]
    m = ev["cost_model"]
    if m:
        lines += ["", f"GPU projection (a model, not a measurement): a run's clock = {m['s_per_train_token']:.3g} s x "
                  f"(trained tokens + {m['ratio']:.2f} x generated tokens), the ratio set so that uniform's generation "
                  f"costs {m['gen_over_train']:g}x its training per step (paper Fig. 2, right)"]
    spread = ev.get("host_spread")
    if spread is not None:
        lines += ["", f"host speed (median evaluation tok/s, the same prompts in every run): fastest run / slowest "
                  f"{spread:.2f}" + (f", over {HOST_SPREAD_WARN:.2f}: the host's own speed moved between runs, and "
                                     "a measured clock ratio carries it; compare steps, tokens and the projection"
                                     if spread > HOST_SPREAD_WARN else "")]
    lines += ["", "| run | curriculum | time to target interp (grid in the table above) | steps to target | "
              "projected time to target | tokens/step screen/continue/full/discarded | qualification | "
              "zero-variance share | grad norm | trained acc | gen tok/s | host eval tok/s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, r in ev["runs"].items():
        tok = "/".join(_f(r.get(f"tokens_per_step_{p}"), ".0f") for p in ("screen", "continue", "full", "discarded"))
        lines.append(f"| {key} | {r['curriculum']} | {_f(r['time_to_target_interp_s'], '.1f')} s | "
                     f"{_f(r['steps_to_target_interp'], '.1f')} | {_f(r.get('projected_time_to_target_s'), '.1f')} s | "
                     f"{tok} | {_f(r.get('qualification_rate'), '.2f')} | {_f(r.get('zero_variance_share'), '.2f')} | "
                     f"{_f(r.get('grad_norm_mean'), '.3f')} | {_f(r.get('trained_accuracy_mean'), '.3f')} | "
                     f"{_f(r.get('generation_tokens_per_s'), '.0f')} | {_f(r.get('host_eval_tok_s'), '.0f')} |")
    return lines
