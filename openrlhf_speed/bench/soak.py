"""`openrlhf-speed soak` (`make soak`): a long run on the proving model, watched for drift.

Each curriculum (default speed, greso, speed_bayes: the last two keep per-prompt history)
trains `--steps` steps with the CPU recipe's batch shape and a checkpoint every `--every`
steps, on the first `--prompts` RL prompts, few enough that the prompt set wraps many times.
At every `--every` steps it records, from outside the run (bench/probe.py): resident memory
of the driver (our trainer, where the curriculum lives), the actor, the reference model, each
engine and vLLM's workers, and the Ray object store; the step time and its parts over the
window; the sizes of the trace and the log, and of the checkpoint of that step with the
curriculum state inside it (its parts, buffer, in-flight prompts, epoch).

The growth check compares the record at `--ref_fraction` of the run (step 200 of 1,000) with
the last. A figure may not grow by more than 10%; the trace and the log grow by nature, so
their bytes per step are compared; the step time may not grow beyond the host's noise (two
standard errors of the difference of the two windows' means). A flagged figure is named in
the report; it must be explained there, bounded and documented, or fixed.

The learning rate is 1e-6: the policy barely moves, so the workload stays the same from the
first step to the last and a drift can only come from the machinery, not from the curriculum
adapting to a policy that learns. Not in CI: 1,000 steps x 3 curricula take hours.

Output (`--out`): <curriculum>/ (train.log, metrics.jsonl, trace.jsonl, ckpt/, samples.jsonl,
done.json), soak.json (every record and verdict), soak.md, soak.png. `--publish DIR` copies
soak.json there, `--publish_docs DIR` soak.md and soak.png. Rerun the same command to go on
after an interruption: finished curricula are skipped, a stopped one resumes from its checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid

from openrlhf_speed.bench import probe

PRESETS = {
    # The CPU recipe's batch shape (B 8 x N 8, N_init 4, one optimizer step of 64) on the
    # proving model, whose steps take seconds on 2 cores.
    "cpu": dict(model="proving", batch=8, n=8, n_init=4, max_new_tokens=64, steps=1000, every=50, prompts=256),
    # Tests: the whole path in a few minutes.
    "tiny": dict(model="proving-ci", batch=4, n=4, n_init=2, max_new_tokens=32, steps=4, every=2, prompts=16),
}
GROWTH_LIMIT = 0.10
# Work per step (bench/soak.workload); reported beside the growth check, never flagged.
WORK = ("speed/tokens_generated", "speed/tokens_trained", "rollout/response_length_mean")
NOISE_SE = 2.0
LR = 1e-6


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=sorted(PRESETS), default="cpu", help="size preset (flags below override it)")
    p.add_argument("--curricula", default="speed,greso,speed_bayes", help="comma-separated --speed.strategy values")
    p.add_argument("--steps", type=int, default=None, help="training steps per curriculum (cpu: 1000)")
    p.add_argument("--every", type=int, default=None, help="record and checkpoint every this many steps (cpu: 50)")
    p.add_argument("--prompts", type=int, default=None, help="RL prompts used, so the set wraps (cpu: 256)")
    p.add_argument("--model", default=None, help="a proving-ground name, whose RL prompts it trains on (cpu: proving)")
    p.add_argument("--ref_fraction", type=float, default=0.2,
                   help="the growth check's reference record: the first at this fraction of the steps (0.2)")
    p.add_argument("--out", default="runs/soak", help="output folder (default runs/soak)")
    p.add_argument("--publish", default=None, help="copy soak.json into this folder")
    p.add_argument("--publish_docs", default=None, help="copy soak.md and soak.png into this folder")
    p.add_argument("--report_only", action="store_true", help="rebuild the report from --out's samples, run nothing")
    p.add_argument("train_args", nargs="*", help="after '--': flags for every `openrlhf-speed train` run")
    return p


def settings(args) -> dict:
    s = dict(PRESETS[args.mode])
    for key in ("steps", "every", "prompts", "model"):
        if getattr(args, key) is not None:
            s[key] = getattr(args, key)
    if s["steps"] < 1 or s["every"] < 1 or s["prompts"] < s["batch"]:
        raise SystemExit(f"openrlhf-speed soak: error: --steps and --every must be >= 1 and --prompts >= the batch "
                         f"({s['batch']}); got {s['steps']}, {s['every']}, {s['prompts']}")
    return s


def prompt_file(model: str, n: int, out: str) -> str:
    """The first n RL prompts of a proving-ground model (or --data.prompt_dataset's file)."""
    from openrlhf_speed import proving

    if not proving.is_proving(model):
        raise SystemExit("openrlhf-speed soak: error: --model must be a proving-ground name (proving, proving-ci): "
                         "its RL prompts are what the soak trains on")
    src = proving.data_paths(model)[0]
    dst = os.path.join(out, f"prompts_{n}.jsonl")
    with open(src) as f:
        rows = [line for line in f if line.strip()][:n]
    if len(rows) < n:
        raise SystemExit(f"openrlhf-speed soak: error: --prompts {n}, but {src} has {len(rows)} prompts")
    if os.path.isfile(dst) and open(dst).read() == "".join(rows):
        return dst  # left untouched, so a rerun that resumes finds the dataset it checked (data/check_cache.py)
    with open(dst, "w") as f:
        f.writelines(rows)
    return dst


def train_command(strategy: str, s: dict, data: str, run_dir: str, extra: list) -> list:
    """The CPU recipe's flags with the soak's sizes; later flags (extra) win."""
    from openrlhf_speed.curriculum import STRATEGIES

    # Enough epochs for any qualification rate (8 screenings per trained prompt), three times over:
    # speed_bayes also skips the prompts it predicts all-correct unscreened (102 of 208 on the
    # tiny set, whose 8x ended at step 5 of 6). The run stops at --train.max_steps anyway.
    epochs = math.ceil(24 * s["steps"] * s["batch"] / s["prompts"]) + 1
    screen = ["--speed.n_init", str(s["n_init"])] if STRATEGIES[strategy].uses_n_init else []
    return [
        sys.executable, "-m", "openrlhf_speed.cli.main", "train",
        "--actor.model_name_or_path", s["model"], "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1",
        "--ref.num_gpus_per_node", "1", "--vllm.num_engines", "1", "--vllm.enforce_eager",
        "--algo.advantage.estimator", "rloo", "--algo.kl.init_coef", "0", "--speed.strategy", strategy, *screen,
        "--rollout.batch_size", str(s["batch"]), "--rollout.n_samples_per_prompt", str(s["n"]),
        "--rollout.micro_batch_size", "16", "--train.batch_size", str(s["batch"] * s["n"]),
        "--train.micro_batch_size", "8", "--train.max_steps", str(s["steps"]), "--train.num_episodes", str(epochs),
        "--rollout.max_new_tokens", str(s["max_new_tokens"]), "--data.max_len", str(512 + s["max_new_tokens"]),
        "--rollout.temperature", "1.0", "--actor.adam.lr", str(LR), "--actor.lr_warmup_ratio", "0",
        "--actor.lr_scheduler", "constant",
        "--data.prompt_dataset", data, "--data.input_key", "prompt", "--data.label_key", "answer",
        "--data.apply_chat_template", "--ds.param_dtype", "fp32", "--vllm.dtype", "float32",
        "--ckpt.path", os.path.join(run_dir, "ckpt"), "--ckpt.save_steps", str(s["every"]), "--ckpt.max_num", "2",
        "--ckpt.load_enable", "--ckpt.output_dir", os.path.join(run_dir, "final"),
        "--log.jsonl", os.path.join(run_dir, "metrics.jsonl"), "--speed.trace_path", os.path.join(run_dir, "trace.jsonl"),
        "--logger.tensorboard_dir", os.path.join(run_dir, "tensorboard"), *extra,
    ]


def _window(records: list, lo: int, hi: int) -> list:
    return [r for r in records if lo < r["step"] <= hi]


def step_seconds(records: list) -> list:
    """Each step's wall time from consecutive train_wall_s (the first step of a process has none)."""
    out = []
    for a, b in zip(records, records[1:]):
        if b["step"] == a["step"] + 1 and b["train_wall_s"] > a["train_wall_s"]:
            out.append(b["train_wall_s"] - a["train_wall_s"])
    return out


def workload(window: list) -> dict:
    """The window's mean work per step: a policy that drifts (longer responses, a lower
    qualification rate) changes it even at lr 1e-6, and the step time with it."""
    return {k: statistics.fmean(r[k] for r in window if k in r) for k in WORK if any(k in r for r in window)}


def sample(step: int, every: int, records: list, procs: list, run_dir: str) -> dict:
    """One record of the soak at step `step` (the run is at its end of step)."""
    window = _window(records, step - every, step)
    parts = sorted({k for r in window for k in r if k.startswith(("timing/", "timing_parts/"))})
    trace = os.path.join(run_dir, "trace.jsonl")
    return {
        "step": step, "time": time.time(), "rss_mib": probe.rss_by_role(procs),
        "object_store_mib": probe.object_store_mib(probe.gcs_address(procs)),
        "step_s": step_seconds(window),
        "parts_s": {k: statistics.fmean(r[k] for r in window if k in r) for k in parts},
        "work": workload(window),
        "trace_bytes": probe.files_bytes(trace, trace + ".1"),
        "log_bytes": log_bytes_at_step(os.path.join(run_dir, "train.log"), step),
    }


def log_bytes_at_step(path: str, step: int, tail: int = 8 * 2**20) -> int:
    """The log's bytes up to the end of step `step`'s line: the file's size when the sample is
    taken would count, at the last step, the run's end (the final save, OpenRLHF's progress bar
    for every remaining episode, shutdown lines), 52 KB in a 1,000-step soak."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            f.seek(max(0, size - tail))
            start, data = f.tell(), f.read()
    except OSError:
        return 0
    end = _step_line_end(data, step)
    return size if end is None else start + end


def _step_line_end(data: bytes, step: int):
    """The offset just past step `step`'s last line in `data`, or None without one."""
    at = data.rfind(f"[openrlhf-speed] step {step} |".encode())
    if at < 0:
        return None
    end = data.find(b"\n", at)
    return end + 1 if end >= 0 else len(data)


def soak_one(strategy: str, s: dict, data: str, run_dir: str, extra: list) -> list:
    """Run one curriculum (or go on with it) and record it; returns its samples."""
    os.makedirs(run_dir, exist_ok=True)
    samples_path = os.path.join(run_dir, "samples.jsonl")
    cmd = train_command(strategy, s, data, run_dir, extra)
    token = uuid.uuid4().hex
    records = probe.Records(os.path.join(run_dir, "metrics.jsonl"))
    records.poll()  # an earlier, stopped run's records: samples start after them
    done = {json.loads(line)["step"] for line in open(samples_path)} if os.path.isfile(samples_path) else set()
    waiting = []  # samples whose checkpoint is not complete yet
    with open(os.path.join(run_dir, "train.log"), "a") as log, open(samples_path, "a") as out:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, probe.RUN_ENV: token})
        try:
            while True:
                finished = proc.poll() is not None
                for r in records.poll():
                    k = r["step"]
                    if k % s["every"] == 0 and k not in done:
                        waiting.append(sample(k, s["every"], records.steps, probe.run_processes(token), run_dir))
                for rec in list(waiting):
                    ckpt = probe.checkpoint_figures(os.path.join(run_dir, "ckpt"), rec["step"])
                    if ckpt is not None or finished:
                        rec.update(ckpt or {})
                        out.write(json.dumps(rec) + "\n")
                        out.flush()
                        waiting.remove(rec)
                if finished:
                    break
                time.sleep(1.0)
        except BaseException:
            proc.terminate()  # SIGTERM: the run shuts Ray and vLLM down; its checkpoint stays
            proc.wait()
            raise
    if proc.returncode:
        raise SystemExit(f"openrlhf-speed soak: the {strategy} run failed (exit {proc.returncode}); see "
                         f"{run_dir}/train.log. Rerun the same command to go on from its last checkpoint.")
    with open(os.path.join(run_dir, "done.json"), "w") as f:
        json.dump({"steps": s["steps"], "records": len(records.steps)}, f)
    return [json.loads(line) for line in open(samples_path)]


