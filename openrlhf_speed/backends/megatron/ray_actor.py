"""The Megatron-Core actor (and reference model) as OpenRLHF Ray actors (`--backend megatron`).

OpenRLHF's `RayActorGroup` creates one of these per actor GPU and calls the same methods it
calls on its DeepSpeed `PolicyModelActor`: `init_model_from_pretrained`, `forward` (through
`execute_batch`), `append`, `fit`, `broadcast_to_vllm`, `save_checkpoint`,
`get_checkpoint_states`, `save_model`, `offload_states` / `reload_states`, `empty_cache`.

Rank layout: ranks are numbered tp fastest, then pp, then dp (`model.REPLICA_CONTIGUOUS_ORDER`),
and `args.ds.tensor_parallel_size` = tp * pp (cli/megatron_flags.py), so OpenRLHF hands every
rank of one model replica the same micro-batches and keeps one result per replica. Every
method below is therefore a collective over the replica (TP / PP all-gathers, the pipeline
schedule), and `fit` also over the data-parallel group (gradient averaging, loss sums).
A TP group must share a node: ranks take their placement-group bundles in node order
(rollout/actor.py, backends/placement.py), and start-up stops with a message naming the group
and its hosts when one spans nodes all the same.

What each piece reuses: the model, the HF <-> Megatron weight mapping and the log-prob /
policy-loss maths are `model.py`, `weights.py` and `actor_ops.py` (OpenRLHF's `PolicyLoss`,
`compute_approx_kl`, `aggregate_loss`); the replay buffer and LR schedule are OpenRLHF's /
transformers'; the weight sync speaks OpenRLHF's engine protocol (`update_weight` announced
per tensor, then a broadcast from actor rank 0 over the same "openrlhf" group), so the vLLM
side is unchanged, gloo included on CPU (compat/weight_sync.py).
"""

import math
import os
import socket
from datetime import timedelta

import ray
import torch
import torch.distributed as dist
from openrlhf.trainer.ray.launcher import BaseModelActor

from openrlhf_speed.backends.placement import check_tp_groups, log_placement
from openrlhf_speed.compat import ports

from . import actor_ops
from .model import FUSION_NAMES, build_gpt_model, gpt_config_from_hf, init_model_parallel, megatron_dtype
from .weights import HFCheckpoint, WeightLayout, iter_hf_weights, load_hf_weights


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


