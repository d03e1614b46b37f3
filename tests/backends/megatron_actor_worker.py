"""Per-rank body of test_megatron_actor_ops.py: `actor_ops` against OpenRLHF's own actor.

Run as `python -m torch.distributed.run --nproc_per_node 2 megatron_actor_worker.py --out D`.
One launch runs every layout in turn (re-initialising Megatron's groups between them, which
saves a process start per layout): TP=1 (2 data-parallel replicas of the same batch), TP=2
with a padded vocabulary, and PP=2. For each tiny model (from megatron_worker.py) it writes
`<out>/rank<r>.json` with, per layout and model:
- logprobs: max |OpenRLHF Actor - actor_ops.action_log_probs| over [B, A], and max |log p|;
- train: loss and grad norm of two `policy_step`s, and of the same two steps done the
  OpenRLHF way on the HF model (Actor + PolicyLoss [+ KL loss - entropy] + clip_grad_norm_
  + the optimizer step).
Shapes: sequences [B, T], right-padded; action_mask / log-probs / advantages [B, A = T-1].
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

from megatron_worker import build_hf

LENGTHS = (16, 11, 7)  # real tokens per row; the rest is right padding
PROMPTS = (5, 3, 4)  # prompt tokens per row; the remainder of each row is the response
T = 16
TEMPERATURE = 0.7
MAX_NORM, STEPS = 1.0, 2
# Per model, one of OpenRLHF's loss set-ups: token-mean PPO loss + k3 KL loss + entropy
# bonus (llama), or sequence-mean PPO loss alone (qwen2).
TOKEN_LEVEL = {"llama": True, "qwen2": False}
EXTRA_LOSSES = {
    "llama": dict(kl_coef=0.05, kl_estimator="k3", entropy_coef=0.01),
    "qwen2": dict(),
}
# pad: `vocab_divisible_by`; at TP=2 it pads the 128-token vocabulary to 132 rows.
LAYOUTS = {"tp1": dict(tp=1, pp=1, pad=1), "tp2": dict(tp=2, pp=1, pad=3), "pp2": dict(tp=1, pp=2, pad=1)}


def make_optimizer(arch, params):
    """AdamW (what the actor uses) for llama; SGD for qwen2, whose update scales with the
    clipped gradient, so its second step also checks the clipping (AdamW's update nearly
    ignores the gradient's scale)."""
    if arch == "llama":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
    return torch.optim.SGD(params, lr=0.5)


def make_batch(vocab: int):
    """An Experience as OpenRLHF 0.11 batches them: right-padded rows, action_mask = the
    response tokens shifted by one (`action_mask[1:]`), old log-probs and RLOO-style
    per-sequence advantages. Old log-probs are filled in later (they need a model)."""
    gen = torch.Generator().manual_seed(7)
    B = len(LENGTHS)
    sequences = torch.randint(0, vocab, (B, T), generator=gen)
    attention_mask = torch.zeros(B, T, dtype=torch.long)
    action_mask = torch.zeros(B, T - 1, dtype=torch.bool)
    for row, (length, prompt) in enumerate(zip(LENGTHS, PROMPTS)):
        attention_mask[row, :length] = 1
        sequences[row, length:] = 0  # pad token id
        action_mask[row, prompt - 1 : length - 1] = True
    advantages = torch.randn(B, 1, generator=gen).expand(B, T - 1) * action_mask
    # Old (and reference) policy != current: ratios clip, the KL is not zero.
    noise = 0.3 * torch.randn(2, B, T - 1, generator=gen)
    return sequences, attention_mask, action_mask, advantages, noise


def policy_loss(arch):
    from openrlhf.models.loss import PolicyLoss

    return PolicyLoss(clip_eps_low=0.2, clip_eps_high=0.28, token_level_loss=TOKEN_LEVEL[arch])


def hf_loss(actor, exp, loss_fn, arch):
    """`ActorPPOTrainer.training_step`'s loss, line for line (no dynamic batch, no aux loss)."""
    from openrlhf.models.loss import aggregate_loss
    from openrlhf.models.utils import compute_approx_kl

    extra = EXTRA_LOSSES[arch]
    entropy_coef = extra.get("entropy_coef")
    log_probs, output = actor(
        exp.sequences, exp.action_mask, attention_mask=exp.attention_mask, return_output=True,
        return_entropy=entropy_coef is not None,
    )
    loss = loss_fn(log_probs, exp.action_log_probs, exp.advantages, action_mask=exp.action_mask)[0]
    if extra.get("kl_coef", 0) > 0:
        kl = compute_approx_kl(
            log_probs, exp.base_action_log_probs, log_probs_old=exp.action_log_probs,
            kl_estimator=extra["kl_estimator"],
        )
        loss = loss + aggregate_loss(kl, exp.action_mask) * extra["kl_coef"]
    if entropy_coef is not None:
        entropy = output.entropy[:, -exp.action_mask.shape[1] :]
        loss = loss - aggregate_loss(entropy, exp.action_mask) * entropy_coef
    return loss


def hf_reference(arch, batch):
    """OpenRLHF's DeepSpeed-actor maths on the HF model: log-probs, then STEPS updates.
    Returns the log-probs [B, A], the Experience trained on, and the steps' numbers."""
    from openrlhf.models.actor import Actor
    from openrlhf.trainer.ppo_utils.experience import Experience

    sequences, attention_mask, action_mask, advantages, noise = batch
    actor = Actor(build_hf(arch, ""), temperature=TEMPERATURE)
    actor.packing_samples = False  # upstream sets it only when Actor loads the model itself
    with torch.no_grad():
        log_probs = actor(sequences, action_mask, attention_mask=attention_mask)
    exp = Experience(
        sequences=sequences, attention_mask=attention_mask, action_mask=action_mask,
        action_log_probs=(log_probs + noise[0]) * action_mask,
        base_action_log_probs=(log_probs + noise[1]) * action_mask, advantages=advantages,
    )
    loss_fn = policy_loss(arch)
    opt = make_optimizer(arch, actor.parameters())
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = hf_loss(actor, exp, loss_fn, arch)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(actor.parameters(), MAX_NORM).item())
        losses.append(loss.item())
        opt.step()
    return log_probs, exp, {"loss": losses, "grad_norm": norms}


