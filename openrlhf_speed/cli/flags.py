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
from openrlhf_speed.cli.speed_flags import add_speed_arguments
from openrlhf_speed.rollout.speed_config import speed_config

EMBEDDED_DATA_DEFAULTS = {"n_train": 1000, "n_test": 200, "seed": 0}


class DryRunExit(Exception):
    """Raised after `--dry_run` printed the plan: nothing was started."""


class FlagError(SystemExit):
    def __init__(self, message: str):
        super().__init__(f"openrlhf-speed train: error: {message}")


def add_arguments(parser) -> None:
    if getattr(parser, "_openrlhf_speed_flags", False):
        return
    parser._openrlhf_speed_flags = True
    from openrlhf_speed.compat.precision import widen_param_dtype_flag

    widen_param_dtype_flag(parser)
    add_speed_arguments(parser)
    from openrlhf_speed.cli.reward_flags import add_reward_guard_arguments

    add_reward_guard_arguments(parser)
    from openrlhf_speed.cli.megatron_flags import add_megatron_arguments

    add_megatron_arguments(parser)
    from openrlhf_speed.memory.plan import add_plan_arguments

    add_plan_arguments(parser)
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
        "--train.max_steps",
        type=int,
        default=None,
        help="Stop after this many training steps (added by openrlhf-speed; needs the SPEED driver). With "
        "--ckpt.save_steps dividing it, the run can be resumed from there with --ckpt.load_enable.",
    )
    group.add_argument(
        "--train.generation_only",
        action="store_true",
        default=False,
        help="Measure the SPEED driver apart from training: every step generates its batch through the curriculum "
        "exactly as in training, then skips experience making, PPO training and the weight sync (the policy never "
        "changes). Step lines and --log.jsonl keep the generation wait, the driver's overhead and the tokens "
        "generated; `openrlhf-speed bench --driver_steps` runs it and replays its --speed.trace_path on raw vLLM.",
    )
    group.add_argument(
        "--check.weight_sync",
        action="store_true",
        default=False,
        help="After every weight sync, compare the actor's tensors with each vLLM engine's, bit for bit, and fail "
        "on any difference (costs a pass over the weights; for tests and debugging).",
    )
    group.add_argument(
        "--log.jsonl",
        type=str,
        default=None,
        help="Append one JSON line per training step and per evaluation to this file: every logged metric, plus "
        "train_wall_s, the wall-clock seconds since training started excluding evaluation and checkpointing "
        "(what `openrlhf-speed bench` plots).",
    )
    group.add_argument(
        "--eval.at_start",
        action="store_true",
        default=False,
        help="Evaluate once before the first step (the step-0 point of accuracy curves); needs --eval.dataset. "
        "--eval.dataset embedded means the embedded held-out split.",
    )
    group.add_argument(
        "--vllm.dtype",
        type=str,
        default="auto",
        choices=["auto", "bfloat16", "float16", "float32"],
        help="dtype of the vLLM engines' weights and compute (added by openrlhf-speed). auto: bfloat16 on GPU "
        "(OpenRLHF's choice) and on CPUs with native bf16, float32 on CPUs without it. float32 with an fp32 actor "
        "makes the engine's log-probs match the actor's to rounding; the weight sync casts to whatever the engine "
        "holds.",
    )
    group.add_argument(
        "--ckpt.verify",
        type=str,
        default="sha256",
        choices=["sha256", "size"],
        help="What each checkpoint's manifest (written after the save, read before a resume) records of its files: "
        "sha256 (default) catches truncated, missing and zero-filled files, at the cost of reading the checkpoint "
        "back once per save and once per resume; size catches truncated and missing ones only. A resume loads the "
        "newest checkpoint whose manifest holds, and says which one was damaged.",
    )
    group.add_argument(
        "--ray.num_cpus",
        type=int,
        default=None,
        help="Logical CPUs to declare when this command starts Ray itself (CPU mode; default: enough for every role).",
    )


