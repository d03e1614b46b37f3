"""One rank of the DeepSpeed actor check (launched by test_deepspeed_gpu.py with
torch.distributed.run; a script, not a test module, so that spawned ranks can import it).

OpenRLHF's own actor path without Ray: `DeepspeedStrategy` + `Actor` + `strategy.prepare`,
as `PolicyModelActor.init_model_from_pretrained` does it, on the shipped proving model in
bf16 with the 7B recipes' ZeRO stage and optimizer placement. It writes `<out>/rank<r>.json`:
- the optimizer DeepSpeed built (FusedAdam on the GPU, DeepSpeedCPUAdam with --adam_offload)
  and the seconds `prepare` took (the Adam op is built or loaded there);
- the actor's response log-probs before training against the same `Actor` in fp32 on the CPU;
- the loss and gradient norm of a few optimizer steps on one fixed batch.
On a machine without CUDA it runs through the CPU mode's shims (to try the script itself).
"""

import argparse
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from openrlhf_speed import compat


def _args(ns):
    ds = SimpleNamespace(param_dtype=ns.dtype, adam_offload=ns.adam_offload, zero_stage=ns.zero_stage,
                         attn_implementation="sdpa", packing_samples=False)
    return SimpleNamespace(local_rank=-1, ds=ds, train=SimpleNamespace(dynamic_batch_enable=False), optim="adam")


def _batch(tokenizer, model_dir: Path, n: int):
    """n held-out prompts with a sampled response each (temperature 1, seeded, from the fp32
    model on the CPU), laid out as OpenRLHF lays out a rollout: left-padded prompts,
    right-padded responses that end with the end-of-sequence token."""
    from transformers import AutoModelForCausalLM

    rows = [json.loads(line) for line in (model_dir / "data" / "test.jsonl").read_text().splitlines()[:n]]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    torch.manual_seed(0)
    p_ids, r_ids = [], []
    for row in rows:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, return_dict=True,
                                            return_tensors="pt")["input_ids"]
        out = model.generate(ids, do_sample=True, temperature=1.0, top_k=0, max_new_tokens=64,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        resp = out[0, ids.shape[1]:].tolist()
        if tokenizer.eos_token_id in resp:
            resp = resp[:resp.index(tokenizer.eos_token_id) + 1]
        p_ids.append(ids[0].tolist())
        r_ids.append(resp)
    P, R, pad = max(map(len, p_ids)), max(map(len, r_ids)), tokenizer.pad_token_id
    seqs = [[pad] * (P - len(p)) + p + r + [pad] * (R - len(r)) for p, r in zip(p_ids, r_ids)]
    sequences = torch.tensor(seqs)
    attention_mask = torch.zeros_like(sequences)
    action_mask = torch.zeros(len(seqs), R, dtype=torch.long)
    for i, (p, r) in enumerate(zip(p_ids, r_ids)):
        attention_mask[i, P - len(p):P + len(r)] = 1
        action_mask[i, :len(r)] = 1
    return sequences, attention_mask, action_mask


def _logprobs(actor, batch, device):
    sequences, attention_mask, action_mask = (t.to(device) for t in batch)
    return actor(sequences, action_mask=action_mask, attention_mask=attention_mask).float(), action_mask


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--zero_stage", type=int, default=3)
    p.add_argument("--adam_offload", action="store_true")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-4)
    ns = p.parse_args()
    compat.install()  # flash_attn stand-ins when it is not installed; the CUDA shims on CPU only
    print(compat.device.fix_deepspeed_arch_list() or "TORCH_CUDA_ARCH_LIST kept", flush=True)  # as our actor does
    on_gpu = torch.cuda.is_available()

    from openrlhf.models import Actor
    from openrlhf.utils.deepspeed import DeepspeedStrategy
    from transformers import AutoTokenizer

    model_dir = Path(ns.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = _batch(tokenizer, model_dir, 16)
    n = batch[0].shape[0]

    ref = Actor(str(model_dir), attn_implementation="sdpa", param_dtype="fp32")
    with torch.no_grad():
        ref_lp, mask = _logprobs(ref.eval(), batch, "cpu")
    del ref

    args = _args(ns)
    strategy = DeepspeedStrategy(seed=42, max_norm=1.0, micro_train_batch_size=n, train_batch_size=n,
                                 zero_stage=ns.zero_stage, args=args)
    strategy.setup_distributed()
    actor = Actor(str(model_dir), attn_implementation="sdpa", param_dtype=ns.dtype,
                  ds_config=strategy.get_ds_train_config(), packing_samples=False)
    cfg = dict(optim="adam", muon={}, adam=dict(lr=ns.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0),
               lr_scheduler="constant", lr_warmup_ratio=0.0, min_lr_ratio=1.0, max_norm=1.0,
               scheduler_steps=ns.steps)
    t0 = time.perf_counter()
    actor, optim, sched = strategy.prepare((actor, cfg))
    prepare_s = time.perf_counter() - t0
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")

    actor.eval()
    with torch.no_grad():
        lp0, _ = _logprobs(actor, batch, device)
    diff = ((lp0.cpu() - ref_lp) * mask).abs()
    actor.train()
    losses, norms, step_s = [], [], []
    for _ in range(ns.steps):
        t0 = time.perf_counter()
        lp, m = _logprobs(actor, batch, device)
        loss = -(lp * m).sum() / m.sum()
        strategy.backward(loss, actor, optim)
        strategy.optimizer_step(optim, actor, sched)
        norms.append(float(strategy.get_grad_norm(actor)))
        losses.append(float(loss))
        if on_gpu:
            torch.cuda.synchronize()
        step_s.append(time.perf_counter() - t0)
    engine = actor.model
    basic = getattr(engine, "basic_optimizer", None) or engine.optimizer
    res = {
        "device": torch.cuda.get_device_name() if on_gpu else "cpu",
        "torch": torch.__version__,
        "deepspeed": __import__("deepspeed").__version__,
        "zero_stage": ns.zero_stage, "adam_offload": ns.adam_offload, "dtype": ns.dtype,
        "param_dtype": str(next(engine.module.parameters()).dtype),
        "optimizer": type(basic).__name__,
        "prepare_s": round(prepare_s, 2),
        "logprob_vs_fp32_cpu": {"max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.sum() / mask.sum()),
                                 "n_tokens": int(mask.sum()), "mean_fp32_logprob": float((ref_lp * mask).sum() / mask.sum())},
        "train": {"loss": losses, "grad_norm": norms, "step_s": [round(s, 3) for s in step_s]},
    }
    rank = int(os.environ.get("RANK", 0))
    Path(ns.out, f"rank{rank}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
