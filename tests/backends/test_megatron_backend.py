"""Megatron-Core backend against Hugging Face, on CPU with gloo.

Each parallel layout is one `torch.distributed.run` launch of `megatron_worker.py` (a
module-scoped fixture), and several tests read its results:
- logits of the HF model and the Megatron model built from its weights agree (fp32);
- HF -> Megatron -> HF gives back every tensor bit for bit;
- two AdamW steps give the same loss and gradient norm at TP=1, TP=2 and PP=2 (and as the
  same steps on the HF model).
Tiny random Llama (tied, GQA) and Qwen2 (QKV bias) run by default; SmolLM2-135M at TP=1 and PP=2 by
default and at TP=3 under e2e_long (its 9 heads / 3 KV heads cannot be split over 2 ranks).
"""

from pathlib import Path

import pytest
from _util import torchrun_ranks

pytest.importorskip("megatron.core")

WORKER = Path(__file__).with_name("megatron_worker.py")
TINY = ("llama", "qwen2")
LOGIT_TOL = 1e-4
# SmolLM2 (30 layers, |logits| up to 34): HF's own fp32 sdpa and eager paths differ by
# 6.5e-5 and each is 1e-4 away from HF in fp64 (measured), so 1e-4 is its rounding floor.
SMOL_LOGIT_TOL = 2.5e-4
TRAIN_RTOL = 1e-5



def _merge(ranks):
    """Per-rank results -> one dict per model: the last stage's logits/loss, rank 0's rest."""
    merged = {}
    for arch in ranks[0]:
        out = dict(ranks[0][arch])
        for rank in ranks:
            res = rank[arch]
            if res.get("logits"):
                out["logits"] = res["logits"]
            if res.get("train") and res["train"]["loss"][0] is not None:
                out["train"] = res["train"]
        merged[arch] = out
    return merged


def launch(tmp_path_factory, tp, pp, *extra, timeout=600):
    nproc = tp * pp
    out = tmp_path_factory.mktemp(f"megatron_tp{tp}_pp{pp}")
    ranks = torchrun_ranks(WORKER, nproc, out, "--tp", str(tp), "--pp", str(pp), *extra, timeout=timeout)
    return _merge(ranks)


def _smollm2_path():
    from openrlhf_speed.models.default_model import ModelNotFoundError, resolve_model

    try:
        return resolve_model(None)
    except ModelNotFoundError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def tp1(tmp_path_factory):
    return launch(tmp_path_factory, 1, 1, "--smollm2", _smollm2_path())


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    return launch(tmp_path_factory, 2, 1)


@pytest.fixture(scope="module")
def pp2(tmp_path_factory):
    return launch(tmp_path_factory, 1, 2, "--smollm2", _smollm2_path())


@pytest.fixture(params=["tp1", "tp2", "pp2"])
def layout_results(request):
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("arch", TINY)
def test_logits_match_hf(layout_results, arch):
    logits = layout_results[arch]["logits"]
    assert logits["max_abs_logit"] > 1.0  # the check is not vacuous
    assert logits["max_abs_diff"] < LOGIT_TOL, logits


@pytest.mark.parametrize("arch", TINY)
def test_hf_megatron_hf_round_trip_is_exact(layout_results, arch):
    rt = layout_results[arch]["roundtrip"]
    assert rt["not_equal"] == [] and rt["missing"] == [], rt
    assert rt["n_exported"] == rt["n_reference"]


def _assert_close(a, b, what):
    for x, y in zip(a, b):
        assert abs(x - y) <= TRAIN_RTOL * abs(y), f"{what}: {a} vs {b}"


@pytest.mark.parametrize("arch", TINY)
def test_train_steps_equal_across_layouts(tp1, tp2, pp2, arch):
    ref = tp1[arch]["train"]
    _assert_close(ref["loss"], tp1[arch]["hf_train"]["loss"], "TP1 vs HF loss")
    _assert_close(ref["grad_norm"], tp1[arch]["hf_train"]["grad_norm"], "TP1 vs HF grad norm")
    for name, other in (("TP2", tp2), ("PP2", pp2)):
        _assert_close(other[arch]["train"]["loss"], ref["loss"], f"{name} vs TP1 loss")
        _assert_close(other[arch]["train"]["grad_norm"], ref["grad_norm"], f"{name} vs TP1 grad norm")
    assert ref["loss"][1] < ref["loss"][0]  # the step did something


@pytest.mark.parametrize("layout", ["tp1", "pp2"])
def test_smollm2_matches_hf(layout, request):
    res = request.getfixturevalue(layout)["smollm2"]
    assert res["logits"]["max_abs_diff"] < SMOL_LOGIT_TOL, res["logits"]
    assert res["roundtrip"]["not_equal"] == [] and res["roundtrip"]["n_exported"] == 272


@pytest.mark.e2e_long
def test_smollm2_tp3_matches_hf(tmp_path_factory):
    res = launch(tmp_path_factory, 3, 1, "--archs", "", "--smollm2", _smollm2_path())["smollm2"]
    assert res["logits"]["max_abs_diff"] < SMOL_LOGIT_TOL, res["logits"]
    assert res["roundtrip"]["not_equal"] == [] and res["roundtrip"]["missing"] == []


@pytest.mark.gpu
def test_gpu_tp1_matches_hf(tmp_path_factory):
    # One GPU, NCCL, Megatron's own CUDA code (the CPU shims stay off), TE layers if installed.
    res = launch(tmp_path_factory, 1, 1)
    for arch in TINY:
        assert res[arch]["logits"]["max_abs_diff"] < LOGIT_TOL, res[arch]["logits"]
        assert res[arch]["roundtrip"]["not_equal"] == [], res[arch]["roundtrip"]
        for key in ("loss", "grad_norm"):
            for x, y in zip(res[arch]["train"][key], res[arch]["hf_train"][key]):
                assert abs(x - y) <= 1e-4 * abs(y), (arch, key, res[arch])


def test_bf16_with_fp32_master_weights_tracks_fp32(tmp_path_factory):
    # --megatron.dtype bf16 (the GPU default; runs on CPU too): bf16 parameters, fp32 main
    # grads and master weights. Against the fp32 HF model: logits within bf16 rounding (5% of
    # the largest logit; measured 2-3%), and the same two AdamW steps within 2% (measured 0.4%).
    res = launch(tmp_path_factory, 1, 1, "--dtype", "bf16")
    for arch in TINY:
        assert res[arch]["logits"]["max_abs_diff"] < 0.05 * res[arch]["logits"]["max_abs_logit"], res[arch]["logits"]
        train, hf = res[arch]["train"], res[arch]["hf_train"]
        for x, y in zip(train["loss"], hf["loss"]):
            assert abs(x - y) <= 2e-2 * abs(y), (arch, train, hf)
        assert train["loss"][1] < train["loss"][0]