def run_layout(arch, layout, batch, ref_log_probs, exp):
    from megatron.core import parallel_state as ps

    from openrlhf_speed.backends.megatron.actor_ops import PolicyStepConfig, action_log_probs, policy_step
    from openrlhf_speed.backends.megatron.model import build_gpt_model, gpt_config_from_hf, init_model_parallel
    from openrlhf_speed.backends.megatron.weights import WeightLayout, load_hf_weights

    tp, pp, pad = layout["tp"], layout["pp"], layout["pad"]
    init_model_parallel(tp, pp, seed=1234)
    hf = build_hf(arch, "")
    config, spec = gpt_config_from_hf(hf.config, tp_size=tp, pp_size=pp, vocab_divisible_by=pad)
    weights = WeightLayout.from_hf(hf.config, tp, pp, te_names=spec.use_te, vocab_divisible_by=pad)
    model = build_gpt_model(config, spec)
    tp_rank, pp_rank = ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
    load_hf_weights(model, hf.state_dict(), weights, tp_rank, pp_rank)
    sequences, attention_mask, action_mask, _, _ = batch
    vocab = spec.hf_vocab_size
    log_probs = action_log_probs(model, sequences, attention_mask, action_mask, TEMPERATURE, vocab_size=vocab)
    result = {
        "padded_vocab": spec.padded_vocab_size,
        "logprobs": {
            "max_abs_diff": (log_probs - ref_log_probs).abs().max().item(),
            "max_abs_logprob": ref_log_probs.abs().max().item(),
        },
    }
    opt = make_optimizer(arch, model.parameters())
    cfg = PolicyStepConfig(temperature=TEMPERATURE, max_norm=MAX_NORM, vocab_size=vocab, **EXTRA_LOSSES[arch])
    losses, norms = [], []
    for _ in range(STEPS):
        out = policy_step(model, opt, exp, policy_loss(arch), cfg, dp_group=ps.get_data_parallel_group())
        losses.append(out["loss"])
        norms.append(out["grad_norm"])
    result["train"] = {"loss": losses, "grad_norm": norms}
    return result


