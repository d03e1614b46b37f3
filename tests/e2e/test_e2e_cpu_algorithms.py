"""Every RL algorithm users name, through OpenRLHF's own estimators and losses, with each
curriculum strategy, for one real training step on CPU.

Two combinations run in CI, in `make test-extra` (one with a reference model and KL loss, one
with DAPO's loss settings and DAPO's filter); the full matrix is `e2e_long`
(`make test-all`), 2-5 minutes per combination on 2 cores.
"""

import json
import math
import re
import subprocess

import pytest
from _util import openrlhf_speed_cmd

ALGORITHMS = {
    "rloo": ["--algo.advantage.estimator", "rloo"],
    "reinforce_pp": ["--algo.advantage.estimator", "reinforce"],
    "reinforce_pp_baseline": ["--algo.advantage.estimator", "reinforce_baseline"],
    "grpo": ["--algo.advantage.estimator", "group_norm", "--algo.kl.use_loss", "--algo.kl.estimator", "k3",
             "--algo.kl.init_coef", "1e-3"],
    "dr_grpo": ["--algo.advantage.estimator", "dr_grpo"],
    "dapo": ["--algo.advantage.estimator", "group_norm", "--actor.eps_clip_low_high", "0.2", "0.28",
             "--actor.loss_agg_mode", "token-mean", "--reward.overlong_buffer_len", "16",
             "--reward.overlong_penalty_factor", "1.0"],
}
STRATEGIES = ["speed", "dapo", "uniform"]
# The history-based strategies change which prompts run and how many responses are asked
# for first, not the loss: one algorithm is enough to run their path through the pipeline.
HISTORY_STRATEGIES = ["greso", "cures", "speed_bayes"]
# speed_seq, speed_thin and speed_keep read a tag of each row (the embedded rows' `level`) through OpenRLHF's own loader.
TAGGED = ["speed_seq", "speed_thin", "speed_keep"]
STRATEGY_FLAGS = {s: ["--speed.prior_key", "level"] for s in TAGGED}
# A pace (--speed.pace_batches) changes when prompts start, not what trains: SPEED's path with it.
PACED = ["speed+pace1"]
STRATEGY_FLAGS["speed+pace1"] = ["--speed.pace_batches", "1"]
DEFAULT_RUN = {("grpo", "speed"), ("dapo", "dapo")}  # speed_seq's default run: tests/cli/test_e2e_train_summary.py


def combos():
    pairs = [(a, s) for a in ALGORITHMS for s in STRATEGIES] + [("rloo", s) for s in HISTORY_STRATEGIES + TAGGED + PACED]
    for algo, strategy in pairs:
        # DEFAULT_RUN goes to `make test-extra` (CI runs it after `make test`): on a CPU without
        # native bf16 `make test` would otherwise pass 30 minutes.
        marks = [pytest.mark.slow] + ([pytest.mark.e2e_extra] if (algo, strategy) in DEFAULT_RUN else [pytest.mark.e2e_long])
        yield pytest.param(algo, strategy, marks=marks, id=f"{algo}-{strategy}")


@pytest.mark.parametrize("algo,strategy", list(combos()))
def test_one_step(algo, strategy, tmp_path):
    flags = STRATEGY_FLAGS.get(strategy, [])
    paced = "--speed.pace_batches" in flags
    if paced:
        flags = [*flags, "--log.jsonl", str(tmp_path / "metrics.jsonl")]
    strategy = strategy.split("+")[0]
    kl = "--algo.kl.init_coef" in ALGORITHMS[algo]
    cmd = [
        *openrlhf_speed_cmd(), "train",
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1", "--ref.num_gpus_per_node", "1",
        "--vllm.num_engines", "1", "--vllm.enforce_eager",
        *([] if kl else ["--algo.kl.init_coef", "0"]),
        *ALGORITHMS[algo],
        "--speed.strategy", strategy, "--speed.n_init", "2", *flags,
        "--rollout.batch_size", "2", "--rollout.n_samples_per_prompt", "4", "--rollout.micro_batch_size", "8",
        "--train.batch_size", "8", "--train.micro_batch_size", "4", "--train.max_steps", "1",
        "--rollout.max_new_tokens", "32", "--data.max_len", "512", "--data.max_samples", "64",
        "--actor.adam.lr", "1e-6", "--actor.lr_warmup_ratio", "0",
        "--ckpt.path", str(tmp_path / "ckpt"), "--ckpt.output_dir", str(tmp_path / "final"),
        "--speed.trace_path", str(tmp_path / "trace.jsonl"),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    log = out.stdout + out.stderr
    (tmp_path / "run.log").write_text(log)
    assert out.returncode == 0, f"see {tmp_path / 'run.log'}: " + log[-3000:]
    step = re.search(r"\[openrlhf-speed\] step 1 \| reward (-?[\d.]+) .*\| loss (-?[\d.e+-]+|nan)", log)
    assert step, log[-3000:]
    assert math.isfinite(float(step.group(2)))
    batch = [json.loads(line) for line in open(tmp_path / "trace.jsonl") if '"batch"' in line][0]
    assert len(batch["prompts"]) == 2 and all(len(r) == 4 for r in batch["rewards"])
    if strategy in ("speed", "dapo", *TAGGED):  # the filters keep only groups with mixed results
        for rewards in batch["rewards"]:
            # speed_keep may train a group whose screening was all equal, only if the group is mixed
            screened = rewards if strategy in ("dapo", "speed_keep") else rewards[:2]
            assert 0 < sum(r >= 0.5 for r in screened) < len(screened)
    if paced:  # the pace held the starts: its figures are in the step's metrics
        rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
        assert any(0 < r.get("speed/pace_qualification", 0) <= 1 for r in rows)
    if strategy in HISTORY_STRATEGIES:  # each filters the first request of a visit on the band
        for rewards in batch["rewards"]:
            assert 0 < sum(r >= 0.5 for r in rewards) < len(rewards)