# -- the growth check ---------------------------------------------------------------------------
def figures(rec: dict, prev: dict | None) -> dict:
    """The flat-expected figures of one sample: memory, object store, checkpoint, state, and the
    trace's and log's bytes per step since the previous sample."""
    out = {f"rss_mib/{k}": v for k, v in rec.get("rss_mib", {}).items()}
    for key in ("object_store_mib", "ckpt_mib", "state_mib"):
        if rec.get(key) is not None:
            out[key] = rec[key]
    parts = rec.get("state_parts_mib")
    if parts:
        # The responses in flight and ready at the checkpoint's moment vary with it, bounded by the
        # in-flight and buffer limits; the rest (per-prompt history, order, totals) is what could grow.
        held = parts.get("inflight", 0.0) + parts.get("ready", 0.0)
        out["state_mib/responses_held"], out["state_mib/rest"] = held, sum(parts.values()) - held
    if prev is not None and rec["step"] > prev["step"]:
        for key in ("trace_bytes", "log_bytes"):
            out[f"{key}_per_step"] = (rec[key] - prev[key]) / (rec["step"] - prev["step"])
    # Seconds per 1,000 tokens: the machinery's speed, apart from how much work a step holds.
    work, parts = rec.get("work") or {}, rec.get("parts_s") or {}
    for name, part, tokens in (("generation", "timing/generation", "speed/tokens_generated"),
                               ("training", "timing/ppo_train", "speed/tokens_trained")):
        if work.get(tokens) and parts.get(part) is not None:
            out[f"{name}_s_per_ktoken"] = 1000 * parts[part] / work[tokens]
    return out


