"""The memory plan of a run: per GPU for the actor (DeepSpeed or Megatron), the reference
model and the vLLM engines, per host for the RAM, from the parsed train flags and the
model's config.json (no weights), ending with `fits` or with the first thing that does not
fit and the flags that would fix it. Every `--dry_run` prints it (cli/flags.py), and
`openrlhf-speed doctor --plan` runs that dry run with the node's or the cluster's memory.

Rule: the plan never guesses silently. Hardware it cannot see is assumed (an 80 GB GPU,
256 GiB of host RAM, 8 GPUs per node) and its first lines say so (`--plan.*` gives the real
figures); estimates are marked with their margin; a model it cannot read gives "not made"
with the reason, never a made-up figure. The figures and their formulas: memory/arithmetic.py
(DeepSpeed's own estimators for the DeepSpeed actor's states); the parts and their fixes:
memory/parts.py.
"""

import dataclasses

from openrlhf_speed.memory import arithmetic
from openrlhf_speed.memory.arithmetic import GiB, Hardware, Layout, ModelDims
from openrlhf_speed.memory.parts import fixes, parts

ASSUMED_GPU_GIB = 79.2  # an 80 GB A100 / H100, as torch reports its total memory
ASSUMED_HOST_GIB = 256.0
ASSUMED_GPUS_PER_NODE = 8


def add_plan_arguments(parser) -> None:
    g = parser.add_argument_group("memory plan (--plan.*; printed by --dry_run)")
    g.add_argument("--plan.gpu_memory_gib", type=float, default=None,
                   help="GPU memory the plan checks against (default: this node's smallest GPU, else assumed "
                   f"{ASSUMED_GPU_GIB} GiB, an 80 GB card)")
    g.add_argument("--plan.host_memory_gib", type=float, default=None,
                   help="host RAM per node the plan checks against (default: this node's when it has GPUs, else "
                   f"assumed {ASSUMED_HOST_GIB:g} GiB)")
    g.add_argument("--plan.gpus_per_node", type=int, default=None,
                   help="GPUs per node, for the processes sharing a host (default: this node's, else assumed "
                   f"{ASSUMED_GPUS_PER_NODE})")


def local_hardware(gpu_gib=None, host_gib=None, gpus_per_node=None) -> Hardware:
    """The flags' figures, else this node's when it has CUDA GPUs, else the assumed ones."""
    import os

    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    parts = []
    if gpu_gib is None and gpus:
        gpu_gib = min(torch.cuda.get_device_properties(i).total_memory for i in range(gpus)) / GiB
        parts.append(f"GPU {gpu_gib:.1f} GiB ({torch.cuda.get_device_name(0)}, this node)")
    elif gpu_gib is None:
        gpu_gib = ASSUMED_GPU_GIB
        parts.append(f"GPU {gpu_gib:g} GiB (assumed: no CUDA device here; --plan.gpu_memory_gib)")
    else:
        parts.append(f"GPU {gpu_gib:g} GiB (--plan.gpu_memory_gib)")
    if host_gib is None and gpus:
        host_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB
        parts.append(f"host RAM {host_gib:.0f} GiB per node (this node)")
    elif host_gib is None:
        host_gib = ASSUMED_HOST_GIB
        parts.append(f"host RAM {host_gib:g} GiB per node (assumed; --plan.host_memory_gib)")
    else:
        parts.append(f"host RAM {host_gib:g} GiB per node (--plan.host_memory_gib)")
    if gpus_per_node is None:
        gpus_per_node = gpus or ASSUMED_GPUS_PER_NODE
        parts.append(f"{gpus_per_node} GPUs per node ({'this node' if gpus else 'assumed; --plan.gpus_per_node'})")
    else:
        parts.append(f"{gpus_per_node} GPUs per node (--plan.gpus_per_node)")
    return Hardware(gpu_gib * GiB, host_gib * GiB, gpus_per_node, ", ".join(parts))


