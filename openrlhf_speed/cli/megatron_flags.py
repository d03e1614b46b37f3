"""`--backend` and the `--megatron.*` group: the Megatron-Core actor instead of DeepSpeed.

`prepare_backend` runs inside `flags.prepare` (right after parsing). With `--backend megatron`:
- the policy (and reference) actor classes that OpenRLHF's `train_ppo_ray` builds become the
  Megatron ones (`rollout.actor.select_backend`);
- `args.ds.tensor_parallel_size` is set to tp * pp. OpenRLHF reads that one number as "how
  many consecutive actor ranks form one model replica": its `RayActorGroup` sends the same
  micro-batch to each of them (`duplicate_actors`), and its experience maker keeps one
  result per replica (`[::duplicate_factor]`). The Megatron actor lays its ranks out in
  that order (tp fastest, then pp, then dp), so OpenRLHF's dispatch works unchanged. The
  DeepSpeed strategy object that reads the same field is never set up by the Megatron actor.
Flag combinations the Megatron actor does not implement are refused here, by name.
"""


def add_megatron_arguments(parser) -> None:
    g = parser.add_argument_group("Megatron-Core backend (--backend megatron, --megatron.*)")
    g.add_argument("--backend", type=str, default="deepspeed", choices=["deepspeed", "megatron"],
                   help="training backend of the actor (and reference model): deepspeed (OpenRLHF's own, default) or "
                   "megatron (Megatron-Core GPTModel with tensor and pipeline parallelism; Llama and Qwen2 families)")
    g.add_argument("--megatron.tp", type=int, default=1,
                   help="tensor-parallel size: must divide the attention heads and the KV heads")
    g.add_argument("--megatron.pp", type=int, default=1,
                   help="pipeline-parallel size: must divide the number of layers. Data parallel = actor GPUs / (tp * pp)")
    g.add_argument("--megatron.sequence_parallel", action="store_true", default=False,
                   help="Megatron sequence parallelism (GPU, tp > 1): activations of norms and dropout split over TP")
    g.add_argument("--megatron.recompute", type=str, default="none", choices=["none", "selective", "full"],
                   help="activation recomputation: selective (attention core) or full (every layer); none keeps all")
    g.add_argument("--megatron.dtype", type=str, default="auto", choices=["auto", "fp32", "bf16"],
                   help="parameter dtype of the Megatron model: auto = bf16 on GPU (with fp32 master weights in the "
                   "optimizer), fp32 on CPU")
    g.add_argument("--megatron.vocab_divisible_by", type=int, default=1,
                   help="pad the vocabulary to a multiple of tp * this (padded rows are masked out of every softmax)")


def _error(message: str):
    # A ValueError naming the flags; flags.prepare turns it into its FlagError (this module
    # does not import flags: flags imports this one).
    raise ValueError(message)


def megatron_layout(args) -> dict:
    """{tp, pp, dp}: dp = actor ranks / (tp * pp), the one place the data-parallel size is
    computed (the backend note here, the dry-run plan in flags.prepare)."""
    mg = args.megatron
    return {"tp": mg.tp, "pp": mg.pp, "dp": args.actor.num_nodes * args.actor.num_gpus_per_node // (mg.tp * mg.pp)}


def _check_model(path: str, tp: int, pp: int) -> None:
    """The model's architecture and head / layer counts against tp and pp, before any actor
    starts (the actors would fail the same way, minutes later)."""
    from transformers import AutoConfig

    from openrlhf_speed.backends.megatron.model import check_supported

    try:
        config = AutoConfig.from_pretrained(path)
        check_supported(config, tp)
        if config.num_hidden_layers % pp:
            raise ValueError(f"--megatron.pp {pp} must divide the number of layers ({config.num_hidden_layers})")
    except (ValueError, NotImplementedError, OSError) as e:
        _error(f"--backend megatron with the model {path}: {e}")


def prepare_backend(args, cpu: bool) -> list:
    """Validate `--backend` / `--megatron.*` and wire the chosen actor classes; returns notes.
    A bad combination raises ValueError naming the flags."""
    from openrlhf_speed.backends.megatron.model import megatron_dtype
    from openrlhf_speed.rollout import actor

    mg = args.megatron
    if args.backend != "megatron":
        if (mg.tp, mg.pp) != (1, 1):
            _error("--megatron.tp / --megatron.pp need --backend megatron.")
        actor.select_backend("deepspeed")
        return []
    if mg.tp < 1 or mg.pp < 1:
        _error(f"--megatron.tp ({mg.tp}) and --megatron.pp ({mg.pp}) must be >= 1.")
    actor_gpus = args.actor.num_nodes * args.actor.num_gpus_per_node
    if actor_gpus % (mg.tp * mg.pp):
        _error(f"--megatron.tp x --megatron.pp ({mg.tp} x {mg.pp}) must divide the actor's GPUs "
               f"(--actor.num_nodes x --actor.num_gpus_per_node = {actor_gpus}).")
    ref_gpus = args.ref.num_nodes * args.ref.num_gpus_per_node
    if args.algo.kl.init_coef > 0 and ref_gpus % (mg.tp * mg.pp):
        _error(f"--megatron.tp x --megatron.pp ({mg.tp} x {mg.pp}) must divide the reference model's GPUs "
               f"(--ref.num_nodes x --ref.num_gpus_per_node = {ref_gpus}); the reference model uses the same layout.")
    if args.ds.tensor_parallel_size != 1 or args.ds.ring_attn_size != 1:
        _error("--ds.tensor_parallel_size / --ds.ring_attn_size are DeepSpeed's; with --backend megatron use "
               "--megatron.tp / --megatron.pp.")
    refused = {
        "--ds.packing_samples": args.ds.packing_samples,
        "--train.dynamic_batch_enable": args.train.dynamic_batch_enable,
        "--train.colocate_all (CUDA IPC weight sync)": args.train.colocate_all,
        "--train.enable_ema": args.train.enable_ema,
        "--ds.lora.rank > 0": args.ds.lora.rank > 0,
        "--vllm.sync_with_ray": args.vllm.sync_with_ray,
        "--actor.aux_loss_coef > 0 (MoE)": args.actor.aux_loss_coef > 1e-8,
    }
    for flag, on in refused.items():
        if on:
            _error(f"{flag} is not implemented for --backend megatron; drop it or use --backend deepspeed.")
    if args.algo.advantage.estimator == "gae":
        _error("--algo.advantage.estimator gae needs a critic, which the Megatron backend does not train; use rloo, "
               "reinforce, reinforce_baseline, group_norm or dr_grpo, or --backend deepspeed.")
    if mg.sequence_parallel and (cpu or mg.tp == 1):
        _error("--megatron.sequence_parallel needs a GPU and --megatron.tp > 1.")
    if args.actor.optim != "adam":
        _error(f"--actor.optim {args.actor.optim}: the Megatron actor implements adam (AdamW) only.")
    _check_model(args.actor.model_name_or_path, mg.tp, mg.pp)
    args.ds.tensor_parallel_size = mg.tp * mg.pp  # OpenRLHF's "ranks per model replica" (see module doc)
    actor.select_backend("megatron")
    dp = megatron_layout(args)["dp"]
    return [f"backend: Megatron-Core, tp {mg.tp} x pp {mg.pp} x dp {dp} = {actor_gpus} actor ranks, "
            f"{megatron_dtype(args)} parameters"]
