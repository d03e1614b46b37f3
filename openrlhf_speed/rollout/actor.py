"""Our policy actor: OpenRLHF's `PolicyModelActor` plus weight fingerprints, the
non-finite guard (finite_guard.py), the CPU Adam thread count on GPU runs with
--ds.adam_offload and a TORCH_CUDA_ARCH_LIST that DeepSpeed's op builds can read
(compat/device.py); and the switch
between that DeepSpeed actor and the Megatron-Core one (`--backend`).

`openrlhf.cli.train_ppo_ray` imports `PolicyModelActor` / `ReferenceModelActor` by name when
cli/train runs it, before the flags are parsed, so `install()` puts a `_BackendActorClass`
there: OpenRLHF's `RayActorGroup` only ever calls `.options(...).remote(...)` on it, and the
selector forwards that to the class of the backend that `select_backend` chose once the
flags were parsed (cli/megatron_flags.py). For the Megatron backend it also hands rank r the
r-th placement-group bundle in node order (backends/placement.py).
"""

import deepspeed
import ray
from openrlhf.trainer.ray import ppo_actor

from openrlhf_speed.backends.fingerprints import fingerprints
from openrlhf_speed.backends.placement import log_placement, node_ordered_options
from openrlhf_speed.rollout import finite_guard


class SpeedPolicyActor(ppo_actor.PolicyModelActor.__ray_actor_class__):
    def __init__(self, world_size, rank, master_addr, master_port):
        super().__init__(world_size, rank, master_addr, master_port)
        log_placement(f"actor rank {rank}/{world_size}")

    def init_model_from_pretrained(self, strategy, *args, **kwargs):
        from openrlhf_speed.compat.device import fix_deepspeed_arch_list, set_cpu_adam_threads

        # Before DeepSpeed builds (and loads the OpenMP runtime of) its Adam op.
        print(f"[openrlhf-speed] {set_cpu_adam_threads(strategy.args.ds.adam_offload)}", flush=True)
        arch_note = fix_deepspeed_arch_list()
        if arch_note:
            print(f"[openrlhf-speed] {arch_note}", flush=True)
        result = super().init_model_from_pretrained(strategy, *args, **kwargs)
        finite_guard.install(strategy)  # NaN/inf loss or gradients stop the run (finite_guard.py)
        return result

    def weight_fingerprints(self):
        """Fingerprints of the full (ZeRO-3 gathered) parameters, on every rank."""
        model = self.actor.model.module
        out = {}
        zero3 = self.strategy.args.ds.zero_stage == 3
        for name, param in model.named_parameters():
            with deepspeed.zero.GatheredParameters([param], enabled=zero3):
                out.update(fingerprints([(name, param.data)]))
        return out


SpeedPolicyActor.__name__ = SpeedPolicyActor.__qualname__ = "SpeedPolicyActor"
RemoteSpeedPolicyActor = ray.remote(num_gpus=1)(SpeedPolicyActor)


_backend = {"name": "deepspeed"}


def select_backend(name: str) -> None:
    _backend["name"] = name


class _BackendActorClass:
    def __init__(self, role: str, deepspeed_class):
        self.role, self.deepspeed_class = role, deepspeed_class
        self.__name__ = f"{role}ModelActor"

    def resolve(self):
        if _backend["name"] == "megatron":
            from openrlhf_speed.backends.megatron import ray_actor

            return ray_actor.RemoteMegatronPolicyActor if self.role == "Policy" else ray_actor.RemoteMegatronReferenceActor
        return self.deepspeed_class

    def options(self, **kwargs):
        if _backend["name"] == "megatron":
            # Rank r on the r-th bundle in node order, so a tensor-parallel group (consecutive
            # ranks) shares a node (backends/placement.py; checked again at start-up).
            kwargs = node_ordered_options(kwargs)
        return self.resolve().options(**kwargs)

    def remote(self, *args, **kwargs):
        return self.resolve().remote(*args, **kwargs)


def install() -> None:
    from openrlhf.trainer.ray import launcher

    ppo_actor.PolicyModelActor = _BackendActorClass("Policy", RemoteSpeedPolicyActor)
    if not isinstance(launcher.ReferenceModelActor, _BackendActorClass):  # install() may run twice
        launcher.ReferenceModelActor = _BackendActorClass("Reference", launcher.ReferenceModelActor)
