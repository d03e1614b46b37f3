"""Multi-node on one machine: a two-node Ray cluster (head + a second raylet on loopback,
one logical GPU each), and `openrlhf-speed train` submitted to it through RAY_ADDRESS as on
a real cluster. With one GPU per node, the vLLM engine and the DeepSpeed actor must land on
different nodes; the weights then cross nodes over the gloo sync group. The proving ground's CI
model runs it: the placement and the sync are what is checked."""

import os
import re
import subprocess

import pytest
import ray
from _util import openrlhf_speed_cmd
from ray.cluster_utils import Cluster

pytestmark = pytest.mark.e2e_extra


def test_engine_and_actor_on_different_nodes(tmp_path):
    node_args = {"num_cpus": 3, "num_gpus": 1, "object_store_memory": 512 * 1024 ** 2}
    cluster = Cluster(initialize_head=True, head_node_args=node_args)
    try:
        cluster.add_node(**node_args)
        cluster.wait_for_nodes()
        node_ids = {n.node_id for n in cluster.list_all_nodes()}
        assert len(node_ids) == 2
        cmd = [
            *openrlhf_speed_cmd(), "train", "--actor.model_name_or_path", "proving-ci",
            "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1",
            "--vllm.num_engines", "1", "--vllm.enforce_eager",
            "--algo.advantage.estimator", "rloo", "--algo.kl.init_coef", "0",
            "--rollout.batch_size", "4", "--rollout.n_samples_per_prompt", "4", "--speed.n_init", "2",
            "--rollout.micro_batch_size", "8", "--train.batch_size", "16", "--train.micro_batch_size", "4",
            "--rollout.max_new_tokens", "32", "--data.max_len", "512", "--data.max_samples", "64",
            "--actor.adam.lr", "2e-5", "--actor.lr_warmup_ratio", "0", "--actor.entropy_coef", "0.01",
            "--train.max_steps", "1", "--check.weight_sync",
            "--ckpt.path", str(tmp_path / "ckpt"), "--ckpt.output_dir", str(tmp_path / "final"),
        ]
        env = dict(os.environ, RAY_ADDRESS=cluster.address)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
        log = out.stdout + out.stderr
        (tmp_path / "train.log").write_text(log)
        assert out.returncode == 0, log[-5000:]
    finally:
        cluster.shutdown()
        ray.shutdown()

    placements = dict(re.findall(r"placement: (actor rank 0/1|vLLM engine) \w* ?on node (\w+)", log))
    assert set(placements) == {"actor rank 0/1", "vLLM engine"}, log[-3000:]
    assert placements["actor rank 0/1"] != placements["vLLM engine"]
    assert all(any(n.startswith(p) for n in node_ids) for p in placements.values())
    # The job ran on the user's cluster (no second local Ray), and the weights crossed nodes.
    assert "Started a local Ray instance" not in log
    checks = re.findall(r"weight sync check (.*?): (\d+) tensors bit-identical .*?; (\d+) changed", log)
    assert [c[0] for c in checks] == ["before training", "after step 1"] and int(checks[1][2]) > 0
    assert re.search(r"\[openrlhf-speed\] step 1 \|", log)
