"""The `openrlhf-speed train` command of one benchmark run: the same flags for every
curriculum but its strategy, with `off` (stock OpenRLHF) given its steps by prompts and epochs."""

from __future__ import annotations

import os
import re
import sys

# SPEED's generation batch (the paper's 64 prompts): prompts in flight on the engines at once,
# for the curricula that screen or filter and so need more prompts than a step trains.
# Uniform trains every prompt it starts: 64 in flight would run 4 steps ahead of B = 16, past
# the staleness bound (2 policy versions), and a third of its tokens were re-generated
# (proving preset, seed 42: 215,052 of 633,580 discarded in 26 steps). It keeps the driver's
# default window (2 x B), as deep as the bound.
GEN_PROMPTS = {"proving": 64, "proving-v4": 64, "proving-low": 64, "proving-high": 64, "proving-high-b4": 16}
NO_GEN_BATCH = ("off", "uniform")

CURRICULUM_FLAGS = {"uniform": ["--speed.strategy", "uniform"], "dapo": ["--speed.strategy", "dapo"]}


def train_command(name: str, s: dict, args, train: str, test: str, run_dir: str, seed: int | None = None) -> list:
    """One `openrlhf-speed train` run of curriculum `name`; seed: --train.seed (default --seed)."""
    seed = args.seed if seed is None else seed
    name, prior_key, pace = curriculum_tails(name)
    strategy, n_init = parse_curriculum(name, s["n_init"])
    if strategy == "off":  # stock OpenRLHF refuses --train.max_steps: its prompts and one epoch set the steps
        train = _cycled(train, os.path.join(run_dir, "train_prompts.jsonl"), s["steps"] * s["batch"])
        length = ["--train.num_episodes", "1"]
    else:
        length = ["--train.max_steps", str(s["steps"]), "--train.num_episodes", str(args.epochs)]
    cmd = [
        sys.executable, "-m", "openrlhf_speed.cli.main", "train",
        "--actor.model_name_or_path", args.model,
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1",
        "--vllm.num_engines", str(args.vllm_engines), "--vllm.enforce_eager",
        "--algo.advantage.estimator", "rloo", "--algo.kl.init_coef", "0",
        "--rollout.batch_size", str(s["batch"]), "--rollout.n_samples_per_prompt", str(s["n"]),
        "--rollout.micro_batch_size", str(s["micro"]), "--train.batch_size", str(s["train_batch"]),
        "--train.micro_batch_size", str(s["train_micro"]), *length,
        "--rollout.max_new_tokens", str(s["max_new_tokens"]), "--data.max_len", str(512 + s["max_new_tokens"]),
        "--rollout.temperature", "1.0", "--train.seed", str(seed),
        "--actor.adam.lr", str(s["lr"]), *_lr_schedule(s, 1 if strategy == "off" else args.epochs, train),
        "--data.prompt_dataset", train, "--data.input_key", "prompt", "--data.label_key", "answer",
        "--data.apply_chat_template",
        "--eval.dataset", test, "--eval.steps", str(s["eval_every"]), "--eval.at_start",
        "--eval.n_samples_per_prompt", str(s["eval_k"]), "--eval.temperature", "1.0",
        "--ckpt.path", os.path.join(run_dir, "ckpt"), "--ckpt.output_dir", os.path.join(run_dir, "final"),
        "--ckpt.save_steps", str(10 ** 9),  # checkpoints are not what is measured
        "--log.jsonl", os.path.join(run_dir, "metrics.jsonl"),
        *CURRICULUM_FLAGS.get(strategy, ["--speed.strategy", strategy]),
    ]
    from openrlhf_speed import proving
    from openrlhf_speed.curriculum import STRATEGIES

    if strategy in STRATEGIES and STRATEGIES[strategy].uses_n_init:
        cmd += ["--speed.n_init", str(n_init)]
    if prior_key:
        cmd += ["--speed.prior_key", prior_key]
    if pace:
        cmd += ["--speed.pace_batches", str(pace)]
    if strategy not in NO_GEN_BATCH and GEN_PROMPTS.get(args.mode):
        cmd += ["--speed.max_inflight_prompts", str(GEN_PROMPTS[args.mode])]
    if proving.is_proving(args.model):
        # float32 on every CPU: the proving model is built and its tables measured in float32,
        # and bf16's 8-bit mantissa would change what an lr-1e-4 update does to 1.8M weights,
        # so the figures would depend on whether the CPU has native bf16.
        cmd += ["--ds.param_dtype", "fp32", "--vllm.dtype", "float32"]
    return cmd + [a for a in args.train_args if a != "--"]


