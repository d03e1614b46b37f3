"""The memory plan (memory/arithmetic.py, parts.py, plan.py) on CPU: the
arithmetic for Qwen2.5-Math-1.5B, Qwen2.5-Math-7B and Qwen2.5-32B against hand-computed
figures (their configs written here from the published dimensions, no weights), DeepSpeed's
own estimator behind the DeepSpeed actor's states, the SPEED driver's in-flight window, and
verdicts that name the flag that fixes what does not fit."""

import contextlib
import dataclasses
import io
import re

import pytest

from openrlhf_speed.memory import arithmetic
from openrlhf_speed.memory import parts
from openrlhf_speed.memory import plan
from openrlhf_speed.memory.arithmetic import GiB, Hardware, Layout, ModelDims

# The architecture fields of the published config.json files.
QWEN_MATH_1_5B = {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                  "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
                  "max_position_embeddings": 4096, "tie_word_embeddings": True}
QWEN_MATH_7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                "max_position_embeddings": 4096, "tie_word_embeddings": False}
QWEN_32B = {"model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64,
            "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064,
            "max_position_embeddings": 131072, "tie_word_embeddings": False}
D15, D7, D32 = (ModelDims.from_config(c, name) for c, name in
                ((QWEN_MATH_1_5B, "1.5B"), (QWEN_MATH_7B, "7B"), (QWEN_32B, "32B")))
H100 = Hardware(79.2 * GiB, 256 * GiB, 8, "test: 80 GB GPUs, 256 GiB hosts of 8 GPUs")
# The 7B recipes (recipe_lib.sh): ZeRO-3 actor on 4 GPUs with Adam on the host, micro batches
# of 2 (training) and 4 (log-probs), 4096 tokens, 4 engines of TP 1 at 0.9, B=16 x N=24 with
# N_init 4, 64 prompts and 768 responses in flight.
RECIPE_7B = Layout(actor_per_node=4, zero_stage=3, adam_offload=True, checkpointing=True, train_micro=2,
                   rollout_micro=4, max_len=4096, engines=4, vllm_tp=1, utilization=0.9, batch=16, n=24,
                   first_request=4, inflight_prompts=64, inflight_responses=768)


# -- parameters and KV cache ---------------------------------------------------------------
@pytest.mark.parametrize("dims, hand, published, published_non_embedding", [
    # per layer: QKV h x (h + 2 kv) + bias (h + 2 kv), output h x h, MLP 3 h I, two norms 2 h;
    # + final norm h + embedding V x h (x 2 untied)
    (D15, 28 * (1536 * 2048 + 2048 + 1536 ** 2 + 3 * 1536 * 8960 + 2 * 1536) + 1536 + 151936 * 1536, 1.54e9, 1.31e9),
    (D7, 28 * (3584 * 4608 + 4608 + 3584 ** 2 + 3 * 3584 * 18944 + 2 * 3584) + 3584 + 2 * 152064 * 3584, 7.61e9,
     6.53e9),
    (D32, 64 * (5120 * 7168 + 7168 + 5120 ** 2 + 3 * 5120 * 27648 + 2 * 5120) + 5120 + 2 * 152064 * 5120, 32.5e9,
     31.0e9),
])
def test_parameter_counts_match_hand_figures_and_the_model_cards(dims, hand, published, published_non_embedding):
    assert dims.params == hand
    assert abs(dims.params / published - 1) < 0.01  # the model cards round
    non_embedding = dims.params - dims.embedding_params * (1 if dims.tied else 2)
    assert abs(non_embedding / published_non_embedding - 1) < 0.01


def test_exact_parameter_counts():
    assert (D15.params, D7.params, D32.params) == (1_543_714_304, 7_615_616_512, 32_763_876_352)
    assert D7.largest_layer_params == 152064 * 3584  # the embedding, as DeepSpeed's model_to_params finds it


@pytest.mark.parametrize("dims, tp, want", [
    (D15, 1, 28 * 2 * 2 * 128 * 2),  # 28,672 B per token
    (D7, 1, 28 * 2 * 4 * 128 * 2),  # 57,344
    (D32, 1, 64 * 2 * 8 * 128 * 2),  # 262,144
    (D32, 4, 64 * 2 * 2 * 128 * 2),  # per TP rank: 2 of the 8 KV heads
    (D15, 4, 28 * 2 * 1 * 128 * 2),  # 2 KV heads over 4 ranks: vLLM replicates one per rank
])
def test_kv_bytes_per_token(dims, tp, want):
    assert dims.kv_bytes_per_token(2, tp) == want