def backfill(samples: list, run_dir: str, every: int) -> None:
    """Samples recorded before `work` and the log's bytes at the step line were: the same
    figures, from the run's metrics.jsonl and train.log when they are there."""
    log = os.path.join(run_dir, "train.log")
    if os.path.isfile(log):
        with open(log, "rb") as f:
            data = f.read()  # once for all samples: a 1,000-step soak's log is about 8 MB
        for rec in samples:
            end = _step_line_end(data, rec["step"])
            rec["log_bytes"] = len(data) if end is None else end
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    if all("work" in r for r in samples) or not os.path.isfile(metrics_path):
        return
    with open(metrics_path) as f:
        records = [r for r in map(json.loads, f) if r.get("event", "step") == "step" and "step" in r]
    for rec in samples:
        if "work" not in rec:
            rec["work"] = workload(_window(records, rec["step"] - every, rec["step"]))


def growth_check(samples: list, steps: int, ref_fraction: float) -> dict:
    """{figure: {ref, last, growth, flagged}} between the first sample at ref_fraction x steps
    and the last one; step time against the host's noise."""
    samples = sorted(samples, key=lambda r: r["step"])
    later = [i for i, r in enumerate(samples) if r["step"] >= ref_fraction * steps]
    if len(later) < 2:
        return {}
    i, j = later[0], len(samples) - 1
    ref, last = (figures(samples[k], samples[k - 1] if k else None) for k in (i, j))
    out = {}
    for key in sorted(set(ref) & set(last)):
        g = (last[key] - ref[key]) / ref[key] if ref[key] else (0.0 if not last[key] else math.inf)
        out[key] = {"ref": ref[key], "last": last[key], "growth": g, "flagged": g > GROWTH_LIMIT}
    a, b = samples[i]["step_s"], samples[j]["step_s"]
    if len(a) >= 2 and len(b) >= 2:
        diff = statistics.fmean(b) - statistics.fmean(a)
        se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
        out["step_s"] = {"ref": statistics.fmean(a), "last": statistics.fmean(b), "growth": diff / statistics.fmean(a),
                         "noise_se": se, "flagged": diff > NOISE_SE * se}
    for key in WORK:
        a, b = (samples[k].get("work", {}).get(key) for k in (i, j))
        if a and b is not None:
            out[f"work/{key}"] = {"ref": a, "last": b, "growth": (b - a) / a, "flagged": False}
    for key, v in out.items():
        v["ref_step"], v["last_step"] = samples[i]["step"], samples[j]["step"]
    return out