def flag_value(train_args: list, flag: str):
    """The last value given to `flag` among the flags after '--' (`--f v` or `--f=v`), or None."""
    value = None
    for i, a in enumerate(train_args):
        if a == flag and i + 1 < len(train_args):
            value = train_args[i + 1]
        elif a.startswith(flag + "="):
            value = a[len(flag) + 1:]
    return value


def run_schedule(train_args: list, device: str) -> str:
    """The --speed.schedule the driver's runs use on `device`: the one passed after '--', or auto
    resolved as `openrlhf-speed train` resolves it (rollout/speed_config.py). `off` generates
    with OpenRLHF's own loop, which the flag does not change."""
    from openrlhf_speed.rollout.speed_config import resolve_schedule

    try:
        return resolve_schedule(flag_value(train_args, "--speed.schedule") or "auto", device,
                                feed_during_training=flag_value(train_args, "--speed.feed_during_training") or "off",
                                async_enable="--train.async_enable" in train_args)[0]
    except ValueError as e:
        raise SystemExit(f"openrlhf-speed bench: error: after '--': {e}") from None


def curriculum_tails(name: str) -> tuple[str, str, int | None]:
    """(name, prior key or '', P or None) of a --curricula entry: each '+' tail is either paceP
    (--speed.pace_batches P: speed+pace2) or a dataset field (speed_seq+level: --speed.prior_key level)."""
    base, *tails = name.split("+")
    paces = [int(t[4:]) for t in tails if re.fullmatch(r"pace[1-9]\d*", t)]
    keys = [t for t in tails if not re.fullmatch(r"pace[1-9]\d*", t)]
    if len(keys) > 1 or len(paces) > 1 or "" in tails:
        raise SystemExit(f"openrlhf-speed bench: error: --curricula entry {name!r}: write NAME[+KEY][+paceP], "
                         "e.g. speed_seq+level or speed+pace2, with at most one prior key and one pace")
    return base, (keys[0] if keys else ""), (paces[0] if paces else None)


def parse_curriculum(name: str, n_init: int) -> tuple[str, int]:
    """(strategy, n_init) of a --curricula entry: 'speed' -> ('speed', preset's), 'speed@8' -> ('speed', 8);
    '+' tails (speed_seq+level, speed+pace2) are curriculum_tails'."""
    strategy, sep, k = name.partition("@")
    if not sep:
        return name, n_init
    if not k.isdigit() or int(k) < 1:
        raise SystemExit(f"openrlhf-speed bench: error: --curricula entry {name!r}: write name@K with K >= 1 "
                         "screening responses, e.g. speed@8")
    return strategy, int(k)


def _lr_schedule(s: dict, epochs: int, train: str) -> list:
    """No warm-up by default (OpenRLHF's cosine schedule, whose length the data sets, is flat
    over a bench's few steps); with --warmup W, a linear warm-up over W optimizer steps and
    then the constant lr."""
    if s["warmup"] <= 0:
        return ["--actor.lr_warmup_ratio", "0"]
    with open(train) as f:
        rows = sum(1 for line in f if line.strip())
    return ["--actor.lr_scheduler", "constant_with_warmup",
            "--actor.lr_warmup_ratio", f"{warmup_ratio(s, epochs, rows):.10g}"]


def warmup_ratio(s: dict, epochs: int, train_rows: int) -> float:
    """--actor.lr_warmup_ratio giving s['warmup'] >= 1 optimizer steps. OpenRLHF takes the
    warm-up as a ratio of the schedule length it computes from the data (rows x N // train
    batch x episodes x epochs, ppo_trainer.prepare_datasets), not from --train.max_steps; the
    - 0.5 keeps ceil(length x ratio) on the step count despite rounding (as recipe_lib.sh does)."""
    length = train_rows * s["n"] // s["train_batch"] * epochs
    return 1.0 if length <= s["warmup"] else (s["warmup"] - 0.5) / length


def _cycled(src: str, dst: str, n: int) -> str:
    """n rows of src in order, starting over at its end (a second epoch) when it has fewer:
    `off` then trains on the prompts the driver's curricula would see, for the same steps."""
    with open(src) as f:
        rows = [line if line.endswith("\n") else line + "\n" for line in f if line.strip()]
    if not rows:
        raise SystemExit(f"openrlhf-speed bench: error: the training prompts {src} are empty")
    with open(dst, "w") as f:
        f.writelines(rows[i % len(rows)] for i in range(n))
    return dst
