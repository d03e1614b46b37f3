"""The DeepSpeed actor on one GPU: OpenRLHF's `DeepspeedStrategy` and `Actor` on the shipped
proving model in bf16, with the 7B recipes' ZeRO-3 and both optimizer placements (Adam
states on the host, DeepSpeed's CPU Adam, the recipes' default; on the GPU, FusedAdam, with
ADAM_OFFLOAD=0). Each is one `torch.distributed.run` launch of `deepspeed_worker.py` on
NCCL. The CPU mode's DeepSpeed path is covered by the end-to-end tests.
"""

import json
from pathlib import Path

import pytest
from _util import torchrun_ranks

pytest.importorskip("deepspeed")

WORKER = Path(__file__).with_name("deepspeed_worker.py")


def _model():
    from openrlhf_speed.proving import shipped

    return shipped.path("proving-full")


@pytest.mark.gpu
@pytest.mark.parametrize("offload, optimizer", [(True, "DeepSpeedCPUAdam"), (False, "FusedAdam")])
def test_gpu_deepspeed_actor_bf16(tmp_path, offload, optimizer):
    extra = ["--adam_offload"] if offload else []
    res = torchrun_ranks(WORKER, 1, tmp_path, "--model", str(_model()), "--zero_stage", "3", *extra, timeout=900)[0]
    print(json.dumps(res))  # the figures, for `pytest -s` on a GPU machine
    assert res["optimizer"] == optimizer, res
    assert res["param_dtype"] == "torch.bfloat16", res
    # bf16 against fp32 on the CPU, on 16 sampled responses (448 tokens): the log-probs agree
    # to bf16 rounding (the CPU's own bf16 path: max 0.067, mean 0.001 nats per token).
    lp = res["logprob_vs_fp32_cpu"]
    assert lp["mean_abs_diff"] < 0.01 and lp["max_abs_diff"] < 0.5, res
    loss = res["train"]["loss"]
    assert all(x == x for x in loss + res["train"]["grad_norm"]), res  # finite
    assert loss[-1] < loss[0], res  # the steps train the batch they see
