"""One measurement of the memory plan's check on a GPU (run by test_memory_plan_gpu.py as one
torch.distributed.run rank; a script, not a test module, so the spawned rank can import it).

A Qwen2.5 architecture (0.5B, 1.5B or 7B dimensions) with random bf16 weights, nothing
downloaded, trained as the recipes train it; writes `<out>/rank0.json` with the measured
peaks, the plan's figures for the same layout on one GPU (memory/arithmetic.py), and the
step time per token. Modes:
- deepspeed, deepspeed_offload: OpenRLHF's DeepspeedStrategy + Actor, ZeRO-3, gradient
  checkpointing, `--micro` rows of `--max_len` tokens (the 7B recipes: 2 x 4096), Adam on
  the GPU (FusedAdam) or on the host (DeepSpeed's CPU Adam); then one no-grad log-prob
  forward of 2 x micro rows. Peak GPU memory (torch.cuda.max_memory_allocated) against the
  plan's states + the larger activation figure; with offload the process's peak RSS against
  DeepSpeed's host estimate + one GPU process.
- megatron: the Megatron actor's GPTModel at TP 1, bf16 with fp32 master weights
  (MasterWeightsAdamW), --megatron.recompute full, one row of --max_len (the 32B recipe's).
- activations: where the states do not fit one GPU (7B), OpenRLHF's Actor over the HF model
  on the GPU without DeepSpeed: forward and backward only, no optimizer; the peak above the
  weights and their bf16 gradients against the plan's activation figure.
On a machine without CUDA it runs through the CPU mode's shims with --tiny dimensions (to
try the script itself; its figures mean nothing there).
"""

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path

import torch

from openrlhf_speed import compat

# Qwen2.5's published dimensions (the 1.5B and 7B are Qwen2.5-Math's too)
SIZES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}
TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=256, tie_word_embeddings=False)
PROMPT_SHARE = 0.25  # the recipes: 1024 prompt + 3072 response tokens of 4096


def qwen_config(size: str, max_len: int, tiny: bool):
    from transformers import Qwen2Config

    dims = TINY if tiny else SIZES[size]
    return Qwen2Config(max_position_embeddings=max(max_len, 4096), rms_norm_eps=1e-6, rope_theta=10000.0,
                       torch_dtype="bfloat16", **dims)


def random_model_folder(config, root: Path) -> Path:
    """Random bf16 weights saved once per size (OpenRLHF's Actor under ZeRO-3 loads a folder)."""
    folder = root / f"qwen2-{config.hidden_size}x{config.num_hidden_layers}"
    if not (folder / "config.json").exists():
        from transformers import AutoModelForCausalLM

        device = "cuda" if torch.cuda.is_available() else "cpu"
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(folder)
        del model
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return folder


def batch(rows: int, max_len: int, vocab: int, device):
    """rows x max_len random tokens; the last (1 - PROMPT_SHARE) of each row is the response."""
    gen = torch.Generator().manual_seed(0)
    sequences = torch.randint(0, vocab, (rows, max_len), generator=gen)
    response = int(max_len * (1 - PROMPT_SHARE))
    attention_mask = torch.ones_like(sequences)
    action_mask = torch.ones(rows, response, dtype=torch.long)
    return sequences.to(device), attention_mask.to(device), action_mask.to(device)


def peak_gib() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0