def _validate_speed(args) -> None:
    from openrlhf_speed.cli.preflight import generation_only_errors

    errors = generation_only_errors(args)
    if errors:
        raise FlagError("\nopenrlhf-speed train: error: ".join(errors))
    if args.speed.schedule == "serial" and (args.speed.feed_during_training == "on" or args.train.async_enable):
        both = "--speed.feed_during_training on" if args.speed.feed_during_training == "on" else "--train.async_enable"
        raise FlagError(f"--speed.schedule serial idles the engines while the actor works, and {both} keeps them "
                        "generating then; pass one of the two.")
    cfg = speed_config(args)
    if cfg is None:
        if args.train.max_steps is not None:
            raise FlagError("--train.max_steps needs the SPEED driver; it does not apply with --speed.strategy off.")
        if args.speed.pace_batches is not None:
            raise FlagError("--speed.pace_batches paces the SPEED driver's starts; OpenRLHF's own generation "
                            "(--speed.strategy off) starts a fixed batch a step: drop the flag or pick a strategy.")
        return
    try:
        cfg.validate()
    except ValueError as e:
        raise FlagError(str(e))
    if args.algo.dynamic_filtering_enable:
        raise FlagError(
            "--algo.dynamic_filtering_enable is OpenRLHF's after-the-fact filter; with the SPEED driver use "
            "--speed.strategy dapo (the same filter, counted in the metrics), or --speed.strategy off to keep OpenRLHF's."
        )
    if args.train.async_enable:
        raise FlagError("--train.async_enable is not supported with --speed.strategy " + cfg.strategy +
                        " (the curriculum already overlaps generation and training); use --speed.strategy off for it.")
    if not args.vllm.num_engines:
        raise FlagError("--speed.strategy " + cfg.strategy + " drives vLLM engines: set --vllm.num_engines >= 1.")
    if args.vllm.enable_sleep:
        raise FlagError("--vllm.enable_sleep: the SPEED driver keeps engines generating while the actor trains "
                        "(pre-fetching), so it never puts them to sleep; drop the flag (and --train.colocate_all), "
                        "or use --speed.strategy off.")
    if args.train.max_steps is not None and args.train.max_steps < 1:
        raise FlagError(f"--train.max_steps ({args.train.max_steps}) must be >= 1")


def _resolve_schedule(args, run_device: str) -> str:
    """`--speed.schedule auto` -> overlap or serial for the device the run was decided for, so
    the driver sees one of the two; returns the note that says which and why. A dry run on a
    machine without CUDA leaves an auto that depends on the device in the plan, as it does the
    dtype: the recipe may name GPUs, and the machine that runs it resolves it."""
    from openrlhf_speed.rollout.speed_config import resolve_schedule

    s = args.speed
    kw = dict(feed_during_training=s.feed_during_training, async_enable=args.train.async_enable,
              generation_only=getattr(args.train, "generation_only", False))
    schedule, why = resolve_schedule(s.schedule, run_device, **kw)
    on_gpu = resolve_schedule(s.schedule, "cuda", **kw)[0]
    if args.dry_run and compat.cpu_mode() and schedule != on_gpu:
        return f"schedule: auto, left to the machine that runs it: {schedule} here ({why}), {on_gpu} on GPUs"
    s.schedule = schedule
    off = s.strategy == "off"
    return f"schedule: {schedule} ({why})" + ("; --speed.strategy off: OpenRLHF's own generation" if off else "")


def _check_ranges(args) -> None:
    """Value flags out of range (negative temperatures, batch sizes, ...): one line each."""
    from openrlhf_speed.cli.preflight import range_errors

    errors = range_errors(args)
    if errors:
        raise FlagError("\nopenrlhf-speed train: error: ".join(errors))


def _check_inputs(args) -> list:
    """The datasets and the reward file, read in the driver before anything starts; returns
    notes (prompts over the prompt limit, duplicate prompts)."""
    from openrlhf_speed.cli.preflight import input_checks

    errors, notes = input_checks(args)
    if errors:
        raise FlagError("\nopenrlhf-speed train: error: ".join(errors))
    return notes