def check_fit(arch, exp):
    """`fit.run_fit` with gradient accumulation (3 micro-batches of 1 row per optimizer step)
    against one micro-batch of all 3 rows, from the same weights, at TP=1 with 2 DP ranks:
    the window's global token mean and the 1 / gas scaling must give the same update."""
    from types import SimpleNamespace as NS

    from megatron.core import parallel_state as ps
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    from openrlhf_speed.backends.megatron.fit import run_fit
    from openrlhf_speed.backends.megatron.model import build_gpt_model, gpt_config_from_hf, init_model_parallel
    from openrlhf_speed.backends.megatron.weights import WeightLayout, load_hf_weights

    init_model_parallel(1, 1, seed=1234)
    dp = ps.get_data_parallel_world_size()
    out = {}
    for micro in (1, 3):
        hf = build_hf(arch, "")
        config, spec = gpt_config_from_hf(hf.config)
        model = build_gpt_model(config, spec)
        load_hf_weights(model, hf.state_dict(), WeightLayout.from_hf(hf.config), 0, 0)
        # SGD: the update is linear in the gradient (AdamW's g / sqrt(v) amplifies rounding
        # in near-zero gradient entries).
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        args = NS(
            train=NS(batch_size=3 * dp, micro_batch_size=micro, max_epochs=1, seed=0),
            rollout=NS(temperature=TEMPERATURE), actor=NS(max_norm=MAX_NORM, entropy_coef=None),
            algo=NS(kl=NS(use_loss=False, init_coef=0.0, estimator="k1", unbiased_gradient=False)),
        )
        buffer = NaiveReplayBuffer(micro, 0, True, False, False)
        buffer.append(exp)
        actor = NS(args=args, dp_group=ps.get_data_parallel_group(), spec=spec, model=model, replay_buffer=buffer,
                   loss_fn=policy_loss(arch), optimizer=opt, fits=1,
                   scheduler=torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0))
        status = run_fit(actor, kl_ctl=0.0)
        out[micro] = {"status": status, "params": [p.detach().clone() for p in model.parameters()]}
    diff = max((a - b).abs().max().item() for a, b in zip(out[1]["params"], out[3]["params"]))
    moved = max((a - b).abs().max().item() for a, b in zip(out[1]["params"], build_hf_params(arch)))
    return {"max_param_diff": diff, "max_param_update": moved,
            "grad_norm": [out[m]["status"]["actor_grad_norm"] for m in (1, 3)],
            "policy_loss": [out[m]["status"]["policy_loss"] for m in (1, 3)]}


def build_hf_params(arch):
    from openrlhf_speed.backends.megatron.model import build_gpt_model, gpt_config_from_hf
    from openrlhf_speed.backends.megatron.weights import WeightLayout, load_hf_weights

    hf = build_hf(arch, "")
    config, spec = gpt_config_from_hf(hf.config)
    model = build_gpt_model(config, spec)
    load_hf_weights(model, hf.state_dict(), WeightLayout.from_hf(hf.config), 0, 0)
    return [p.detach() for p in model.parameters()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--archs", default="llama,qwen2")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    import openrlhf_speed.compat as compat

    compat.install()  # before openrlhf's modules: they import flash_attn at load time
    results = {}
    for arch in args.archs.split(","):
        batch = make_batch(build_hf(arch, "").config.vocab_size)
        ref_log_probs, exp, hf_train = hf_reference(arch, batch)
        results[arch] = {"hf_train": hf_train}
        for name in args.layouts.split(","):
            results[arch][name] = run_layout(arch, LAYOUTS[name], batch, ref_log_probs, exp)
        results[arch]["fit"] = check_fit(arch, exp)
    with open(os.path.join(args.out, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