def reset_peak():
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def run_deepspeed(ns, config, device) -> dict:
    from openrlhf.models import Actor
    from openrlhf.utils.deepspeed import DeepspeedStrategy
    from types import SimpleNamespace

    folder = random_model_folder(config, Path(ns.models))
    ds = SimpleNamespace(param_dtype="bf16", adam_offload=ns.mode == "deepspeed_offload", zero_stage=3,
                         attn_implementation="sdpa", packing_samples=False)
    args = SimpleNamespace(local_rank=-1, ds=ds, train=SimpleNamespace(dynamic_batch_enable=False), optim="adam")
    strategy = DeepspeedStrategy(seed=42, max_norm=1.0, micro_train_batch_size=ns.micro,
                                 train_batch_size=ns.micro, zero_stage=3, args=args)
    strategy.setup_distributed()
    actor = Actor(str(folder), attn_implementation="sdpa", param_dtype="bf16",
                  ds_config=strategy.get_ds_train_config(), packing_samples=False)
    actor.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    cfg = dict(optim="adam", muon={}, adam=dict(lr=1e-6, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
               lr_scheduler="constant", lr_warmup_ratio=0.0, min_lr_ratio=1.0, max_norm=1.0, scheduler_steps=ns.steps)
    actor, optim, sched = strategy.prepare((actor, cfg))
    states = torch.cuda.memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    seqs, attn, action = batch(ns.micro, ns.max_len, config.vocab_size, device)

    def step():
        lp = actor(seqs, action_mask=action, attention_mask=attn)
        loss = -(lp.float() * action).sum() / action.sum()
        strategy.backward(loss, actor, optim)
        strategy.optimizer_step(optim, actor, sched)

    reset_peak()
    actor.train()
    step_s = [timed(step) for _ in range(ns.steps)]
    train_peak = peak_gib()
    reset_peak()
    actor.eval()
    fwd = batch(2 * ns.micro, ns.max_len, config.vocab_size, device)
    with torch.no_grad():
        actor(fwd[0], action_mask=fwd[2], attention_mask=fwd[1])
    return {"states_gib": states, "train_peak_gib": train_peak, "forward_peak_gib": peak_gib(), "step_s": step_s,
            "optimizer": type(getattr(actor.model, "basic_optimizer", None) or actor.model.optimizer).__name__}


def run_megatron(ns, config, device) -> dict:
    import torch.distributed as dist
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from openrlhf_speed.backends.megatron.model import build_gpt_model, gpt_config_from_hf, init_model_parallel
    from openrlhf_speed.backends.megatron.train_utils import make_optimizer

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    init_model_parallel(1, 1, seed=1234)
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    mconfig, spec = gpt_config_from_hf(config, params_dtype=dtype, recompute_granularity="full",
                                       recompute_method="uniform", recompute_num_layers=1)
    model = build_gpt_model(mconfig, spec)
    optim = make_optimizer(model, 1e-6, (0.9, 0.95), 1e-8, 0.1, master_weights=dtype != torch.float32)
    states = torch.cuda.memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    ids = batch(ns.micro, ns.max_len, config.vocab_size, device)[0]
    labels = torch.roll(ids, -1, dims=1)
    position_ids = torch.arange(ns.max_len, device=device).expand(ns.micro, ns.max_len)

    def forward_step(data_iterator, model):
        output = model(ids, position_ids, None, labels=labels)
        return output, lambda per_token: (per_token.float().mean(), {})

    def step():
        optim.zero_grad()
        get_forward_backward_func()(forward_step_func=forward_step, data_iterator=iter([None]), model=[model],
                                    num_microbatches=1, seq_length=ns.max_len, micro_batch_size=ns.micro,
                                    forward_only=False)
        optim.step()

    reset_peak()
    step_s = [timed(step) for _ in range(ns.steps)]
    return {"states_gib": states, "train_peak_gib": peak_gib(), "step_s": step_s, "use_te": spec.use_te}


def run_activations(ns, config, device) -> dict:
    """The HF model with its weights on the GPU, forward + backward only (bf16 gradients)."""
    from openrlhf.models import Actor
    from transformers import AutoModelForCausalLM

    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    actor = Actor(model, attn_implementation="sdpa", param_dtype="bf16")
    actor.packing_samples, actor.is_vlm = False, False  # set only when Actor loads a folder itself
    actor.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    actor.train()
    seqs, attn, action = batch(ns.micro, ns.max_len, config.vocab_size, device)

    def step():
        lp = actor(seqs, action_mask=action, attention_mask=attn)
        (-(lp.float() * action).sum() / action.sum()).backward()

    step_s = [timed(step)]  # allocates the gradients
    static = torch.cuda.memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0  # weights + gradients
    reset_peak()
    step_s += [timed(step) for _ in range(ns.steps - 1)]
    return {"states_gib": static, "train_peak_gib": peak_gib(), "step_s": step_s}


def plan_figures(ns, config) -> dict:
    """The plan's figures for this layout on one GPU (GiB), what the measurement is held to."""
    from openrlhf_speed.memory import arithmetic

    d = arithmetic.ModelDims.from_config(config.to_dict(), f"qwen2.5-{ns.size}")
    g = arithmetic.GiB
    if ns.mode == "megatron":
        states, step = arithmetic.megatron_states(d, 1, 1, bf16=True)
        act = arithmetic.megatron_activations(d, ns.micro, ns.max_len, 1, 1, "full", False, te=False)
        return {"states": states.nbytes / g, "activations": act.nbytes / g, "step_temporary": step.nbytes / g,
                "peak": (states.nbytes + max(act.nbytes, step.nbytes)) / g}
    act = arithmetic.deepspeed_activations(d, ns.micro, ns.max_len, checkpointing=True)
    if ns.mode == "activations":
        return {"states": 4 * d.params / g, "activations": act.nbytes / g, "peak": (4 * d.params + act.nbytes) / g}
    gpu, host = arithmetic.deepspeed_states(d, 3, ns.mode == "deepspeed_offload", 1, 1)
    fwd = arithmetic.forward_activations(d, 2 * ns.micro, ns.max_len)
    return {"states": gpu.nbytes / g, "activations": act.nbytes / g, "forward": fwd.nbytes / g,
            "peak": (gpu.nbytes + act.nbytes) / g, "forward_peak": (gpu.nbytes + fwd.nbytes) / g,
            "host": (host.nbytes + arithmetic.PROCESS_HOST_BYTES) / g, "params": d.params}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--size", choices=sorted(SIZES), required=True)
    p.add_argument("--mode", choices=["deepspeed", "deepspeed_offload", "megatron", "activations"], required=True)
    p.add_argument("--micro", type=int, default=2)
    p.add_argument("--max_len", type=int, default=4096)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--models", default="/tmp/memory_plan_models", help="where the random weights are saved")
    p.add_argument("--tiny", action="store_true", help="tiny dimensions (to try the script on CPU)")
    ns = p.parse_args()
    compat.install()  # flash_attn stand-ins when it is not installed; the CUDA shims on CPU only
    compat.device.fix_deepspeed_arch_list()  # as the policy actor does before DeepSpeed builds an op
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    config = qwen_config(ns.size, ns.max_len, ns.tiny)
    run = {"deepspeed": run_deepspeed, "deepspeed_offload": run_deepspeed, "megatron": run_megatron,
           "activations": run_activations}[ns.mode]
    measured = run(ns, config, device)
    tokens = ns.micro * ns.max_len
    warm = measured["step_s"][1:] or measured["step_s"]
    measured["s_per_token"] = statistics.median(warm) / tokens
    measured["host_peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    # The allocator's reserved peak beside the allocated one the plan is compared with: what
    # nvidia-smi and an out-of-memory error see (the allocator's cache and fragmentation).
    measured["reserved_peak_gib"] = torch.cuda.max_memory_reserved() / 2**30 if on_gpu else 0.0
    res = {"size": ns.size, "mode": ns.mode, "micro": ns.micro, "max_len": ns.max_len, "tokens_per_step": tokens,
           "device": torch.cuda.get_device_name() if on_gpu else "cpu", "torch": torch.__version__,
           "measured": measured, "plan": plan_figures(ns, config)}
    from importlib import metadata

    for dist in ("deepspeed", "transformers", "openrlhf", "megatron-core"):
        try:
            res[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:  # not installed: that mode does not need it
            res[dist] = None
    Path(ns.out, f"rank{int(os.environ.get('RANK', 0))}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
