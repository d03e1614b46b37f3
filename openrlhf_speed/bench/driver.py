"""The SPEED driver's throughput against raw vLLM on the same requests (the
engine's limit, measured apart from training; the goal is at least 95% of the raw rate).

1. `openrlhf-speed train --train.generation_only` for K steps: the benchmark's own command
   for the `speed` curriculum (run.py's `train_command`: same model, data, sizes, seed),
   without evaluation. Every step fills its batch through the SPEED driver exactly as in
   training; nothing trains, so the policy never changes and nothing is drained between
   steps. The requests still in flight after the last step are drained and counted
   (rollout/trainer.py). `--speed.trace_path` records every request dispatched.
2. `openrlhf-speed replay` (cli/replay.py): the trace's requests (same prompt text, n, and
   sampling fields) on one raw `vllm.LLM` in a process of its own, all submitted at once.
3. driver.json and one line of summary.md:
   driver tokens/s = tokens the engines returned / seconds the driver waited for them (the
     steps' `timing/generation` plus the final drain);
   raw tokens/s = tokens generated / seconds of `LLM.generate`;
   and where the driver's seconds went (`split`, see `summarize`).

What makes the two sides differ besides the driver itself, so a ratio under 100% is not all
driver overhead: the driver can never have all its requests at once (a continuation waits for
its own screening, new prompts for room under `--speed.max_inflight_prompts`), while the raw
run batches every one from the start; its engines also tokenize each response's prompt,
score each response (the reward function runs in a thread of the engine actor) and answer
through Ray, and on a small machine the trainer, Ray and the idle actor share its cores.
Responses are sampled again in the replay, so token counts differ slightly; the comparison
is per token. The engine is the same: the replay reads the run's engine settings from the
trace, scheduler limits included (cli/replay.py).
"""

from __future__ import annotations

import json
import os
import sys

from openrlhf_speed.bench.aggregate import is_nan, sum_key

# Flags of the benchmark's train command that a generation-only run refuses (flag -> takes a value).
_EVAL_FLAGS = {"--eval.dataset": True, "--eval.at_start": False}


class TraceError(ValueError):
    """A trace that cannot be replayed; the message says why and what to do."""