def _staleness_correction(args, cfg) -> list:
    """`--speed.is_correction auto`: stale samples train with OpenRLHF's IS correction.
    OpenRLHF's correction weighs every token by pi_current / pi_rollout (old_log_probs from
    the actor at training time, rollout_log_probs from the engine that sampled it); for
    on-policy samples that is the engine/actor numerics ratio (~1), for a sample k versions
    old it is the off-policy weight. With it on, create_vllm_engines asks the engines for
    processed log-probs and the SPEED driver requests them (speed_generator._sampling_params)."""
    adv = args.algo.advantage
    if args.speed.is_correction == "off" or cfg.max_staleness == 0 or adv.is_correction_level != "off":
        return []
    adv.is_correction_level = "token"
    return [f"--speed.max_staleness {cfg.max_staleness} lets screening samples up to {cfg.max_staleness} policy "
            "versions old train: --algo.advantage.is_correction_level off -> token (OpenRLHF's importance-sampling "
            f"correction, mode {adv.is_correction_mode}, bounds {adv.is_correction_threshold}); "
            "--speed.is_correction off keeps it off"]


def _reward_func_path() -> str:
    from openrlhf_speed.rewards import reward_func

    return reward_func.__file__


def _resolve_defaults(args) -> list:
    """Fill what the user left out with the embedded defaults; returns notes to print."""
    from openrlhf_speed import proving

    notes = []
    model = args.actor.model_name_or_path
    args.actor.model_name_or_path = proving.resolve_model_or_proving(model)
    if model in (None, "default"):
        notes.append(f"model: embedded SmolLM2-135M-Instruct at {args.actor.model_name_or_path}")
    if proving.is_proving(model):
        # The proving-ground model knows only its own prompt format: its data is the default.
        train_path, test_path = proving.data_paths(model)
        notes.append(f"model: proving-ground '{model}' at {args.actor.model_name_or_path}")
        if args.data.prompt_dataset is None:
            args.data.prompt_dataset = train_path
            args.data.input_key, args.data.label_key = "prompt", "answer"
            args.data.apply_chat_template = True
            notes.append(f"data: the proving ground's RL prompts, train {train_path}")
        if args.eval.dataset == "embedded":
            args.eval.dataset = test_path
            notes.append(f"eval: the proving ground's held-out split {test_path}")
    if args.data.prompt_dataset is None:
        from openrlhf_speed.data import embedded

        train_path, test_path = embedded.ensure_embedded_dataset(
            n_train=args.data.embedded_n_train, n_test=args.data.embedded_n_test
        )
        args.data.prompt_dataset = train_path
        args.data.input_key, args.data.label_key = "prompt", "answer"
        args.data.apply_chat_template = True
        notes.append(f"data: embedded arithmetic problems, train {train_path}")
    if args.eval.dataset == "embedded":
        from openrlhf_speed.data import embedded

        args.eval.dataset = embedded.ensure_embedded_dataset(
            n_train=args.data.embedded_n_train, n_test=args.data.embedded_n_test
        )[1]
        notes.append(f"eval: embedded held-out split {args.eval.dataset}")
    if args.eval.at_start and not args.eval.dataset:
        raise FlagError("--eval.at_start needs --eval.dataset (a jsonl file, or 'embedded').")
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
        raise FlagError("--ds.param_dtype fp16 is not supported by DeepSpeed on CPU; use auto, fp32 or bf16.")
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
    from openrlhf_speed.rollout.engine import DTYPE_ENV

    extra_env = {DTYPE_ENV: args.vllm.dtype} if args.vllm.dtype != "auto" else {}
    if compat.cpu_mode() and "OMP_NUM_THREADS" not in os.environ:
        # Ray gives an actor that reserves no CPU OMP_NUM_THREADS=1 (OpenRLHF's reserve GPUs
        # only); whether torch then trains on one core depended on import order. Every core
        # this process may use goes to each role instead: vLLM's CPU worker binds its own
        # (all but one, which it keeps for its scheduler), and the actor trains on all of them.
        extra_env["OMP_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))
    runtime_env = compat.ray_runtime_env(extra_env)
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
    from openrlhf_speed.models import ModelNotFoundError

    _check_ranges(args)
    try:
        notes = _resolve_defaults(args)
    except ModelNotFoundError as e:
        raise FlagError(str(e))
    # Decided once, here, for every worker (compat/device.py): from this driver's torch, or
    # with RAY_ADDRESS from the cluster's GPUs; compat.cpu_mode() answers it from now on.
    try:
        run_device, why = compat.device.decide_for_run(dry_run=args.dry_run)
    except compat.device.DeviceError as e:
        raise FlagError(str(e))
    notes.append(f"device: {run_device} ({why})")
    from openrlhf_speed.compat.precision import cpu_precision, resolve_dtypes

    cpu = compat.cpu_mode() and not args.dry_run
    if compat.cpu_mode() and args.dry_run:
        # A dry run validates the recipe for the hardware it names (usually GPUs); what a
        # real run on this CPU machine would change is only reported.
        prec = cpu_precision()
        notes.append("dry run on a machine without CUDA: CPU adaptations (gloo sync, sdpa, dtype, refusals) not applied; "
                     f"dtype auto would be {prec.dtype} here ({prec.reason}), bf16 on GPU")
    else:
        notes += _adapt_to_cpu(args) if cpu else []
        notes += resolve_dtypes(args, cpu=cpu)
    notes.append(_resolve_schedule(args, run_device))
    _validate_speed(args)
    notes += _check_inputs(args)
    from openrlhf_speed.cli.preflight import optimizer_steps, optimizer_steps_note

    notes.append(optimizer_steps_note(args))
    from openrlhf_speed.cli.megatron_flags import megatron_layout, prepare_backend

    try:
        notes += prepare_backend(args, cpu=cpu)
    except ValueError as e:
        raise FlagError(str(e))
    plan = resource_plan(args)
    if args.backend == "megatron":
        plan["megatron"] = megatron_layout(args)
    cfg = speed_config(args)
    if cfg is not None:
        from openrlhf_speed.curriculum import STRATEGIES

        screens = STRATEGIES[cfg.strategy].uses_n_init
        plan["curriculum"] = {"strategy": cfg.strategy, "n_init": cfg.n_init if screens else None,
                              "max_inflight_prompts": cfg.inflight_limit,
                              "max_inflight_responses": cfg.max_inflight_responses, "buffer_size": cfg.buffer_limit,
                              "max_staleness": cfg.max_staleness, "pace_batches": cfg.pace_batches}
        notes += _staleness_correction(args, cfg)
    plan["optimizer_steps_per_training_step"] = optimizer_steps(args)
    if args.ckpt.load_enable:  # where a rerun continues, said (and checked) before anything starts
        from openrlhf_speed.rollout.checkpoint import ResumeError, resume_point

        try:
            # Not in a dry run: a damaged newest checkpoint is then named but left in place.
            notes.append(resume_point(args.ckpt.path, curriculum=cfg is not None, apply=not args.dry_run).message)
        except ResumeError as e:
            raise FlagError(str(e))
    for note in notes:
        print(f"[openrlhf-speed] {note}", flush=True)
    if args.dry_run:
        # Not yet: OpenRLHF's own checks run after this function; cli/train.py prints the
        # plan (`print_dry_run`) and exits where OpenRLHF's train() would start Ray.
        args._dry_run_plan = plan
        return
    _start_ray(args, plan)


def print_dry_run(args) -> None:
    """The config and resources as JSON on stdout; then the memory plan, readable, on stderr,
    last, so its verdict is the last line a user sees (its figures are in resources.memory)."""
    from openrlhf_speed.memory.plan import dry_run_plan

    plan = args._dry_run_plan
    del args._dry_run_plan
    plan["memory"], text = dry_run_plan(args)
    print(json.dumps({"config": _jsonable(args), "resources": plan}, indent=2, default=str))
    sys.stdout.flush()
    print(text, file=sys.stderr, flush=True)
