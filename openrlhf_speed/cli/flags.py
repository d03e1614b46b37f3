"""Our flags on top of OpenRLHF's, and the preparation of the parsed args.

`add_arguments` adds our groups to OpenRLHF's own parser (see cli/train.py); `prepare`
runs right after parsing, before OpenRLHF's own checks: it fills our defaults (embedded
model, data and reward), adapts a CPU run, validates flag combinations with messages that
name the flags, prints the plan for `--dry_run`, and starts Ray.
"""

import json
import os
import sys
from types import SimpleNamespace

from openrlhf_speed import compat

EMBEDDED_DATA_DEFAULTS = {"n_train": 2000, "n_test": 200, "seed": 0}


class DryRunExit(Exception):
    """Raised after `--dry_run` printed the plan: nothing was started."""


class FlagError(SystemExit):
    def __init__(self, message: str):
        super().__init__(f"openrlhf-speed train: error: {message}")


def add_arguments(parser) -> None:
    if getattr(parser, "_openrlhf_speed_flags", False):
        return
    parser._openrlhf_speed_flags = True
    group = parser.add_argument_group("openrlhf-speed")
    group.add_argument(
        "--dry_run",
        action="store_true",
        default=False,
        help="Parse and validate every flag, print the resolved configuration and the resource plan, and exit "
        "without starting Ray, vLLM or DeepSpeed.",
    )
    group.add_argument(
        "--data.embedded_n_train",
        type=int,
        default=EMBEDDED_DATA_DEFAULTS["n_train"],
        help="Prompts in the embedded arithmetic train split (used when --data.prompt_dataset is not given).",
    )
    group.add_argument(
        "--data.embedded_n_test",
        type=int,
        default=EMBEDDED_DATA_DEFAULTS["n_test"],
        help="Prompts in the embedded arithmetic held-out split.",
    )
    group.add_argument(
        "--check.weight_sync",
        action="store_true",
        default=False,
        help="After every weight sync, compare the actor's tensors with each vLLM engine's, bit for bit, and fail "
        "on any difference (costs a pass over the weights; for tests and debugging).",
    )
    group.add_argument(
        "--ray.num_cpus",
        type=int,
        default=None,
        help="Logical CPUs to declare when this command starts Ray itself (CPU mode; default: enough for every role).",
    )


def _reward_func_path() -> str:
    from openrlhf_speed.rewards import reward_func

    return reward_func.__file__


def _resolve_defaults(args) -> list:
    """Fill what the user left out with the embedded defaults; returns notes to print."""
    from openrlhf_speed.models import resolve_model

    notes = []
    model = args.actor.model_name_or_path
    args.actor.model_name_or_path = resolve_model(model)
    if model in (None, "default"):
        notes.append(f"model: embedded SmolLM2-135M-Instruct at {args.actor.model_name_or_path}")
    if args.data.prompt_dataset is None:
        from openrlhf_speed.data import embedded

        train_path, test_path = embedded.ensure_embedded_dataset(
            n_train=args.data.embedded_n_train, n_test=args.data.embedded_n_test
        )
        args.data.prompt_dataset = train_path
        args.data.input_key, args.data.label_key = "prompt", "answer"
        args.data.apply_chat_template = True
        notes.append(f"data: embedded arithmetic problems, train {train_path}")
    if not args.reward.model_name_or_path and not args.reward.remote_url and not args.train.agent_func_path:
        args.reward.remote_url = _reward_func_path()
        notes.append(f"reward: math answer check ({args.reward.remote_url})")
    return notes


def _adapt_to_cpu(args) -> list:
    """What a CPU run changes, each printed; combinations that cannot work are errors."""
    notes = []
    if args.train.colocate_all:
        raise FlagError("--train.colocate_all shares GPUs through CUDA IPC and sleep mode; drop it on CPU.")
    if args.ds.packing_samples:
        raise FlagError("--ds.packing_samples needs flash attention (CUDA); drop it on CPU.")
    if args.vllm.sync_with_ray:
        raise FlagError("--vllm.sync_with_ray uses Ray collectives (NCCL); the CPU mode syncs weights over gloo.")
    if args.vllm.sync_backend != "gloo":
        notes.append(f"--vllm.sync_backend {args.vllm.sync_backend} -> gloo (no NCCL on CPU)")
        args.vllm.sync_backend = "gloo"
    if "flash_attention" in args.ds.attn_implementation:
        notes.append(f"--ds.attn_implementation {args.ds.attn_implementation} -> sdpa (no flash attention on CPU)")
        args.ds.attn_implementation = "sdpa"
    if args.ds.param_dtype == "fp16":
        raise FlagError("--ds.param_dtype fp16 is not supported by DeepSpeed on CPU; use bf16.")
    return notes


def resource_plan(args) -> dict:
    """Logical GPUs per role, as OpenRLHF's placement will ask Ray for them."""
    plan = {
        "vllm_engines": args.vllm.num_engines or 0,
        "gpus_per_engine": args.vllm.tensor_parallel_size,
        "actor": args.actor.num_nodes * args.actor.num_gpus_per_node,
        "reference": args.ref.num_nodes * args.ref.num_gpus_per_node if args.algo.kl.init_coef > 0 else 0,
        "critic": 0,
        "reward_model": args.reward.num_nodes * args.reward.num_gpus_per_node if args.reward.model_name_or_path else 0,
    }
    if args.algo.advantage.estimator == "gae":
        plan["critic"] = args.critic.num_nodes * args.critic.num_gpus_per_node
    if args.train.colocate_all:
        plan["total_gpus"] = plan["actor"]
    else:
        ref = 0 if args.train.colocate_actor_ref else plan["reference"]
        plan["total_gpus"] = plan["vllm_engines"] * plan["gpus_per_engine"] + plan["actor"] + ref + plan["critic"]
        plan["total_gpus"] += plan["reward_model"]
    plan["nodes"] = max(args.actor.num_nodes, args.ref.num_nodes)
    return plan


def _start_ray(args, plan) -> None:
    import ray

    if ray.is_initialized():
        return
    runtime_env = compat.ray_runtime_env()
    if os.environ.get("RAY_ADDRESS"):  # a cluster the user started: use its resources
        ray.init(runtime_env=runtime_env)
        return
    kwargs = {}
    if compat.cpu_mode():
        # Logical GPUs let OpenRLHF's GPU placement groups schedule on a CPU-only machine.
        kwargs["num_gpus"] = max(plan["total_gpus"], 1)
        kwargs["num_cpus"] = args.ray.num_cpus or plan["total_gpus"] + 4
    ray.init(runtime_env=runtime_env, **kwargs)


def _jsonable(ns):
    if isinstance(ns, SimpleNamespace):
        return {k: _jsonable(v) for k, v in vars(ns).items()}
    if isinstance(ns, (list, tuple)):
        return [_jsonable(v) for v in ns]
    if isinstance(ns, float) and ns in (float("inf"), float("-inf")):
        return str(ns)
    return ns


def prepare(args) -> None:
    notes = _resolve_defaults(args)
    if compat.cpu_mode():
        notes += _adapt_to_cpu(args)
    plan = resource_plan(args)
    for note in notes:
        print(f"[openrlhf-speed] {note}", flush=True)
    if args.dry_run:
        print(json.dumps({"config": _jsonable(args), "resources": plan}, indent=2, default=str))
        sys.stdout.flush()
        raise DryRunExit()
    _start_ray(args, plan)