def replay_requests(trace_path: str) -> dict:
    """{'config': engine settings, 'requests': [{prompt, text, n, sampling}], 'responses': sum n}
    from a `--speed.trace_path` file: one entry per dispatched request ("start", "continue",
    "regenerate" events) with the text the driver sent ("prompt" events)."""
    configs, texts, requests = [], {}, []
    with open(trace_path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            e = json.loads(line)
            if e["event"] == "config":
                configs.append(e)
            elif e["event"] == "prompt":
                texts[e["prompt"]] = e["text"]
            elif e["event"] in ("start", "continue", "regenerate"):
                if "n" not in e or "sampling" not in e:
                    raise TraceError(f"{trace_path}, line {i}: a '{e['event']}' event without n and sampling: the "
                                     "trace was written before it recorded request sizes; run the driver again")
                requests.append({"prompt": e["prompt"], "n": e["n"], "sampling": e["sampling"]})
    if len(configs) != 1:
        raise TraceError(f"{trace_path}: {len(configs)} 'config' events; a replay needs the trace of exactly one "
                         "run (a fresh --speed.trace_path file per run, written by this version)")
    if not requests:
        raise TraceError(f"{trace_path}: no request was dispatched")
    missing = sorted({r["prompt"] for r in requests} - set(texts))
    if missing:
        raise TraceError(f"{trace_path}: no 'prompt' event (the text sent) for prompt indices {missing[:5]}")
    for r in requests:
        r["text"] = texts[r["prompt"]]
    return {"config": configs[0], "requests": requests, "responses": sum(r["n"] for r in requests)}


def _records(log_path: str) -> tuple[list, dict]:
    """(step records, the final drain record) of a generation-only --log.jsonl."""
    steps, drain = [], None
    with open(log_path) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                if rec.get("event") == "drain":
                    drain = rec
                elif rec.get("event") == "step":
                    steps.append(rec)
    if not steps or drain is None:
        raise TraceError(f"{log_path}: needs the step records and the final 'drain' record of a "
                         "--train.generation_only run (was it cut short?)")
    return steps, drain


def driver_side(log_path: str) -> dict:
    """The driver's figures over all steps and the final drain (seconds and counts summed)."""
    steps, drain = _records(log_path)
    recs = steps + [drain]

    wait_s = sum_key(recs, "driver/wait_s")
    outstanding = sum(r.get("driver/outstanding_mean", 0.0) * r.get("driver/wait_s", 0.0) for r in recs
                      if not is_nan(r.get("driver/outstanding_mean", 0.0)))
    gen_s = sum_key(steps, "timing/generation")
    return {
        "steps": len(steps), "tokens": sum_key(recs, "driver/tokens_returned"),
        "responses": sum_key(recs, "driver/responses_returned"),
        "generation_s": gen_s, "drain_s": drain.get("timing_parts/drain", 0.0),
        "seconds": gen_s + drain.get("timing_parts/drain", 0.0),
        "engine_wait_s": wait_s, "overhead_s": sum_key(recs, "timing_parts/curriculum_overhead"),
        "convert_s": sum_key(recs, "timing_parts/convert"), "reward_s": sum_key(steps, "timing_parts/reward"),
        "wall_s": drain.get("train_wall_s", float("nan")),
        "outstanding_mean": outstanding / wait_s if wait_s else float("nan"),
    }


def summarize(driver: dict, raw: dict, requests: int) -> dict:
    """driver.json: both rates, their ratio and the split of the driver's seconds.

    split (seconds; the first four add up to the driver's seconds):
      engine_wait   blocked in ray.wait for an engine to answer
      overhead      the curriculum's own code (scheduler, dispatch, trace)
      convert       OpenRLHF's response -> Experience conversion (the plain generator does it too)
      other         the rest of generate_samples (Ray's transfer of the results, building the batch)
    and, not additive: at_raw_rate = driver tokens / raw rate (the seconds the engine needs for
    them with every request at once), lost = seconds - at_raw_rate; reward = the reward
    function's seconds summed over responses (inside the engine actors, overlapping
    generation); between_steps = the trainer's own code between two steps (engines keep
    generating then; not in the driver's seconds).
    """
    d_rate = driver["tokens"] / driver["seconds"] if driver["seconds"] else float("nan")
    r_rate = raw["tokens"] / raw["generation_s"] if raw["generation_s"] else float("nan")
    s = driver["seconds"]
    at_raw = driver["tokens"] / r_rate if r_rate else float("nan")
    split = {"engine_wait": driver["engine_wait_s"], "overhead": driver["overhead_s"], "convert": driver["convert_s"],
             "other": s - driver["engine_wait_s"] - driver["overhead_s"] - driver["convert_s"],
             "at_raw_rate": at_raw, "lost": s - at_raw, "reward": driver["reward_s"],
             "between_steps": driver["wall_s"] - s}
    return {"driver_tokens_per_s": d_rate, "raw_tokens_per_s": r_rate,
            "ratio_pct": 100 * d_rate / r_rate if r_rate else float("nan"), "goal_pct": 95.0,
            "requests": requests, "responses": driver["responses"], "raw_responses": raw["responses"],
            "driver": driver, "raw": raw, "split_s": split,
            "outstanding_mean": driver["outstanding_mean"], "raw_batch": raw["responses"]}


def driver_line(d: dict) -> str:
    """The summary.md lines of a driver.json."""
    head = (f"SPEED driver: {d['driver_tokens_per_s']:.0f} tok/s vs raw vLLM {d['raw_tokens_per_s']:.0f} tok/s on "
            f"the same {d['requests']} requests ({d['ratio_pct']:.1f}%; goal {d['goal_pct']:.0f}%)")
    sp, s = d["split_s"], d["driver"]["seconds"]
    pct = {k: 100 * v / s if s else float("nan") for k, v in sp.items()}
    where = (f"where the driver's {s:.1f} s went: waiting on the engines {sp['engine_wait']:.1f} s "
             f"({pct['engine_wait']:.0f}%), curriculum overhead {sp['overhead']:.2f} s ({pct['overhead']:.1f}%), "
             f"response conversion {sp['convert']:.2f} s ({pct['convert']:.1f}%), other {sp['other']:.2f} s "
             f"({pct['other']:.1f}%). At the raw rate its {d['driver']['tokens']:.0f} tokens need "
             f"{sp['at_raw_rate']:.1f} s ({sp['lost']:.1f} s lost); responses outstanding while it waited: "
             f"{d['outstanding_mean']:.1f} on average, vs {d['raw_batch']:.0f} at once in the raw run. Not in those "
             f"seconds: reward {sp['reward']:.1f} s summed over responses (in the engine actors, overlapping "
             f"generation), {sp['between_steps']:.1f} s between steps. {d['driver']['steps']} steps and the final "
             "drain")
    return head + "\n\n" + where


def generation_only_command(train_cmd: list, run_dir: str) -> list:
    """The benchmark's train command without evaluation, generating only, with a trace."""
    cmd, skip = [], 0
    for arg in train_cmd:
        if skip:
            skip -= 1
        elif arg in _EVAL_FLAGS:
            skip = int(_EVAL_FLAGS[arg])
        else:
            cmd.append(arg)
    return cmd + ["--train.generation_only", "--speed.trace_path", os.path.join(run_dir, "trace.jsonl")]


def measure(train_cmd: list, out: str, run_logged) -> dict:
    """Steps 1-3 of the module docstring in out/driver/; writes out/driver.json and returns it.
    run_logged(cmd, log_path, prefix) -> exit status (run.py's `_run_logged`)."""
    run_dir = os.path.join(out, "driver")
    os.makedirs(run_dir, exist_ok=True)
    for name in ("trace.jsonl", "metrics.jsonl"):  # both are appended to: a rerun starts fresh
        if os.path.exists(os.path.join(run_dir, name)):
            os.remove(os.path.join(run_dir, name))
    cmd = generation_only_command(train_cmd, run_dir)
    _check(run_logged(cmd, os.path.join(run_dir, "train.log"), "driver"), "generation-only run",
           os.path.join(run_dir, "train.log"))
    replay_path = os.path.join(run_dir, "replay.json")
    replay = [sys.executable, "-m", "openrlhf_speed.cli.main", "replay", "--trace",
              os.path.join(run_dir, "trace.jsonl"), "--out", replay_path]
    _check(run_logged(replay, os.path.join(run_dir, "replay.log"), "replay"), "raw vLLM replay",
           os.path.join(run_dir, "replay.log"))
    with open(replay_path) as f:
        raw = json.load(f)
    result = summarize(driver_side(os.path.join(run_dir, "metrics.jsonl")), raw, raw["requests"])
    result["command"] = cmd
    with open(os.path.join(out, "driver.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


def _check(rc: int, what: str, log: str) -> None:
    if rc != 0:
        raise SystemExit(f"openrlhf-speed bench: error: the driver measurement's {what} failed (exit {rc}); see {log}")
