"""Our vLLM engine actor: OpenRLHF's `RolloutRayActor` plus the RPCs we need.

Subclassing keeps OpenRLHF's engine (generation, weight-update protocol, sleep/wake) and
adds: the vLLM worker extension `SpeedWorkerWrap` (OpenRLHF's `WorkerWrap` plus weight
fingerprints), `weight_fingerprints()` on the actor for the weight-sync check,
`model_dtype()` for actors that must cast before they send (the Megatron one),
`engine_settings()` for the trace a raw-vLLM replay reads, and `set_tokenizer()`, so that
the SPEED driver's requests need not carry the tokenizer.
`install()` makes OpenRLHF's `create_vllm_engines` build this class.
"""

import os

import ray
from openrlhf.trainer.ray import vllm_engine
from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap

WORKER_EXTENSION = "openrlhf_speed.rollout.engine.SpeedWorkerWrap"
# --vllm.dtype reaches the engine actors through the job's runtime env (flags._start_ray):
# OpenRLHF's create_vllm_engines has no dtype argument to pass it through.
DTYPE_ENV = "OPENRLHF_SPEED_VLLM_DTYPE"


class SpeedWorkerWrap(WorkerWrap):
    def weight_fingerprints(self):
        from openrlhf_speed.backends.fingerprints import fingerprints

        return fingerprints(self.model_runner.model.named_parameters())


_Upstream = vllm_engine.RolloutRayActor.__ray_actor_class__


class SpeedRolloutActor(_Upstream):
    _speed_tokenizer = None  # set_tokenizer's

    async def __init__(self, *args, **kwargs):
        from openrlhf_speed.backends.placement import log_placement

        log_placement(f"vLLM engine {ray.get_runtime_context().get_actor_id()[:8]}")
        kwargs["worker_extension_cls"] = WORKER_EXTENSION
        if os.environ.get(DTYPE_ENV):
            kwargs["dtype"] = os.environ[DTYPE_ENV]
        await super().__init__(*args, **kwargs)

    async def model_dtype(self):
        """The dtype the engine holds weights in (what a weight sync must send)."""
        return self.llm.model_config.dtype

    async def engine_settings(self):
        """What a replay on raw vLLM needs to build this same engine (cli/replay.py): vLLM gives
        an AsyncLLMEngine other scheduler defaults than an offline LLM (on CPU 128 vs 256
        sequences at once), so the limits are read here, not assumed."""
        c = self.llm.vllm_config
        return {"dtype": str(c.model_config.dtype).replace("torch.", ""),
                "max_num_seqs": c.scheduler_config.max_num_seqs,
                "max_num_batched_tokens": c.scheduler_config.max_num_batched_tokens,
                "enable_chunked_prefill": c.scheduler_config.enable_chunked_prefill,
                "enable_prefix_caching": c.cache_config.enable_prefix_caching}

    async def set_tokenizer(self, tokenizer) -> None:
        """Keep the driver's tokenizer here, sent once. OpenRLHF passes it with every
        generate_responses call, and Ray pickles every argument of every call: SmolLM2's
        tokenizer is 1.6 MB, 17 ms to pickle in the driver and 81 ms to unpickle here, per
        request (the SPEED driver sends two requests per prompt)."""
        self._speed_tokenizer = tokenizer

    async def generate_responses(self, prompt, label, sampling_params, max_length, hf_tokenizer=None,
                                 num_samples=1, images=None):
        """OpenRLHF's generate_responses; without `hf_tokenizer`, the one set_tokenizer kept."""
        if hf_tokenizer is None:
            hf_tokenizer = self._speed_tokenizer
            if hf_tokenizer is None:
                raise RuntimeError("generate_responses without hf_tokenizer before set_tokenizer(): the driver "
                                   "sends the tokenizer once when it starts (rollout/speed_generator.py)")
        return await super().generate_responses(prompt, label, sampling_params, max_length, hf_tokenizer,
                                                 num_samples=num_samples, images=images)

    async def weight_fingerprints(self):
        # TP rank 0's view: with TP > 1 the other ranks hold other shards.
        return (await self.llm.collective_rpc("weight_fingerprints"))[0]


SpeedRolloutActor.__name__ = SpeedRolloutActor.__qualname__ = "SpeedRolloutActor"
RemoteSpeedRolloutActor = ray.remote(SpeedRolloutActor)


def install() -> None:
    vllm_engine.RolloutRayActor = RemoteSpeedRolloutActor