def test_vllm_cache_holds_the_hand_computed_sequences():
    # 0.9 x 79.2 GiB - 2 B x 7.62e9 weights - 2 GiB runtime, over 57,344 B x 4096 tokens
    _, _, cache, per_token, seqs = parts.engine_capacity(D7, RECIPE_7B, H100)
    assert cache.nbytes == pytest.approx(0.9 * 79.2 * GiB - 2 * 7_615_616_512 - 2 * GiB)
    assert per_token == 57344
    assert seqs == int((0.9 * 79.2 * GiB - 2 * 7_615_616_512 - 2 * GiB) // (57344 * 4096)) == 251


# -- the actors' states --------------------------------------------------------------------
def _printed_estimate(total, largest, gpus, nodes, options: str) -> tuple:
    """(per CPU, per GPU) GiB that DeepSpeed's estimate_zero3_..._all_cold prints for `options`."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs_all_cold

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        estimate_zero3_model_states_mem_needs_all_cold(total, largest, num_gpus_per_node=gpus, num_nodes=nodes)
    line = next(line for line in out.getvalue().splitlines() if options in line)
    cpu, gpu = re.findall(r"([\d.]+)GB", line)
    return float(cpu), float(gpu)


@pytest.mark.parametrize("offload, options", [
    (True, "offload_param=none, offload_optimizer=OffloadDeviceEnum.cpu, zero_init=1"),
    (False, "offload_param=none, offload_optimizer=none, zero_init=1"),
])
def test_deepspeed_states_are_deepspeeds_own_estimate(offload, options):
    gpu, host = arithmetic.deepspeed_states(D7, 3, offload, gpus_per_node=4, nodes=1)
    printed_cpu, printed_gpu = _printed_estimate(D7.params, D7.largest_layer_params, 4, 1, options)
    assert round(gpu.nbytes / GiB, 2) == printed_gpu and round(host.nbytes / GiB, 2) == printed_cpu
    if offload:  # by hand: 4 B x embedding + 2 B x params / 4 GPUs; host 16 B x params x 1.5
        assert gpu.nbytes == 4 * 152064 * 3584 + 2 * 7_615_616_512 // 4
        assert host.nbytes == 16 * 7_615_616_512 * 1.5
    else:
        assert gpu.nbytes == 4 * 152064 * 3584 + 18 * 7_615_616_512 // 4


def test_megatron_32b_states_are_the_recipe_headers_figure():
    # the 32B recipe's header: 18 B x 32.8e9 / (8 x 2) = 36.9 GB at the optimizer step; a stage is
    # 32 layers + one embedding. Between steps the fp32 main gradients (4 B) are freed, so 14 B
    # stay and the step adds them back with AdamW's fp32 temporary.
    states, step = arithmetic.megatron_states(D32, tp=8, pp=2, bf16=True)
    stage = 32 * D32.layer_params + 152064 * 5120 + 5120
    assert states.nbytes == pytest.approx(14 * stage / 8)
    assert step.nbytes == pytest.approx(8 * stage / 8)
    assert round((states.nbytes + step.nbytes - 4 * stage / 8) / 1e9, 1) == 36.9
    # fused weight-gradient GEMMs (Transformer Engine) zero the main gradients before the backward
    fused, fused_step = arithmetic.megatron_states(D32, tp=8, pp=2, bf16=True, fused_wgrad=True)
    assert fused.nbytes == pytest.approx(18 * stage / 8) and fused_step.nbytes == pytest.approx(4 * stage / 8)


def test_megatron_activations_are_the_logits_or_one_recomputed_layer_with_its_scores():
    t, L = 4096, 4096
    full = arithmetic.megatron_activations(D7, 1, L, 1, 1, "full", False, te=True)
    inputs = 28 * t * 2 * 3584
    assert full.nbytes == pytest.approx(inputs + max(t * arithmetic.megatron_layer_bytes(D7, 1, False), t * 152064 * 6))
    local = arithmetic.megatron_activations(D7, 1, L, 1, 1, "full", False, te=False)  # 28 heads x 4096^2 scores
    scores = 28 * L * L * 24
    assert local.nbytes == pytest.approx(inputs + max(t * arithmetic.megatron_layer_bytes(D7, 1, False) + scores,
                                                      t * 152064 * 6))
    assert local.nbytes > full.nbytes


def test_activations_with_and_without_checkpointing():
    with_ckpt = arithmetic.deepspeed_activations(D7, 2, 4096, checkpointing=True)
    without = arithmetic.deepspeed_activations(D7, 2, 4096, checkpointing=False)
    t, layer = 2 * 4096, 16 * 3584 + 2 * (3584 + 2 * 512) + 4 * 3584 + 8 * 18944  # 232,448 B per token
    assert arithmetic.hf_layer_bytes(D7) == layer
    # the logits' backward (12 B each) comes before any layer is recomputed: the larger of the two
    assert with_ckpt.nbytes == 28 * t * 2 * 3584 + max(2 * t * layer, t * 152064 * 12)
    assert without.nbytes == 28 * t * layer + t * 152064 * 12
    assert with_ckpt.estimate and without.nbytes > 3 * with_ckpt.nbytes


# -- the in-flight window ------------------------------------------------------------------
def test_in_flight_is_screening_of_the_window_plus_a_batchs_continuations():
    assert parts.in_flight(RECIPE_7B)[0] == 64 * 4 + 16 * 20 == 576
    capped = dataclasses.replace(RECIPE_7B, inflight_responses=128)
    assert parts.in_flight(capped)[0] == 128 + 16 * 20
    uniform = dataclasses.replace(RECIPE_7B, first_request=24, inflight_prompts=16, inflight_responses=0)
    assert parts.in_flight(uniform)[0] == 16 * 24
    off = dataclasses.replace(RECIPE_7B, speed=False)
    assert parts.in_flight(off)[0] == 16 * 24
    # vLLM runs at most max_num_seqs per engine: 144 per engine are submitted, 128 need cache
    assert parts.needed_per_engine(RECIPE_7B) == 128


def test_max_num_seqs_is_vllms_default():
    from vllm.config import SchedulerConfig

    assert parts.VLLM_MAX_NUM_SEQS == SchedulerConfig.DEFAULT_MAX_NUM_SEQS


# -- verdicts ------------------------------------------------------------------------------
def test_the_7b_recipe_fits_with_figures_per_gpu_and_host():
    p = plan.make_plan(D7, RECIPE_7B, H100)
    assert p["verdict"] == "fits"
    by_key = {part["key"]: part for part in p["parts"]}
    assert by_key["engines"]["limit"] == 251 and by_key["engines"]["total"] == 128
    host = by_key["host"]["figures"][0]
    assert host["nbytes"] == 16 * 7_615_616_512 * 1.5  # the offloaded states, DeepSpeed's figure
    text = plan.format_plan(p)
    assert text.splitlines()[-1] == "verdict: fits"
    assert "estimate_zero3_model_states_mem_needs" in text and "~ marks an estimate (+-30%" in text


def test_7b_full_parameter_zero3_on_too_few_gpus_names_adam_offload_or_more_gpus():
    lay = dataclasses.replace(RECIPE_7B, adam_offload=False, actor_per_node=2)
    p = plan.make_plan(D7, lay, H100)
    assert p["verdict"].startswith("does not fit: actor needs ")
    fix = p["verdict"].split("; fix: ")[1]
    assert fix.startswith("--ds.adam_offload (") and "--actor.num_gpus_per_node 4" in fix
    # every named fix fits when applied
    assert parts.actor_part(D7, dataclasses.replace(lay, adam_offload=True), H100).fits
    assert parts.actor_part(D7, dataclasses.replace(lay, actor_per_node=4), H100).fits


def test_a_kv_cache_too_small_names_utilization_tp_and_the_window():
    lay = dataclasses.replace(RECIPE_7B, utilization=0.5)
    p = plan.make_plan(D7, lay, H100)
    verdict = p["verdict"]
    assert verdict.startswith("does not fit: vLLM's KV cache holds 107 sequences of --data.max_len per engine, "
                              "128 needed"), verdict
    for flag in ("--vllm.gpu_memory_utilization 0.56", "--vllm.tensor_parallel_size 2 --vllm.num_engines 2",
                 "--speed.max_inflight_prompts 27"):
        assert flag in verdict
    # 27 prompts: 27 x 4 + 16 x 20 = 428 responses, 107 per engine: exactly what the cache holds
    assert parts.engine_part(D7, dataclasses.replace(lay, inflight_prompts=27), H100).fits
    assert not parts.engine_part(D7, dataclasses.replace(lay, inflight_prompts=28), H100).fits


def test_32b_megatron_on_one_node_names_pipeline_parallel():
    lay = Layout(backend="megatron", actor_per_node=8, tp=8, pp=1, recompute="full", max_len=4096, engines=4,
                 vllm_tp=4, batch=16, n=24, first_request=4, inflight_prompts=64)
    p = plan.make_plan(D32, lay, H100)
    assert "does not fit: actor needs" in p["verdict"]
    assert "--megatron.pp 2 with --actor.num_nodes 2 --actor.num_gpus_per_node 8" in p["verdict"]


def test_host_ram_too_small_for_offloaded_adam():
    # 170.2 GiB of offloaded states + 14.2 staging + 8 x 4 GiB of processes + 0.1 object store
    small_host = dataclasses.replace(H100, host_bytes=160 * GiB)
    verdict = plan.make_plan(D7, RECIPE_7B, small_host)["verdict"]
    assert verdict.startswith("does not fit: host RAM needs 216.5 GiB per node, 160.0 GiB there")
    # the Adam states back on the 4 GPUs (33.9 GiB each), or spread over two hosts (85.1 GiB each)
    assert "without --ds.adam_offload (58.4 of 160.0 GiB)" in verdict and "--actor.num_nodes 2 (131.4 of 160.0 GiB)" in verdict


def test_colocated_reference_adds_its_zero3_shard():
    lay = dataclasses.replace(RECIPE_7B, has_ref=True, ref_gpus=4, ref_colocated=True)
    figures = {f.what: f for f in parts.actor_part(D7, lay, H100).figures}
    assert figures["reference weights"].nbytes == 2 * 7_615_616_512 / 4


def test_a_model_without_config_is_not_planned_and_says_why(tmp_path):
    args = type("Args", (), {"actor": type("A", (), {"model_name_or_path": str(tmp_path)})})()
    result, text = plan.dry_run_plan(args, hw=H100)
    assert "has no config.json" in result["error"] and "--actor.model_name_or_path" in text
    assert text.startswith("[openrlhf-speed] memory plan: not made: ")


def test_unknown_hardware_is_assumed_and_said():
    hw = plan.local_hardware()  # this CPU machine: no CUDA device
    assert hw.gpu_bytes == plan.ASSUMED_GPU_GIB * GiB and "assumed" in hw.source and "--plan.gpu_memory_gib" in hw.source
    given = plan.local_hardware(40, 512, 4)
    assert (given.gpu_bytes, given.host_bytes, given.gpus_per_node) == (40 * GiB, 512 * GiB, 4)
    assert "assumed" not in given.source


def test_when_no_single_flag_fixes_it_a_pair_is_named():
    # no checkpointing, Adam on 2 GPUs of 40 GiB: offload alone leaves 4096 tokens of full
    # activations (~36 GiB), checkpointing alone leaves 66 GiB of states
    lay = Layout(actor_per_node=2, zero_stage=3, max_len=4096, engines=2, batch=4, n=8, first_request=4,
                 inflight_prompts=8)
    small = dataclasses.replace(H100, gpu_bytes=40 * GiB)
    verdict = plan.make_plan(D7, lay, small)["verdict"]
    assert "fix: --ds.adam_offload with --actor.gradient_checkpointing_enable (" in verdict, verdict
    both = dataclasses.replace(lay, adam_offload=True, checkpointing=True)
    assert parts.actor_part(D7, both, small).fits
    assert not parts.actor_part(D7, dataclasses.replace(lay, adam_offload=True), small).fits


def test_a_reference_model_on_its_own_gpus_is_planned_and_fixed():
    # 7B reference on 1 GPU of 24 GiB of its own: 14.2 GiB of bf16 weights + a forward at 4 x 4096
    # (17.4 GiB: its logits in bf16 and fp32, 13.9, and one layer)
    lay = dataclasses.replace(RECIPE_7B, has_ref=True, ref_gpus=1, ref_colocated=False)
    small = dataclasses.replace(H100, gpu_bytes=24 * GiB)
    p = plan.make_plan(D7, lay, small)
    assert [part["key"] for part in p["parts"]][:2] == ["actor", "reference"]
    ref = next(part for part in p["parts"] if part["key"] == "reference")
    assert not ref["fits"] and ref["fixes"][0].startswith("--ref.offload (")
    assert parts.ref_part(D7, dataclasses.replace(lay, ref_offload=True), small).fits
