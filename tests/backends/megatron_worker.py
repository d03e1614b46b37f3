"""Per-rank body of the Megatron backend tests (run by test_megatron_backend.py under
`python -m torch.distributed.run --nproc_per_node N megatron_worker.py ...`; tests/ is not a
package, so spawned ranks cannot import the test module).

For each model it builds the HF reference (fp32), converts its weights to this rank's
Megatron stage, and writes `<out>/rank<r>.json` with, per model:
- logits: max |HF - Megatron| over the batch (last stage only), and max |HF logit| for scale;
- roundtrip: tensors exported back by `iter_hf_weights`, and the names not bit-identical;
- train: loss and grad norm of two AdamW steps (Megatron and the same steps on the HF model).
Shapes: input ids [B, T]; logits [B, T, V] (vocab-parallel [B, T, V/tp] inside Megatron).
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

B, T = 2, 16
LR = 1e-2


def tiny_config(arch: str):
    from transformers import LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
    )
    if arch == "llama":  # tied and GQA, like SmolLM2
        return LlamaConfig(tie_word_embeddings=True, rope_theta=100000.0, **common)
    return Qwen2Config(tie_word_embeddings=False, rope_theta=1000000.0, **common)


def build_hf(arch: str, model_path: str):
    from transformers import AutoModelForCausalLM

    if model_path:
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(arch), dtype=torch.float32).eval()
    # HF's init (std 0.02, unit norms, zero biases) leaves logits near 0, where a layout bug
    # could hide under the tolerance; larger random weights make every tensor count.
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if "norm" in name else 0.15 * torch.randn_like(p))
    return model


def run_schedule(model, ids, labels, forward_only):
    """One micro-batch through Megatron's schedule (pipelined when pp > 1). Returns logits
    [B, T, V/tp] (forward_only) or the mean next-token loss (training) on the last stage."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    position_ids = torch.arange(T, device=ids.device).expand(B, T)
    mask = torch.ones(B, T, device=ids.device)
    mask[:, -1] = 0  # the last position has no next token

    def forward_step(data_iterator, model):
        output = model(ids, position_ids, None, labels=None if forward_only else labels)
        if forward_only:
            return output, None

        def loss_func(per_token):  # [B, T] -log p(label), vocab-parallel CE
            loss = (per_token * mask).sum() / mask.sum()
            return loss, {"loss": loss.detach()}

        return output, loss_func

    out = get_forward_backward_func()(
        forward_step_func=forward_step, data_iterator=iter([None]), model=[model],
        num_microbatches=1, seq_length=T, micro_batch_size=B, forward_only=forward_only,
    )
    if not out:
        return None
    return out[0] if forward_only else out[0]["loss"].item()


def check_logits(model, hf, ids, vocab):
    from megatron.core import parallel_state as ps

    with torch.no_grad():
        local = run_schedule(model, ids, None, forward_only=True)
        ref = hf(ids).logits
    if local is None:
        return None
    shards = [torch.empty_like(local) for _ in range(ps.get_tensor_model_parallel_world_size())]
    dist.all_gather(shards, local.contiguous(), group=ps.get_tensor_model_parallel_group())
    logits = torch.cat(shards, dim=-1)[..., :vocab]
    return {"max_abs_diff": (logits - ref).abs().max().item(), "max_abs_logit": ref.abs().max().item()}


def check_roundtrip(model, hf, layout):
    from openrlhf_speed.backends.megatron.weights import iter_hf_weights

    ref = hf.state_dict()
    if layout.tie_embeddings:
        ref.pop("lm_head.weight", None)
    names, bad = [], []
    for name, tensor in iter_hf_weights(model, layout):
        names.append(name)
        if name not in ref or not torch.equal(ref[name], tensor):
            bad.append(name)
    missing = sorted(set(ref) - set(names))
    return {"n_exported": len(names), "n_reference": len(ref), "not_equal": bad, "missing": missing}


def hf_train(hf, ids, labels, steps):
    opt = torch.optim.AdamW(hf.parameters(), lr=LR, weight_decay=0.0)
    losses, norms = [], []
    for _ in range(steps):
        logits = hf(ids).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, :-1].reshape(-1))
        opt.zero_grad()
        loss.backward()
        norms.append(torch.sqrt(sum(p.grad.double().pow(2).sum() for p in hf.parameters())).item())
        losses.append(loss.item())
        opt.step()
    return {"loss": losses, "grad_norm": norms}


def check_train(model, ids, labels, steps=2):
    from openrlhf_speed.backends.megatron.train_utils import (
        MasterWeightsAdamW,
        allreduce_tied_embedding_grads,
        grad_norm,
    )

    if next(model.parameters()).dtype == torch.float32:
        opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    else:  # bf16 parameters: fp32 master weights and main grads, as the actor does
        opt = MasterWeightsAdamW([{"params": list(model.parameters()), "weight_decay": 0.0}], lr=LR)
    losses, norms = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = run_schedule(model, ids, labels, forward_only=False)
        allreduce_tied_embedding_grads(model)
        norms.append(grad_norm(model))
        losses.append(loss)
        opt.step()
    return {"loss": losses, "grad_norm": norms}


def run_case(arch, model_path, checks, tp, pp, dtype=torch.float32):
    from megatron.core import parallel_state as ps

    from openrlhf_speed.backends.megatron.model import build_gpt_model, gpt_config_from_hf
    from openrlhf_speed.backends.megatron.weights import HFCheckpoint, WeightLayout, load_hf_weights

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    hf = build_hf(arch, model_path).to(device)
    config, spec = gpt_config_from_hf(hf.config, tp_size=tp, pp_size=pp, params_dtype=dtype)
    layout = WeightLayout.from_hf(hf.config, tp, pp, te_names=spec.use_te)
    model = build_gpt_model(config, spec)
    source = HFCheckpoint(model_path, dtype=torch.float32) if model_path else hf.state_dict()
    load_hf_weights(model, source, layout, ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank())
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, hf.config.vocab_size, (B, T), generator=gen).to(device)
    labels = torch.roll(ids, -1, dims=1)  # next token; the last position is masked out
    result = {}
    if "logits" in checks:
        result["logits"] = check_logits(model, hf, ids, hf.config.vocab_size)
    if "roundtrip" in checks and dtype == torch.float32:
        result["roundtrip"] = check_roundtrip(model, hf, layout)
    if "train" in checks:
        result["train"] = check_train(model, ids, labels)
        result["hf_train"] = hf_train(hf, ids, labels, steps=2)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--archs", default="llama,qwen2", help="tiny random models; '' for none")
    parser.add_argument("--checks", default="logits,roundtrip,train")
    parser.add_argument("--smollm2", default="", help="HF folder of SmolLM2-135M: logits + round trip")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="Megatron parameters (HF stays fp32)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    torch.set_num_threads(1)
    if torch.cuda.is_available():  # the GPU path: NCCL, Megatron's own CUDA code (no shims)
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        # TF32 would make the fp32 comparison meaningless.
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    from openrlhf_speed.backends.megatron.model import init_model_parallel

    init_model_parallel(args.tp, args.pp, seed=1234)
    checks = args.checks.split(",")
    results = {
        arch: run_case(arch, "", checks, args.tp, args.pp, dtype) for arch in filter(None, args.archs.split(","))
    }
    if args.smollm2:
        results["smollm2"] = run_case("smollm2", args.smollm2, ["logits", "roundtrip"], args.tp, args.pp)
    with open(os.path.join(args.out, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