# -- the plan ---------------------------------------------------------------------------------
def layout_from_args(args) -> Layout:
    """The Layout of the parsed train flags (the SPEED driver's window as SpeedConfig resolves it)."""
    import importlib.util

    from openrlhf_speed.rollout.speed_config import speed_config

    cfg = speed_config(args)
    window = {"speed": False, "first_request": args.rollout.n_samples_per_prompt,
              "inflight_prompts": args.rollout.batch_size}
    if cfg is not None:
        from openrlhf_speed.curriculum import STRATEGIES

        window = {"speed": True, "first_request": STRATEGIES[cfg.strategy].screen_n(cfg),
                  "inflight_prompts": min(cfg.inflight_limit, cfg.buffer_limit),
                  "inflight_responses": cfg.max_inflight_responses or 0}
    mg = args.megatron
    return Layout(
        backend=args.backend, actor_nodes=args.actor.num_nodes, actor_per_node=args.actor.num_gpus_per_node,
        zero_stage=args.ds.zero_stage, adam_offload=args.ds.adam_offload,
        checkpointing=args.actor.gradient_checkpointing_enable, train_micro=args.train.micro_batch_size,
        rollout_micro=args.rollout.micro_batch_size, max_len=args.data.max_len,
        has_ref=args.algo.kl.init_coef > 0, ref_gpus=args.ref.num_nodes * args.ref.num_gpus_per_node,
        ref_nodes=args.ref.num_nodes, ref_colocated=args.train.colocate_actor_ref or args.train.colocate_all,
        ref_offload=args.ref.offload, colocate_all=args.train.colocate_all, tp=mg.tp, pp=mg.pp,
        recompute=mg.recompute, sequence_parallel=mg.sequence_parallel, megatron_bf16=mg.dtype != "fp32",
        te=importlib.util.find_spec("transformer_engine") is not None, engines=args.vllm.num_engines or 0,
        vllm_tp=args.vllm.tensor_parallel_size, utilization=args.vllm.gpu_memory_utilization,
        vllm_bytes=4 if args.vllm.dtype == "float32" else 2, batch=args.rollout.batch_size,
        n=args.rollout.n_samples_per_prompt, **window)


def make_plan(d: ModelDims, lay: Layout, hw: Hardware) -> dict:
    """{model, hardware, parts, verdict, fits}: JSON-able; `format_plan` prints it."""
    all_parts = parts(d, lay, hw)
    out = {"model": {"path": d.name, "params": d.params, "kv_bytes_per_token": d.kv_bytes_per_token(lay.vllm_bytes),
                     "describe": d.describe()},
           "hardware": dataclasses.asdict(hw), "estimate_margin": arithmetic.ESTIMATE_MARGIN, "parts": []}
    verdict = "fits"
    for part in all_parts:
        entry = {"key": part.key, "title": part.title, "unit": part.unit, "total": part.total, "limit": part.limit,
                 "fits": part.fits, "ratio": part.ratio(), "how": part.how, "extra": part.extra,
                 "figures": [dataclasses.asdict(f) for f in part.figures]}
        if not part.fits:
            entry["fixes"] = fixes(part.key, d, lay, hw)
            if verdict == "fits":
                fix = " or ".join(entry["fixes"]) or "no single flag makes it fit: see the figures above"
                verdict = f"does not fit: {part.shortfall()}; fix: {fix}"
        out["parts"].append(entry)
    out["verdict"], out["fits"] = verdict, verdict == "fits"
    if lay.colocate_all:
        out["note"] = ("--train.colocate_all: the engines sleep while the actor trains, so actor and engines are "
                       "checked apart, each against the whole GPU")
    return out


def format_plan(plan: dict) -> str:
    if "error" in plan:
        return f"[openrlhf-speed] memory plan: not made: {plan['error']}"
    margin = (f"~ marks an estimate (+-{plan['estimate_margin']:.0%}; the activations were fitted to peaks allocated "
              "on one H200 at 0.5B-7B, one GPU a case; the runtime overheads are not measured)")
    lines = ["[openrlhf-speed] memory plan", f"  model: {plan['model']['describe']}",
             f"  hardware: {plan['hardware']['source']}", f"  {margin}"]
    if plan.get("note"):
        lines.append(f"  {plan['note']}")
    for part in plan["parts"]:
        lines.append(f"{part['title']}:")
        for f in part["figures"]:
            mark = "~" if f["estimate"] else " "
            lines.append(f"  {mark}{f['nbytes'] / GiB:7.1f} GiB  {f['what']}: {f['how']}")
        lines += [f"   {line}" for line in part["extra"]]
        state = "fits" if part["fits"] else "DOES NOT FIT"
        lines.append(f"  = {part['ratio']}: {state} ({part['how']})")
        if not part["fits"]:
            lines.append(f"    fix: {' or '.join(part['fixes']) or 'no single flag makes it fit'}")
    lines.append(f"verdict: {plan['verdict']}")
    return "\n".join(lines)


def dry_run_plan(args, hw: Hardware = None) -> tuple:
    """(plan dict, text) for a dry run's parsed args; a model without config.json, or with an
    architecture the plan does not know, gives {"error": ...} instead of failing the run."""
    p = getattr(args, "plan", None)
    try:
        d = ModelDims.from_folder(args.actor.model_name_or_path)
    except ValueError as e:
        plan = {"error": str(e)}
        return plan, format_plan(plan)
    hw = hw or local_hardware(getattr(p, "gpu_memory_gib", None), getattr(p, "host_memory_gib", None),
                              getattr(p, "gpus_per_node", None))
    plan = make_plan(d, layout_from_args(args), hw)
    return plan, format_plan(plan)