class _MegatronModelActor(BaseModelActor):
    role = "megatron model"
    trains = False

    def __init__(self, world_size, rank, master_addr, master_port):
        super().__init__(world_size, rank, master_addr, master_port)
        log_placement(f"{self.role} rank {rank}/{world_size}")

    def _build(self, strategy, pretrain: str) -> None:
        """torch.distributed + Megatron's groups, then this rank's stage of the model with its
        shard of the HF weights (read lazily: a rank reads only what it holds)."""
        from megatron.core import parallel_state as ps
        from transformers import AutoConfig

        self.strategy, self.args = strategy, strategy.args
        mg = self.args.megatron
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        if not dist.is_initialized():
            # env:// reads MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE set by BaseDistributedActor.
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=timedelta(minutes=60))
        self._check_tp_placement(mg.tp)
        init_model_parallel(mg.tp, mg.pp, seed=self.args.train.seed)
        self.dtype = torch.bfloat16 if megatron_dtype(self.args) == "bf16" else torch.float32
        self.hf_config = AutoConfig.from_pretrained(pretrain)
        # A frozen model keeps no fp32 main_grad for fused weight-gradient GEMMs to write into.
        overrides = {} if self.trains else {"gradient_accumulation_fusion": False}
        if mg.sequence_parallel:
            overrides["sequence_parallel"] = True
        if mg.recompute == "selective":
            overrides["recompute_granularity"] = "selective"
        elif mg.recompute == "full":
            overrides.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
        self.config, self.spec = gpt_config_from_hf(
            self.hf_config, tp_size=mg.tp, pp_size=mg.pp, params_dtype=self.dtype,
            vocab_divisible_by=mg.vocab_divisible_by, **overrides,
        )
        self.layout = WeightLayout.from_hf(
            self.hf_config, mg.tp, mg.pp, te_names=self.spec.use_te, vocab_divisible_by=mg.vocab_divisible_by
        )
        self.model = build_gpt_model(self.config, self.spec)
        self.tp_rank, self.pp_rank = ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
        self.dp_rank, self.dp_group = ps.get_data_parallel_rank(), ps.get_data_parallel_group()
        load_hf_weights(self.model, HFCheckpoint(pretrain, dtype=self.dtype), self.layout, self.tp_rank, self.pp_rank)
        self.strategy.print(
            f"[openrlhf-speed] {self.role}: {self.spec.arch}, tp {mg.tp} x pp {mg.pp} x dp "
            f"{ps.get_data_parallel_world_size()}, {str(self.dtype).replace('torch.', '')}, "
            f"{'Transformer Engine' if self.spec.use_te else 'local'} layers, fusions: "
            f"{', '.join(name for name in FUSION_NAMES if getattr(self.config, name)) or 'none'}"
        )

    def _check_tp_placement(self, tp: int) -> None:
        """Stop before the first all-reduce when a tensor-parallel group spans hosts (the same
        verdict on every rank, so none waits for the others)."""
        if tp == 1:
            return
        hosts = [None] * dist.get_world_size()
        dist.all_gather_object(hosts, socket.gethostname())
        warning = check_tp_groups(hosts, tp, role=self.role)
        if warning and dist.get_rank() == 0:
            print(f"[openrlhf-speed] {warning}", flush=True)

    def forward(self, sequences, action_mask=None, attention_mask=None, packed_seq_lens=None,
                mm_train_inputs_list=None) -> torch.Tensor:
        """Action log-probs [B, A] of one micro-batch (on every rank of the replica)."""
        actor_ops.check_right_padded(attention_mask)  # on the host copy: no device sync
        device = _device()
        log_probs = actor_ops.action_log_probs(
            self.model, sequences.to(device), attention_mask.to(device), action_mask.to(device),
            temperature=self.args.rollout.temperature, vocab_size=self.spec.hf_vocab_size,
        )
        return log_probs.to("cpu")

    def empty_cache(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class MegatronReferenceActor(_MegatronModelActor):
    """The frozen initial policy, for the KL term (`--algo.kl.init_coef > 0`)."""

    role = "megatron reference"

    def init_model_from_pretrained(self, strategy, pretrain):
        self._build(strategy, pretrain)
        self.model.requires_grad_(False)
        self.model.eval()


class MegatronPolicyActor(_MegatronModelActor):
    role = "megatron actor"
    trains = True

    def init_model_from_pretrained(self, strategy, pretrain, max_steps=None, vllm_engines=None):
        from openrlhf.models.loss import PolicyLoss
        from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer
        from openrlhf.utils import get_tokenizer
        from transformers.trainer import get_scheduler

        from .train_utils import make_optimizer

        self._build(strategy, pretrain)
        args = self.args
        self.vllm_engines = vllm_engines
        self.tokenizer = get_tokenizer(pretrain, None, "left", strategy, use_fast=not args.data.disable_fast_tokenizer)
        adam = args.actor.adam
        self.optimizer = make_optimizer(
            self.model, adam.lr, adam.betas, adam.eps, adam.weight_decay, master_weights=self.dtype != torch.float32,
            fused_wgrad=self.config.gradient_accumulation_fusion,
        )
        # OpenRLHF's schedule, as DeepspeedStrategy builds it (one scheduler step per optimizer step).
        name = args.actor.lr_scheduler
        self.scheduler = get_scheduler(
            name, getattr(self.optimizer, "inner", self.optimizer),
            num_warmup_steps=math.ceil(max_steps * args.actor.lr_warmup_ratio), num_training_steps=max_steps,
            scheduler_specific_kwargs={"min_lr_rate": args.actor.min_lr_ratio}
            if name in {"cosine_with_min_lr", "cosine_warmup_with_min_lr"} else {},
        )
        self.loss_fn = PolicyLoss(
            clip_eps_low=args.actor.eps_clip_low_high[0],
            clip_eps_high=args.actor.eps_clip_low_high[1],
            dual_clip=args.actor.dual_clip,
            token_level_loss=args.actor.loss_agg_mode == "token-mean",
            policy_loss_type=args.actor.policy_loss_type,
            is_correction_level=args.algo.advantage.is_correction_level,
            is_correction_mode=args.algo.advantage.is_correction_mode,
            is_correction_gating=args.algo.advantage.is_correction_gating,
            is_correction_threshold=args.algo.advantage.is_correction_threshold,
        )
        # (micro-batch size, no size limit, CPU offload, no packing, no dynamic batching)
        self.replay_buffer = NaiveReplayBuffer(args.train.micro_batch_size, 0, True, False, False)
        self.fits = 0  # fit() calls so far: seeds each fit's shuffle (fit.py)
        self.checkpoint_states = {}
        ckpt_dir = os.path.join(args.ckpt.path, "_actor")
        if args.ckpt.load_enable and os.path.exists(os.path.join(ckpt_dir, "latest")):
            from .checkpoint import load_checkpoint

            strategy.print(f"[openrlhf-speed] loading the Megatron checkpoint {ckpt_dir}")
            self.checkpoint_states = load_checkpoint(ckpt_dir, self.model, self.optimizer, self.scheduler)
        self._model_update_group = None
        if vllm_engines and dist.get_rank() == 0:
            self._init_vllm_sync_group()
        dist.barrier()

    # -- training ------------------------------------------------------------------------
    def append(self, experience) -> None:
        self.replay_buffer.append(experience)

    def fit(self, kl_ctl: float = 0) -> dict:
        """`ActorPPOTrainer.ppo_train` for the Megatron model: --train.max_epochs passes over
        the replay buffer in micro-batches of --train.micro_batch_size, one optimizer step per
        window of (train batch / micro batch / dp) micro-batches, the loss normalised over the
        whole window on every DP rank (OpenRLHF's global token / sample mean)."""
        from .fit import run_fit

        self.fits += 1
        status = run_fit(self, kl_ctl)
        self.replay_buffer.clear()
        self.empty_cache()
        return status

    # -- weights out -----------------------------------------------------------------------
    def _engine_dtype(self) -> torch.dtype:
        if not hasattr(self, "_engine_dtype_cached"):
            dtype = self.dtype
            if self.vllm_engines:
                dtype = ray.get(self.vllm_engines[0].model_dtype.remote())
            self._engine_dtype_cached = dtype
        return self._engine_dtype_cached

    def _init_vllm_sync_group(self) -> None:
        """OpenRLHF's `_init_vllm_sync_group`, for actor rank 0: one group of that rank plus
        every engine rank (the engines' side is OpenRLHF's, unchanged)."""
        from openrlhf.utils import distributed_util

        vllm = self.args.vllm
        address = ray._private.services.get_node_ip_address()
        port = ports.free_port()
        world_size = vllm.num_engines * vllm.tensor_parallel_size + 1
        refs = [
            engine.init_process_group.remote(address, port, i * vllm.tensor_parallel_size + 1, world_size, "openrlhf",
                                             backend=vllm.sync_backend, use_ray=False)
            for i, engine in enumerate(self.vllm_engines)
        ]
        device = torch.cuda.current_device() if torch.cuda.is_available() else None
        # Module attribute, not a from-import: compat/weight_sync.py swaps it for gloo on CPU.
        self._model_update_group = distributed_util.stateless_init_process_group(address, port, 0, world_size, device)
        ray.get(refs)

    def _hf_tensor_count(self) -> int:
        return sum(len(hf_names) for stage in range(self.layout.pp_size)
                   for _, kind, hf_names in self.layout.stage_params(stage) if kind != "tied_copy")

    def broadcast_to_vllm(self) -> None:
        """Stream the model to every engine in HF names and the engines' dtype, one tensor at
        a time: the replica of DP rank 0 gathers each tensor (TP all-gather, PP broadcast,
        `iter_hf_weights`), actor rank 0 announces it to the engines and broadcasts it."""
        if self.dp_rank == 0:
            dtype = self._engine_dtype()
            rank0 = dist.get_rank() == 0
            if rank0 and self.args.vllm.enable_prefix_caching:
                ray.get([engine.reset_prefix_cache.remote() for engine in self.vllm_engines])
            total, count = self._hf_tensor_count(), 0
            stream = torch.cuda.current_stream() if torch.cuda.is_available() else None
            for name, tensor in iter_hf_weights(self.model, self.layout, dtype):
                count += 1
                if rank0:
                    refs = [engine.update_weight.remote(name, dtype=dtype, shape=tuple(tensor.shape),
                                                        empty_cache=count == total) for engine in self.vllm_engines]
                    self._model_update_group.broadcast(tensor.contiguous(), src=0, stream=stream)
                    ray.get(refs)
            if count != total:
                raise RuntimeError(f"weight sync sent {count} tensors, expected {total}: the layout and the model disagree")
        self.empty_cache()
        dist.barrier()

    def weight_fingerprints(self) -> dict:
        """Fingerprints of the HF-named tensors exactly as the engines receive them."""
        from openrlhf_speed.backends.fingerprints import fingerprints

        out = {}
        for name, tensor in iter_hf_weights(self.model, self.layout, self._engine_dtype()):
            out.update(fingerprints([(name, tensor)]))
        return out

    # -- checkpoints ----------------------------------------------------------------------
    def get_checkpoint_states(self) -> dict:
        return self.checkpoint_states

    def save_checkpoint(self, tag, client_states=None, metric_value=None, metric_key=None) -> None:
        from .checkpoint import save_checkpoint

        args = self.args
        if not args.ckpt.disable_ds:
            save_checkpoint(os.path.join(args.ckpt.path, "_actor"), tag, self.model, self.optimizer, self.scheduler,
                            client_states or {}, max_num=args.ckpt.max_num)
        if args.ckpt.save_hf:
            self._export(os.path.join(args.ckpt.path, f"{tag}_hf"))
        dist.barrier()

    def _export(self, out_dir: str) -> None:
        from .checkpoint import export_hf

        if self.dp_rank == 0:  # one replica holds the whole model; the others have copies
            # The checkpoint's own dtype (config.json may name it as a string).
            dtype = getattr(self.hf_config, "dtype", None) or getattr(self.hf_config, "torch_dtype", None)
            if isinstance(dtype, str):
                dtype = getattr(torch, dtype, None)
            export_hf(self.model, self.layout, out_dir, self.hf_config, tokenizer=self.tokenizer,
                      dtype=dtype if isinstance(dtype, torch.dtype) else self.dtype)

    def save_model(self) -> None:
        """The final model as an HF folder in --ckpt.output_dir."""
        self._export(self.args.ckpt.output_dir)
        self.strategy.print(f"[openrlhf-speed] exported the Megatron model to {self.args.ckpt.output_dir}")
        dist.barrier()

    # -- offload (between phases on shared GPUs) ----------------------------------------------
    def _move_states(self, device) -> None:
        for param in self.model.parameters():
            param.data = param.data.to(device, non_blocking=True)
        inner = getattr(self.optimizer, "inner", self.optimizer)
        for state in inner.state.values():
            for key, value in state.items():
                if torch.is_tensor(value) and value.dim() > 0:
                    state[key] = value.to(device, non_blocking=True)
        for group in inner.param_groups:  # fp32 master weights, when present
            for master in group["params"]:
                master.data = master.data.to(device, non_blocking=True)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def offload_states(self) -> None:
        if torch.cuda.is_available():
            self._move_states("cpu")

    def reload_states(self) -> None:
        if torch.cuda.is_available():
            self._move_states(_device())


for _cls in (MegatronPolicyActor, MegatronReferenceActor):
    _cls.__qualname__ = _cls.__name__
RemoteMegatronPolicyActor = ray.remote(num_gpus=1)(MegatronPolicyActor)
RemoteMegatronReferenceActor = ray.remote(num_gpus=1)(MegatronReferenceActor)
