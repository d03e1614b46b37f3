"""Our vLLM engine actor: OpenRLHF's `RolloutRayActor` plus the RPCs we need.

Subclassing keeps OpenRLHF's engine (generation, weight-update protocol, sleep/wake) and
adds: the vLLM worker extension `SpeedWorkerWrap` (OpenRLHF's `WorkerWrap` plus weight
fingerprints), and `weight_fingerprints()` on the actor for the weight-sync check.
`install()` makes OpenRLHF's `create_vllm_engines` build this class.
"""

import ray
from openrlhf.trainer.ray import vllm_engine
from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap

WORKER_EXTENSION = "openrlhf_speed.rollout.engine.SpeedWorkerWrap"


class SpeedWorkerWrap(WorkerWrap):
    def weight_fingerprints(self):
        from openrlhf_speed.rollout.weights import fingerprints

        return fingerprints(self.model_runner.model.named_parameters())


_Upstream = vllm_engine.RolloutRayActor.__ray_actor_class__


class SpeedRolloutActor(_Upstream):
    async def __init__(self, *args, **kwargs):
        from openrlhf_speed.rollout.placement import log_placement

        log_placement(f"vLLM engine {ray.get_runtime_context().get_actor_id()[:8]}")
        kwargs["worker_extension_cls"] = WORKER_EXTENSION
        await super().__init__(*args, **kwargs)

    async def weight_fingerprints(self):
        # TP rank 0's view: with TP > 1 the other ranks hold other shards.
        return (await self.llm.collective_rpc("weight_fingerprints"))[0]


SpeedRolloutActor.__name__ = SpeedRolloutActor.__qualname__ = "SpeedRolloutActor"
RemoteSpeedRolloutActor = ray.remote(SpeedRolloutActor)


def install() -> None:
    vllm_engine.RolloutRayActor = RemoteSpeedRolloutActor
