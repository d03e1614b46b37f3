"""Our policy actor: OpenRLHF's `PolicyModelActor` plus weight fingerprints.

`install()` makes `openrlhf.cli.train_ppo_ray` (which imports the class by name when cli/train
runs it) build this class.
"""

import deepspeed
import ray
from openrlhf.trainer.ray import ppo_actor

from openrlhf_speed.rollout.placement import log_placement
from openrlhf_speed.rollout.weights import fingerprints


class SpeedPolicyActor(ppo_actor.PolicyModelActor.__ray_actor_class__):
    def __init__(self, world_size, rank, master_addr, master_port):
        super().__init__(world_size, rank, master_addr, master_port)
        log_placement(f"actor rank {rank}/{world_size}")

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


def install() -> None:
    ppo_actor.PolicyModelActor = RemoteSpeedPolicyActor
