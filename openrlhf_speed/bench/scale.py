"""`openrlhf-speed scale` (`make scale`): a real run on a paper-scale prompt set, measured.

The paper's datasets hold 17k to 400k prompts (DeepScaleR, DAPO-17k, NuminaMath). Run A
starts `openrlhf-speed train` (the soak's CPU settings, bench/soak.py, with SPEED) on
`--rows` prompts (400,000), trains `--steps` steps (5) and checkpoints the last; run B is
the same command again, which resumes and trains one step more. Recorded:
- start-up: launch to the training loop's start (the first step record's time less its
  train_wall_s), and each step's time;
- driver memory: the trainer process, where the curriculum lives, sampled every 2 s (peak,
  and after the last step), beside the other roles' at that point;
- the checkpoint's size and the curriculum state's inside it, with its parts;
- the resume: launch to the loop's start in run B, and the restore itself (the trainer's line).
Budgets, as benchmark figures rather than timed tests: the curriculum state under 50 MB, the
resume under 60 s on 2 cores. What must hold per step at any size is tested without clocks
(tests/curriculum/test_scale.py: nothing the scheduler does per step is O(dataset)).

Prompts: `--rows` distinct problems from the proving ground's own generator (data/build.py),
in its prompt format, so the proving model solves some and SPEED's screening qualifies some.
Output (`--out`): prompts_<rows>.jsonl, run/ (train_a.log, train_b.log, metrics.jsonl, ckpt/),
scale.json, scale.md; `--publish DIR` copies scale.json, `--publish_docs DIR` scale.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid

from openrlhf_speed.bench import probe
from openrlhf_speed.bench.soak import PRESETS, train_command
from openrlhf_speed.storage.atomic import replace_file

STATE_BUDGET_BYTES = 50e6
RESUME_BUDGET_S = 60.0
_RESTORED = re.compile(r"restored the curriculum state of step (\d+) from \S+ in ([\d.]+)s")
_RAY_STARTED = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+)\s+INFO \S+ -- Started a local Ray instance")
_RENDERED = re.compile(r"Preprocessing data: 100%\|[^|]*\| (\d+)/\1 \[(?:(\d+):)?(\d+):(\d+)<")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=400_000, help="prompts in the generated set (default 400000)")
    p.add_argument("--steps", type=int, default=5, help="steps of run A, checkpointed at the last (default 5)")
    p.add_argument("--mode", choices=sorted(PRESETS), default="cpu", help="the soak's size preset for the batch shape")
    p.add_argument("--model", default=None, help="a proving-ground name (default: the preset's)")
    p.add_argument("--out", default="runs/scale", help="output folder (default runs/scale)")
    p.add_argument("--publish", default=None, help="copy scale.json into this folder")
    p.add_argument("--publish_docs", default=None, help="copy scale.md into this folder")
    p.add_argument("train_args", nargs="*", help="after '--': flags for both `openrlhf-speed train` runs")
    return p


def make_prompts(rows: int, out: str, seed: int = 0) -> str:
    """`rows` distinct proving-ground problems as RL prompts (reused when the file is there)."""
    path = os.path.join(out, f"prompts_{rows}.jsonl")
    if os.path.isfile(path):
        with open(path) as f:
            if sum(1 for _ in f) == rows:
                return path
    from openrlhf_speed.data.build import generate_splits, make_row
    from openrlhf_speed.proving import get_variant

    problems = generate_splits(rows, 0, get_variant("full").rl_weights, seed)["train"]
    if len(problems) < rows:
        raise SystemExit(f"openrlhf-speed scale: error: the generator has {len(problems)} distinct problems, "
                         f"fewer than --rows {rows}")

    def write(f):
        for i, p in enumerate(problems):
            f.write(json.dumps(make_row(p, f"train-{i:06d}", 0, "zeroshot", "{question}")) + "\n")

    replace_file(path, write, text=True)
    return path


def watch(cmd: list, run_dir: str, log_name: str) -> dict:
    """Run `cmd` to its end; returns its launch time, step records (with the wall time each was
    seen), the driver's memory (peak, and the roles' at the last step) and its log."""
    token = uuid.uuid4().hex
    records = probe.Records(os.path.join(run_dir, "metrics.jsonl"))
    records.poll()  # run A's records, when this is run B
    seen, peak, roles = [], 0.0, {}
    log_path = os.path.join(run_dir, log_name)
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, probe.RUN_ENV: token})
        try:
            while proc.poll() is None:
                new = records.poll()
                now = time.time()
                seen += [(r, now) for r in new]
                rss = probe.rss_by_role(probe.run_processes(token))
                peak = max(peak, rss.get("driver", 0.0))
                if new:
                    roles = rss  # the roles' memory at the newest step
                time.sleep(2.0)
        except BaseException:
            proc.terminate()
            proc.wait()
            raise
    seen += [(r, time.time()) for r in records.poll()]
    if proc.returncode:
        raise SystemExit(f"openrlhf-speed scale: the run failed (exit {proc.returncode}); see {log_path}")
    return {"launch": t0, "seen": seen, "driver_peak_mib": peak, "rss_mib": roles, "log": open(log_path).read()}


def phases(run: dict, startup_s: float) -> dict:
    """Where a start-up's seconds went, from its log: the train command's checks before Ray
    starts (flags, the dataset's rows), OpenRLHF's rendering of every prompt through the chat
    template in its trainer (its progress bar's time), and the rest (Ray, the vLLM engine and
    the DeepSpeed actor starting, the SPEED driver's prompt-length count)."""
    out = {}
    ray = _RAY_STARTED.search(run["log"])
    if ray:
        started = time.mktime(time.strptime(ray.group(1), "%Y-%m-%d %H:%M:%S")) + int(ray.group(2)) / 1000
        out["before Ray (flag and dataset checks)"] = round(started - run["launch"], 1)
    rendered = _RENDERED.findall(run["log"])
    if rendered:
        h, m, sec = rendered[-1][1:]
        out["OpenRLHF renders every prompt"] = float(int(h or 0) * 3600 + int(m) * 60 + int(sec))
    if out:
        out["the rest (Ray, vLLM, DeepSpeed, the driver)"] = round(startup_s - sum(out.values()), 1)
    return out


def figures(a: dict, b: dict, ckpt: dict | None, steps: int) -> dict:
    (first, t_first), *_ = a["seen"]
    walls = [r["train_wall_s"] for r, _ in a["seen"]]
    (resumed, t_resumed), *_ = b["seen"]
    restored = _RESTORED.search(b["log"])
    out = {
        "startup_s": round(t_first - first["train_wall_s"] - a["launch"], 1),
        "step_s": [round(w, 2) for w in [walls[0]] + [y - x for x, y in zip(walls, walls[1:])]],
        "driver_peak_mib": a["driver_peak_mib"], "rss_mib_after_last_step": a["rss_mib"],
        "resume_s": round(t_resumed - resumed["train_wall_s"] - b["launch"], 1),
        "resumed_from": int(restored.group(1)) if restored else None,
        "restore_s": float(restored.group(2)) if restored else None,
        "resumed_steps": [r["step"] for r, _ in b["seen"]],
        "prompts_too_long": first.get("speed/prompts_too_long"),
    }
    out["startup_parts_s"], out["resume_parts_s"] = phases(a, out["startup_s"]), phases(b, out["resume_s"])
    if ckpt:
        out.update({k: ckpt[k] for k in ("ckpt_mib", "state_mib", "state_parts_mib")})
    out["budgets"] = {
        "curriculum state < 50 MB": ckpt is not None and ckpt["state_mib"] * probe.MIB < STATE_BUDGET_BYTES,
        "resume < 60 s": out["resume_s"] < RESUME_BUDGET_S,
        "resumed from the checkpoint": out["resumed_from"] == steps and out["resumed_steps"] == [steps + 1],
    }
    return out


def markdown(result: dict) -> str:
    m, f = result["machine"], result["figures"]
    rows = [("start-up (launch to the first step)", f"{f['startup_s']} s"),
            ("step times", ", ".join(f"{s} s" for s in f["step_s"])),
            ("driver memory, peak", f"{f['driver_peak_mib']:.0f} MiB"),
            ("checkpoint (actor + curriculum state)", f"{f.get('ckpt_mib', '?')} MiB"),
            ("curriculum state", f"{f.get('state_mib', '?')} MiB"),
            ("resume (launch to the first step)", f"{f['resume_s']} s (the fresh start-up above: {f['startup_s']} s), "
                                                  f"of which the curriculum's restore {f['restore_s']} s")]
    lines = [f"# {result['rows']:,} prompts: start-up, {result['steps']} steps, a checkpoint, a resume", "",
             f"{result['date']}, {m['cpu']} ({m['cores']} cores, {m['memory_gib']} GiB); `{result['command']}`", "",
             "| figure | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows], "",
             "Budgets: " + "; ".join(f"{k}: {'holds' if ok else '**does not hold**'}"
                                     for k, ok in f["budgets"].items()), ""]
    for key, what in (("startup_parts_s", "Start-up"), ("resume_parts_s", "Resume")):
        if f.get(key):
            lines.append(f"{what}, where the seconds went: " + ", ".join(f"{k} {v} s" for k, v in f[key].items()))
            lines.append("")
    if f.get("state_parts_mib"):
        lines.append("Curriculum state parts (MiB): " + ", ".join(f"{k} {v}" for k, v in f["state_parts_mib"].items()
                                                                   if v >= 0.001))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.rows < 1 or args.steps < 1:
        raise SystemExit("openrlhf-speed scale: error: --rows and --steps must be >= 1")
    s = {**PRESETS[args.mode], "steps": args.steps, "every": args.steps, "prompts": args.rows}
    if args.model:
        s["model"] = args.model
    run_dir = os.path.join(args.out, "run")
    if os.path.isdir(run_dir):
        shutil.rmtree(run_dir)  # a measurement starts from nothing: a resumed run A would measure a resume
    os.makedirs(run_dir)
    t = time.time()
    data = make_prompts(args.rows, args.out)
    print(f"[scale] {args.rows:,} prompts in {data} ({time.time() - t:.0f} s)", flush=True)
    cmd = train_command("speed", s, data, run_dir, [a for a in args.train_args if a != "--"])
    print(f"[scale] run A: start-up, {args.steps} steps, a checkpoint", flush=True)
    a = watch(cmd, run_dir, "train_a.log")
    ckpt = probe.checkpoint_figures(os.path.join(run_dir, "ckpt"), args.steps)
    print("[scale] run B: the same command, resumed, one step more", flush=True)
    b = watch(cmd + ["--train.max_steps", str(args.steps + 1)], run_dir, "train_b.log")
    result = {"date": time.strftime("%Y-%m-%d"), "machine": probe.machine(), "rows": args.rows, "steps": args.steps,
              "command": "openrlhf-speed scale " + " ".join(sys.argv[1:] if argv is None else argv),
              "settings": s, "figures": figures(a, b, ckpt, args.steps)}
    with open(os.path.join(args.out, "scale.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "scale.md"), "w") as f:
        f.write(markdown(result))
    for dest, name in ((args.publish, "scale.json"), (args.publish_docs, "scale.md")):
        if dest:
            os.makedirs(dest, exist_ok=True)
            shutil.copy(os.path.join(args.out, name), os.path.join(dest, name))
    print(markdown(result), flush=True)
    return 0 if all(result["figures"]["budgets"].values()) else 1
