"""`actor_ops` (the Megatron actor's log-probs and policy update) against OpenRLHF's actor.

One `torch.distributed.run` launch of `megatron_actor_worker.py` with 2 CPU ranks (gloo)
runs TP=1 (as 2 data-parallel replicas), TP=2 with a padded vocabulary (132 rows for 128
tokens, so the padded-row masking is exercised) and PP=2, on tiny random Llama (tied, GQA;
token-mean PPO loss + k3 KL loss - entropy bonus, AdamW) and Qwen2 (QKV bias; sequence-mean
PPO loss, SGD so that the clipped gradient's scale shows in the second step). References are OpenRLHF's own
`Actor` around the HF model and its `PolicyLoss`, with temperature 0.7 and right-padded
rows of 16, 11 and 7 tokens. Every rank's results are checked: log-probs and the step's
numbers must reach every rank of the pipeline, not only the last stage.
"""

from pathlib import Path

import pytest
import torch
from _util import torchrun_ranks

pytest.importorskip("megatron.core")

WORKER = Path(__file__).with_name("megatron_actor_worker.py")
ARCHS = ("llama", "qwen2")
LAYOUTS = ("tp1", "tp2", "pp2")
LOGPROB_TOL = 1e-4
TRAIN_RTOL = 1e-5  # measured: at most 1.4e-6 relative, both steps, every layout



@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("megatron_actor")
    return torchrun_ranks(WORKER, 2, out)


def _close(a, b, rtol):
    return abs(a - b) <= rtol * abs(b)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_action_log_probs_match_openrlhf_actor(ranks, arch, layout):
    for rank in ranks:
        res = rank[arch][layout]["logprobs"]
        assert res["max_abs_logprob"] > 1.0  # the check is not vacuous
        assert res["max_abs_diff"] < LOGPROB_TOL, (arch, layout, res)
    if layout == "tp2":
        assert ranks[0][arch][layout]["padded_vocab"] > 128  # padded rows were masked


@pytest.mark.parametrize("arch", ARCHS)
def test_policy_step_matches_openrlhf_and_across_layouts(ranks, arch):
    hf = ranks[0][arch]["hf_train"]
    assert hf["grad_norm"][0] > 1.0  # max_norm=1 clipped the first step
    for rank in ranks:
        for layout in LAYOUTS:
            got = rank[arch][layout]["train"]
            ref = ranks[0][arch]["tp1"]["train"]
            for step in range(2):
                where = f"{arch} {layout} step {step + 1}: {got} vs HF {hf} / TP1 {ref}"
                for key in ("loss", "grad_norm"):
                    assert _close(got[key][step], hf[key][step], TRAIN_RTOL), where
                    assert _close(got[key][step], ref[key][step], TRAIN_RTOL), where
    assert hf["loss"][1] < hf["loss"][0]  # the update moved the policy the right way


@pytest.mark.parametrize("arch", ARCHS)
def test_fit_gradient_accumulation_equals_one_big_micro_batch(ranks, arch):
    for rank in ranks:
        fit = rank[arch]["fit"]
        assert fit["max_param_update"] > 1e-4  # the step moved the weights
        assert fit["max_param_diff"] < 1e-6, fit  # 3 x 1 row accumulated == 1 x 3 rows
        a, b = fit["grad_norm"]
        assert _close(a, b, TRAIN_RTOL), fit
        a, b = fit["policy_loss"]
        assert _close(a, b, TRAIN_RTOL), fit


def test_left_padding_is_refused():
    from openrlhf_speed.backends.megatron.actor_ops import check_right_padded

    check_right_padded(torch.tensor([[1, 1, 1], [1, 1, 0]]))
    with pytest.raises(ValueError, match="right-padded"):
        check_right_padded(torch.tensor([[1, 1, 1], [0, 1, 1]]))
