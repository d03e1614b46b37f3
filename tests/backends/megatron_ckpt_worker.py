"""Per-rank body of test_megatron_checkpoint.py: `checkpoint.py` on 2 CPU ranks (gloo).

Run as `python -m torch.distributed.run --nproc_per_node 2 megatron_ckpt_worker.py --out D`.
One launch runs TP=2 then PP=2 (re-initialising Megatron's groups in between), for the
tiny random Llama (tied) and Qwen2 of megatron_worker.py. Per layout and model it writes
into `<out>/rank<r>.json`:
- resume: one AdamW step (LambdaLR warm-up), save, one more step (recorded); a fresh model
  with other weights and a fresh optimizer load the checkpoint and take the same step: its
  loss, parameters, LR and RNG draws must equal the recorded ones bit for bit;
- export: HF folders written by `export_hf` (one shard; 64 KiB shards; bf16 for qwen2 at
  TP=2), loaded back with `AutoModelForCausalLM.from_pretrained` and compared with the HF
  model the weights came from (rank 0);
- at PP=2, the TP=2 checkpoint: its model part loaded at PP=2 (resharded), and the refusal
  to load its optimizer;
- at TP=2 for llama: `max_num` pruning, re-saving a tag, and a save that fails midway.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

from megatron_worker import B, T, build_hf, run_schedule

LAYOUTS = {"tp2": (2, 1), "pp2": (1, 2)}
ARCHS = ("llama", "qwen2")
LR, WARMUP = 1e-2, 4
SMALL_SHARD = 64 * 1024  # the tiny models are ~280 KiB in fp32: several shards


def build(arch, tp, pp):
    from megatron.core import parallel_state as ps

    from openrlhf_speed.backends.megatron.model import build_gpt_model, gpt_config_from_hf, init_model_parallel
    from openrlhf_speed.backends.megatron.weights import WeightLayout, load_hf_weights

    init_model_parallel(tp, pp, seed=1234)
    hf = build_hf(arch, "")
    config, spec = gpt_config_from_hf(hf.config, tp_size=tp, pp_size=pp)
    layout = WeightLayout.from_hf(hf.config, tp, pp, te_names=spec.use_te)
    model = build_gpt_model(config, spec)
    load_hf_weights(model, hf.state_dict(), layout, ps.get_tensor_model_parallel_rank(),
                    ps.get_pipeline_model_parallel_rank())
    # Weight decay and a warm-up make the parameter groups and the scheduler's position matter.
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP))
    return hf, model, layout, opt, sched


def train_step(model, opt, sched, batch):
    from openrlhf_speed.backends.megatron.train_utils import allreduce_tied_embedding_grads

    opt.zero_grad()
    loss = run_schedule(model, *batch, forward_only=False)  # None off the last stage
    allreduce_tied_embedding_grads(model)
    opt.step()
    sched.step()
    return loss


def rng_draws():
    from megatron.core import tensor_parallel

    with tensor_parallel.get_cuda_rng_tracker().fork():
        tracked = torch.rand(3).tolist()
    return torch.rand(3).tolist() + tracked


def snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def not_equal(model, ref):
    return sorted(n for n, p in model.named_parameters() if not torch.equal(p, ref[n]))


def compare_hf_folder(folder, hf, dtype):
    """(rank 0) from_pretrained(folder) against the source HF model, tensor by tensor."""
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    ref = {k: v.to(dtype) for k, v in hf.state_dict().items()}
    got = loaded.state_dict()
    bad = sorted(k for k in ref if k not in got or not torch.equal(got[k], ref[k]))
    return {"n_tensors": len(got), "n_reference": len(ref), "not_equal": bad,
            "dtypes": sorted({str(v.dtype) for v in got.values()})}


def check_export(name, arch, hf, model, layout, out):
    from openrlhf_speed.backends.megatron.checkpoint import export_hf

    variants = {"single": (torch.float32, 2**30), "sharded": (torch.float32, SMALL_SHARD)}
    if name == "tp2" and arch == "qwen2":
        variants["bf16"] = (torch.bfloat16, 2**30)
    result = {}
    for variant, (dtype, shard_bytes) in variants.items():
        folder = os.path.join(out, f"hf_{name}_{arch}_{variant}")
        export_hf(model, layout, folder, hf.config, dtype=dtype, shard_bytes=shard_bytes)
        if dist.get_rank() == 0:
            result[variant] = {"folder": folder, **compare_hf_folder(folder, hf, dtype)}
    return result


def check_resume(name, arch, out, batch):
    from openrlhf_speed.backends.megatron.checkpoint import load_checkpoint, save_checkpoint
    from openrlhf_speed.backends.megatron.weights import iter_hf_weights

    tp, pp = LAYOUTS[name]
    hf, model, layout, opt, sched = build(arch, tp, pp)
    result = {"export": check_export(name, arch, hf, model, layout, out)}
    ckpt = os.path.join(out, f"ckpt_{name}_{arch}")
    client = {"global_step": 1, "arch": arch, "episode": {"consumed": [3, 5]}}
    train_step(model, opt, sched, batch)
    save_checkpoint(ckpt, "global_step1", model, opt, sched, client, max_num=3)
    saved = snapshot(model)
    if name == "tp2":  # the reference for loading this checkpoint at PP=2
        weights = dict(iter_hf_weights(model, layout))
        if dist.get_rank() == 0:
            torch.save(weights, os.path.join(out, f"weights_tp2_{arch}.pt"))
    draws = rng_draws()
    loss = train_step(model, opt, sched, batch)
    after = snapshot(model)

    _, model2, _, opt2, sched2 = build(arch, tp, pp)
    gen = torch.Generator().manual_seed(99)  # other weights than the saved ones
    with torch.no_grad():
        for p in model2.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    differs_before = bool(not_equal(model2, saved))
    loaded_client = load_checkpoint(ckpt, model2, opt2, sched2)
    not_equal_loaded = not_equal(model2, saved)
    draws2 = rng_draws()
    loss2 = train_step(model2, opt2, sched2, batch)
    with open(os.path.join(ckpt, "latest")) as f:
        latest = f.read()
    result["resume"] = {
        "loss": loss, "loss_resumed": loss2, "differs_before_load": differs_before,
        "not_equal_after_load": not_equal_loaded, "not_equal_after_step": not_equal(model2, after),
        "lr": sched.get_last_lr(), "lr_resumed": sched2.get_last_lr(), "rng": draws, "rng_resumed": draws2,
        "client_saved": client, "client_loaded": loaded_client, "latest": latest,
        "files": sorted(os.path.relpath(os.path.join(d, f), ckpt) for d, _, fs in os.walk(ckpt) for f in fs),
    }
    if name == "tp2" and arch == "llama":
        result["lifecycle"] = check_lifecycle(out, model, opt, sched)
    return result


class _FailingOptimizer:
    """An optimizer whose state cannot be read: the save fails after the model is written."""

    def __init__(self, opt):
        self.param_groups = opt.param_groups

    def state_dict(self):
        raise RuntimeError("simulated crash while writing the optimizer state")


def check_lifecycle(out, model, opt, sched):
    from openrlhf_speed.backends.megatron.checkpoint import load_checkpoint, save_checkpoint

    ckpt = os.path.join(out, "ckpt_lifecycle")
    for step in range(1, 5):
        save_checkpoint(ckpt, f"global_step{step}", model, opt, sched, {"global_step": step}, max_num=2)
    listed = lambda: sorted(os.listdir(ckpt))  # noqa: E731
    result = {"after_four_saves": listed()}
    save_checkpoint(ckpt, "global_step4", model, opt, sched, {"global_step": 40}, max_num=2)
    result["resaved_client"] = load_checkpoint(ckpt, model, opt, sched)
    result["after_resave"] = listed()
    # Every rank is a data-parallel rank 0 here, so every rank fails at the same point.
    try:
        save_checkpoint(ckpt, "global_step5", model, _FailingOptimizer(opt), sched, {"global_step": 5}, max_num=2)
        result["failed_save_raised"] = False
    except RuntimeError:
        result["failed_save_raised"] = True
    dist.barrier()
    result["after_failed_save"] = listed()
    result["client_after_failed_save"] = load_checkpoint(ckpt, model, opt, sched)
    save_checkpoint(ckpt, "global_step5", model, opt, sched, {"global_step": 5}, max_num=2)
    result["after_retry"] = listed()
    with open(os.path.join(ckpt, "latest")) as f:
        result["latest_after_retry"] = f.read()
    return result


def check_reshard(arch, out):
    """At PP=2: the TP=2 checkpoint's model, and the refusal of its optimizer."""
    from openrlhf_speed.backends.megatron.checkpoint import load_checkpoint
    from openrlhf_speed.backends.megatron.weights import iter_hf_weights

    _, model, layout, opt, sched = build(arch, *LAYOUTS["pp2"])
    ckpt = os.path.join(out, f"ckpt_tp2_{arch}")
    try:
        load_checkpoint(ckpt, model, opt, sched)
        refusal = None
    except ValueError as err:
        refusal = str(err)
    client = load_checkpoint(ckpt, model)
    ref = torch.load(os.path.join(out, f"weights_tp2_{arch}.pt"))
    names = []
    bad = [n for n, t in iter_hf_weights(model, layout) if names.append(n) or not torch.equal(t, ref[n])]
    return {"refusal": refusal, "client": client, "not_equal": bad, "n_compared": len(names), "n_reference": len(ref)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    results = {}
    for arch in ARCHS:
        vocab = build_hf(arch, "").config.vocab_size
        ids = torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(1))
        batch = (ids, torch.roll(ids, -1, dims=1))
        results[arch] = {name: check_resume(name, arch, args.out, batch) for name in LAYOUTS}
        results[arch]["reshard"] = check_reshard(arch, args.out)
    with open(os.path.join(args.out, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":  # dist_checkpointing's writer spawns a process that imports this file
    main()