def report(out: str, s: dict, curricula: list, args) -> dict:
    runs = {}
    for name in curricula:
        path = os.path.join(out, name, "samples.jsonl")
        samples = [json.loads(line) for line in open(path)] if os.path.isfile(path) else []
        backfill(samples, os.path.join(out, name), s["every"])
        runs[name] = {"samples": samples, "growth": growth_check(samples, s["steps"], args.ref_fraction)}
    result = {"date": time.strftime("%Y-%m-%d"), "machine": probe.machine(), "settings": s,
              "command": "openrlhf-speed soak " + " ".join(sys.argv[1:] if args.argv is None else args.argv),
              "growth_limit": GROWTH_LIMIT, "noise_se": NOISE_SE, "runs": runs,
              "flagged": {n: [k for k, v in r["growth"].items() if v["flagged"]] for n, r in runs.items()}}
    with open(os.path.join(out, "soak.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out, "soak.md"), "w") as f:
        f.write(markdown(result))
    plot(result, os.path.join(out, "soak.png"))
    return result


def markdown(result: dict) -> str:
    m, s = result["machine"], result["settings"]
    lines = [f"# Soak: {s['steps']} steps per curriculum, recorded every {s['every']}", "",
             f"{result['date']}, {m['cpu']} ({m['cores']} cores, {m['memory_gib']} GiB); `{result['command']}`; "
             f"model {s['model']}, B {s['batch']} x N {s['n']}, {s['prompts']} prompts. A figure is flagged when it "
             f"grows by more than {result['growth_limit']:.0%} (step time: by more than {result['noise_se']:g} "
             "standard errors) from the reference record to the last.", ""]
    for name, run in result["runs"].items():
        flagged = result["flagged"][name]
        lines += [f"## {name}: {'flagged ' + ', '.join(flagged) if flagged else 'flat'}", "",
                  "| figure | ref step | value | last step | value | growth |", "|---|---|---|---|---|---|"]
        for key, v in run["growth"].items():
            mark = " **flagged**" if v["flagged"] else ""
            lines.append(f"| {key} | {v['ref_step']} | {v['ref']:.4g} | {v['last_step']} | {v['last']:.4g} | "
                         f"{v['growth']:+.1%}{mark} |")
        work = {k[len("work/"):]: v for k, v in run["growth"].items() if k.startswith("work/")}
        if work:
            lines += ["", "Work per step (window means, never flagged): " + "; ".join(
                f"{k} {v['ref']:.4g} -> {v['last']:.4g} ({v['growth']:+.1%})" for k, v in work.items()) +
                ". Seconds per 1,000 tokens (generation_s_per_ktoken, training_s_per_ktoken) are the machinery's "
                "speed apart from the work: a step time that grows with the work while they stay flat is the "
                "policy's drift, not the run slowing down."]
        if run["samples"] and "state_parts_mib" in run["samples"][-1]:
            last = run["samples"][-1]
            lines += ["", f"Curriculum state at step {last['step']}: {last['state_mib']} MiB, buffer {last['buffer']}, "
                      f"in flight {last['inflight']}, epoch {last['epoch']}; parts (MiB): " +
                      ", ".join(f"{k} {v}" for k, v in last["state_parts_mib"].items() if v >= 0.001)]
        lines.append("")
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("driver RSS (MiB)", "rss_mib/driver"), ("actor RSS (MiB)", "rss_mib/actor"),
              ("engine RSS (MiB)", "rss_mib/engine0"), ("vLLM workers RSS (MiB)", "rss_mib/vllm_workers"),
              ("Ray's own processes RSS (MiB)", "rss_mib/ray"), ("object store (MiB)", "object_store_mib"),
              ("checkpoint (MiB)", "ckpt_mib"), ("curriculum state (MiB)", "state_mib"),
              ("trace bytes / step", "trace_bytes_per_step"), ("log bytes / step", "log_bytes_per_step"),
              ("step time (s)", "step_s"), ("generation s / 1,000 tokens", "generation_s_per_ktoken")]
    fig, axes = plt.subplots(2, 6, figsize=(24, 7))
    for ax, (title, key) in zip(axes.flat, panels):
        for name, run in result["runs"].items():
            samples = sorted(run["samples"], key=lambda r: r["step"])
            xs, ys = [], []
            for k, rec in enumerate(samples):
                value = (statistics.fmean(rec["step_s"]) if rec["step_s"] else None) if key == "step_s" else \
                    figures(rec, samples[k - 1] if k else None).get(key)
                if value is not None:
                    xs.append(rec["step"])
                    ys.append(value)
            ax.plot(xs, ys, marker="o", ms=3, label=name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylim(bottom=0)
    axes.flat[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = argv
    s = settings(args)
    curricula = [c.strip() for c in args.curricula.split(",") if c.strip()]
    from openrlhf_speed.curriculum import STRATEGIES

    unknown = [c for c in curricula if c not in STRATEGIES]
    if unknown:
        raise SystemExit(f"openrlhf-speed soak: error: --curricula {unknown}: not a strategy ({sorted(STRATEGIES)})")
    os.makedirs(args.out, exist_ok=True)
    if not args.report_only:
        data = prompt_file(s["model"], s["prompts"], args.out)
        extra = [a for a in args.train_args if a != "--"]
        for name in curricula:
            if os.path.isfile(os.path.join(args.out, name, "done.json")):
                print(f"[soak] {name}: done already, skipped", flush=True)
                continue
            print(f"[soak] {name}: {s['steps']} steps, a record every {s['every']}", flush=True)
            soak_one(name, s, data, os.path.join(args.out, name), extra)
    result = report(args.out, s, curricula, args)
    for name, flagged in result["flagged"].items():
        print(f"[soak] {name}: {'flagged: ' + ', '.join(flagged) if flagged else 'flat'}", flush=True)
    for dest, names in ((args.publish, ["soak.json"]), (args.publish_docs, ["soak.md", "soak.png"])):
        if dest:
            os.makedirs(dest, exist_ok=True)
            for n in names:
                shutil.copy(os.path.join(args.out, n), os.path.join(dest, n))
    print(f"[soak] report: {os.path.join(args.out, 'soak.md')}", flush=True)
    return 0
