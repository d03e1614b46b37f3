"""`--backend megatron` / `--megatron.*` through the real parser: the plan, and every refused
combination named by its flag (before any actor starts)."""

import json

import pytest
from _cli import run_cli

BASE = ("train", "--dry_run", "--vllm.num_engines", "1", "--algo.advantage.estimator", "rloo",
        "--algo.kl.init_coef", "0", "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4",
        "--train.batch_size", "16")


def run(*args):
    return run_cli(*BASE, *args)


def test_megatron_plan_maps_replicas_onto_openrlhf_dispatch():
    out = run("--backend", "megatron", "--megatron.pp", "2", "--actor.num_gpus_per_node", "4",
              "--vllm.dtype", "float32")
    assert out.returncode == 0, out.stderr[-2000:]
    plan = json.loads(out.stdout[out.stdout.index("{\n"):])
    assert plan["resources"]["megatron"] == {"tp": 1, "pp": 2, "dp": 2}
    # OpenRLHF sends each micro-batch to tp * pp consecutive ranks and keeps one result.
    assert plan["config"]["ds"]["tensor_parallel_size"] == 2
    assert plan["config"]["backend"] == "megatron" and plan["config"]["vllm"]["dtype"] == "float32"
    assert "backend: Megatron-Core, tp 1 x pp 2 x dp 2 = 4 actor ranks" in out.stdout


@pytest.mark.parametrize("args, message", [
    # SmolLM2-135M: 9 heads, 3 KV heads, 30 layers.
    (("--backend", "megatron", "--megatron.tp", "2", "--actor.num_gpus_per_node", "2"),
     "tensor parallel size 2 must divide the attention heads (9)"),
    (("--backend", "megatron", "--megatron.pp", "4", "--actor.num_gpus_per_node", "4"),
     "--megatron.pp 4 must divide the number of layers (30)"),
    (("--backend", "megatron", "--megatron.pp", "2", "--actor.num_gpus_per_node", "3"),
     "must divide the actor's GPUs"),
    (("--megatron.pp", "2",), "--megatron.tp / --megatron.pp need --backend megatron"),
    (("--backend", "megatron", "--train.dynamic_batch_enable"), "--train.dynamic_batch_enable is not implemented"),
    (("--backend", "megatron", "--ds.tensor_parallel_size", "2", "--actor.num_gpus_per_node", "2"),
     "use --megatron.tp / --megatron.pp"),
    (("--backend", "megatron", "--algo.advantage.estimator", "gae"), "needs a critic"),
])
def test_megatron_refusals_name_the_flag(args, message):
    out = run(*args)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr[-1500:]
