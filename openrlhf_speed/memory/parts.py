"""The memory plan's parts (memory/plan.py assembles them): the actor, the reference
model and the vLLM engines per GPU, the host RAM of the actor's first node, each a list of
figures (memory/arithmetic.py) with a total against its limit; and the fixes, the single
flag changes under which a part that does not fit would fit.

Rule: a fix is named only when the part, recomputed with that change, fits. The engines'
part counts sequences, not bytes: per engine, the smaller of its share of what the SPEED
driver keeps in flight and vLLM's max_num_seqs (sequences it runs at once), each at
--data.max_len tokens, against what the KV cache left by --vllm.gpu_memory_utilization holds.
"""

import dataclasses
import math

from openrlhf_speed.memory import arithmetic
from openrlhf_speed.memory.arithmetic import GiB, Figure, Hardware, Layout, ModelDims

VLLM_MAX_NUM_SEQS = 128  # vLLM's SchedulerConfig.DEFAULT_MAX_NUM_SEQS: OpenRLHF's AsyncLLMEngine gets it
MAX_UTILIZATION = 0.95  # the highest --vllm.gpu_memory_utilization a fix proposes
EXPERIENCE_BYTES_PER_TOKEN = 41  # int64 ids and mask, action mask, 6 fp32 per-token fields


@dataclasses.dataclass
class Part:
    """One role's figures on one GPU (or one host), their total against the limit."""

    key: str
    title: str
    figures: list
    total: float
    limit: float
    how: str  # how the total adds the figures up
    unit: str = "GiB"  # or "sequences" (the engines' KV cache)
    extra: list = dataclasses.field(default_factory=list)  # lines after the figures

    @property
    def fits(self) -> bool:
        return self.total <= self.limit

    def amount(self, value: float) -> str:
        return f"{value / GiB:.1f} GiB" if self.unit == "GiB" else f"{value:.0f} sequences"

    def ratio(self) -> str:
        if self.unit == "GiB":
            return f"{self.total / GiB:.1f} of {self.limit / GiB:.1f} GiB"
        return f"{self.total:.0f} sequences needed, {self.limit:.0f} held"

    def shortfall(self) -> str:
        """What does not fit, in one phrase (the verdict's)."""
        name = self.title.split(":")[0].split(",")[0]
        if self.unit == "sequences":
            return (f"{name}'s KV cache holds {self.limit:.0f} sequences of --data.max_len per engine, "
                    f"{self.total:.0f} needed")
        where = "per node" if self.key == "host" else "per GPU"
        return f"{name} needs {self.amount(self.total)} {where}, {self.amount(self.limit)} there"


# -- the parts -------------------------------------------------------------------------------
def actor_part(d: ModelDims, lay: Layout, hw: Hardware) -> Part:
    if lay.backend == "megatron":
        states, step = arithmetic.megatron_states(d, lay.tp, lay.pp, lay.megatron_bf16, fused_wgrad=lay.te)
        act = arithmetic.megatron_activations(d, lay.train_micro, lay.max_len, lay.tp, lay.pp, lay.recompute,
                                              lay.sequence_parallel, lay.te)
        fwd = arithmetic.forward_activations(d, lay.rollout_micro, lay.max_len, tp=lay.tp)
        dp = lay.actor_gpus // (lay.tp * lay.pp)
        title = f"actor: Megatron-Core tp {lay.tp} x pp {lay.pp} x dp {dp} on {lay.actor_nodes} x {lay.actor_per_node} GPUs"
        transient = [act, fwd, step]
    else:
        states, _ = arithmetic.deepspeed_states(d, lay.zero_stage, lay.adam_offload, lay.actor_per_node,
                                                lay.actor_nodes)
        act = arithmetic.deepspeed_activations(d, lay.train_micro, lay.max_len, lay.checkpointing)
        fwd = arithmetic.forward_activations(d, lay.rollout_micro, lay.max_len)
        title = (f"actor: DeepSpeed ZeRO-{lay.zero_stage} on {lay.actor_nodes} x {lay.actor_per_node} GPUs, "
                 f"Adam {'on the host (--ds.adam_offload)' if lay.adam_offload else 'on the GPU'}")
        transient = [act, fwd]
    resident = [states]
    if lay.has_ref and lay.ref_colocated:  # its own process: weights and a CUDA context stay
        resident += [ref_weights(d, lay), Figure("reference process", arithmetic.REF_RUNTIME_BYTES,
                                                 "CUDA context, NCCL", estimate=True)]
    resident.append(Figure("runtime", arithmetic.TRAIN_RUNTIME_BYTES,
                           "CUDA context, NCCL buffers, allocator fragmentation", estimate=True))
    total = sum(f.nbytes for f in resident) + max(f.nbytes for f in transient)
    how = "the resident figures + the largest transient one (they never coexist)"
    return Part("actor", title + ", per GPU", resident[:1] + transient + resident[1:], total, hw.gpu_bytes, how)


def ref_weights(d: ModelDims, lay: Layout) -> Figure:
    if lay.backend == "megatron":
        per_rank = arithmetic.megatron_stage_params(d, lay.pp) / lay.tp
        return Figure("reference weights", 2 * per_rank, f"2 B x {per_rank / 1e9:.2f}e9 params (stage / tp)")
    if lay.ref_offload:
        return Figure("reference weights", 0, "--ref.offload: on the host")
    gpus = lay.ref_gpus if lay.zero_stage == 3 else 1
    return Figure("reference weights", 2 * d.params / gpus,
                  f"2 B x {d.params / 1e9:.2f}e9 params" + (f" / {gpus} GPUs (ZeRO-3)" if gpus > 1 else ""))


def ref_part(d: ModelDims, lay: Layout, hw: Hardware) -> Part:
    """The reference model on GPUs of its own (not --train.colocate_actor_ref)."""
    figures = [ref_weights(d, lay), arithmetic.forward_activations(d, lay.rollout_micro, lay.max_len),
               Figure("runtime", arithmetic.TRAIN_RUNTIME_BYTES, "CUDA context, NCCL buffers", estimate=True)]
    return Part("reference", f"reference model on {lay.ref_gpus} GPUs of its own, per GPU", figures,
                sum(f.nbytes for f in figures), hw.gpu_bytes, "the sum")


def in_flight(lay: Layout) -> tuple:
    """(responses the driver keeps on the engines, formula): screening of the prompt window
    (capped by --speed.max_inflight_responses) + the batch's continuations."""
    if not lay.speed:
        return lay.batch * lay.n, f"--rollout.batch_size {lay.batch} x N {lay.n} (OpenRLHF's generator: the whole batch)"
    p = lay.inflight_prompts
    cont = lay.n - lay.first_request
    screen = p * lay.first_request
    how = f"{p} prompts in flight x {'N_init' if cont else 'N'} {lay.first_request}"
    if lay.inflight_responses and lay.inflight_responses < screen:
        screen = lay.inflight_responses
        how += f" capped at --speed.max_inflight_responses {lay.inflight_responses}"
    if cont:
        how += f" + {min(p, lay.batch)} x N_cont {cont} (continuations of a batch)"
    return screen + min(p, lay.batch) * cont, how


def engine_capacity(d: ModelDims, lay: Layout, hw: Hardware) -> tuple:
    """(weights, runtime, cache Figures, KV bytes per token per rank, sequences per engine)."""
    weights, runtime, cache = arithmetic.vllm_kv_cache(d, lay.vllm_tp, lay.utilization, hw.gpu_bytes, lay.vllm_bytes)
    per_token = d.kv_bytes_per_token(lay.vllm_bytes, lay.vllm_tp)
    seqs = max(0, int(cache.nbytes // (per_token * lay.max_len)))
    return weights, runtime, cache, per_token, seqs


def needed_per_engine(lay: Layout) -> int:
    return min(math.ceil(in_flight(lay)[0] / max(1, lay.engines)), VLLM_MAX_NUM_SEQS)


def engine_part(d: ModelDims, lay: Layout, hw: Hardware) -> Part:
    weights, runtime, cache, per_token, seqs = engine_capacity(d, lay, hw)
    kv_heads = max(1, d.kv_heads // lay.vllm_tp)
    cache = dataclasses.replace(cache, how=f"{cache.how}: {max(0, cache.nbytes) / per_token / 1e6:.2f}M tokens of "
                                f"{per_token / 1024:g} KiB ({d.layers} layers x 2 x {kv_heads} KV heads x {d.head_dim} "
                                f"x {lay.vllm_bytes} B)")
    total_flight, how = in_flight(lay)
    per_engine = math.ceil(total_flight / max(1, lay.engines))
    need = needed_per_engine(lay)
    extra = [f"holds {seqs} sequences of --data.max_len {lay.max_len} per engine, {seqs * lay.engines} over "
             f"{lay.engines} engines",
             f"in flight: {total_flight} responses = {how}; {per_engine} per engine"]
    if per_engine > VLLM_MAX_NUM_SEQS:
        extra.append(f"vLLM runs at most {VLLM_MAX_NUM_SEQS} sequences at once per engine (max_num_seqs, its "
                     f"AsyncLLMEngine default): {per_engine - VLLM_MAX_NUM_SEQS} per engine wait in its queue")
    if lay.speed and lay.n > lay.first_request:
        worst = lay.inflight_prompts * max(lay.first_request, lay.n - lay.first_request)
        extra.append(f"at most {worst} if every prompt in flight were continuing at once")
    return Part("engines", f"vLLM: {lay.engines} engines x TP {lay.vllm_tp}, per GPU", [weights, runtime, cache],
                need, seqs, f"per engine: min(in flight per engine, max_num_seqs {VLLM_MAX_NUM_SEQS}) sequences of "
                f"--data.max_len against what the KV cache holds", unit="sequences", extra=extra)


def host_part(d: ModelDims, lay: Layout, hw: Hardware) -> Part:
    """The node of actor rank 0: offloaded states, checkpoint staging, the GPU processes on
    it, and a step's experiences in Ray's object store."""
    figures = []
    if lay.backend == "deepspeed":
        figures.append(arithmetic.deepspeed_states(d, lay.zero_stage, lay.adam_offload, lay.actor_per_node,
                                                   lay.actor_nodes)[1])
        figures.append(Figure("checkpoint staging", 2 * d.params,
                              "the HF export (--ckpt.output_dir): DeepSpeed's consolidated bf16 state dict on rank 0, "
                              "2 B x params"))
    else:
        figures.append(Figure("checkpoint staging", max(arithmetic.MEGATRON_EXPORT_SHARD_BYTES, 2 * d.embedding_params),
                              "the HF export writes one 1 GiB shard at a time (or the largest tensor, the embedding)"))
    if lay.has_ref and lay.ref_offload:
        ranks = 1 if lay.zero_stage == 3 else lay.ref_gpus // max(1, lay.ref_nodes)
        figures.append(Figure("offloaded reference weights", 2 * d.params * ranks / max(1, lay.ref_nodes),
                              "--ref.offload: 2 B x params per node"))
    total_gpus = lay.actor_gpus + lay.engines * lay.vllm_tp + (0 if lay.ref_colocated or not lay.has_ref else lay.ref_gpus)
    procs = min(hw.gpus_per_node, total_gpus)
    figures.append(Figure("GPU processes", procs * arithmetic.PROCESS_HOST_BYTES,
                          f"{procs} on this node x {arithmetic.PROCESS_HOST_BYTES / GiB:g} GiB (torch, CUDA, NCCL)",
                          estimate=True))
    figures.append(Figure("Ray object store", lay.batch * lay.n * lay.max_len * EXPERIENCE_BYTES_PER_TOKEN,
                          f"a step's experiences: {lay.batch * lay.n} samples x {lay.max_len} tokens x "
                          f"{EXPERIENCE_BYTES_PER_TOKEN} B (Ray caps the store at 30% of RAM, filled on use)",
                          estimate=True))
    return Part("host", "host RAM, the node of actor rank 0", figures, sum(f.nbytes for f in figures),
                hw.host_bytes, "the sum")


def parts(d: ModelDims, lay: Layout, hw: Hardware) -> list:
    out = [actor_part(d, lay, hw)]
    if lay.has_ref and not lay.ref_colocated:
        out.append(ref_part(d, lay, hw))
    if lay.engines:
        out.append(engine_part(d, lay, hw))
    out.append(host_part(d, lay, hw))
    return out


PART_OF = {"actor": actor_part, "reference": ref_part, "engines": engine_part, "host": host_part}


# -- fixes: single changes under which the part fits ----------------------------------------
def _more_gpus(lay: Layout, hw: Hardware) -> list:
    """Layouts with 2x, 4x the actor's GPUs: within a node first, then whole nodes."""
    out = []
    for k in (2, 4):
        gpus = lay.actor_gpus * k
        if gpus <= hw.gpus_per_node:
            out.append((f"--actor.num_gpus_per_node {gpus}", dataclasses.replace(lay, actor_per_node=gpus)))
        elif gpus % hw.gpus_per_node == 0:
            nodes = gpus // hw.gpus_per_node
            out.append((f"--actor.num_nodes {nodes} --actor.num_gpus_per_node {hw.gpus_per_node}",
                        dataclasses.replace(lay, actor_nodes=nodes, actor_per_node=hw.gpus_per_node)))
    return out


def _actor_candidates(d: ModelDims, lay: Layout, hw: Hardware) -> list:
    r = dataclasses.replace
    out = []
    if lay.backend == "megatron":
        pp2, tp2 = lay.pp * 2, lay.tp * 2
        if d.layers % pp2 == 0 and lay.actor_gpus % (lay.tp * pp2) == 0:
            out.append((f"--megatron.pp {pp2}", r(lay, pp=pp2)))
        elif d.layers % pp2 == 0:
            for flag, more in _more_gpus(lay, hw)[:1]:
                out.append((f"--megatron.pp {pp2} with {flag}", r(more, pp=pp2)))
        if (d.heads % tp2 == 0 and d.kv_heads % tp2 == 0 and tp2 <= hw.gpus_per_node
                and lay.actor_gpus % (tp2 * lay.pp) == 0):
            out.append((f"--megatron.tp {tp2}", r(lay, tp=tp2)))
        if lay.recompute != "full":
            out.append(("--megatron.recompute full", r(lay, recompute="full")))
    else:
        if not lay.adam_offload:
            out.append(("--ds.adam_offload", r(lay, adam_offload=True)))
        if lay.zero_stage < 3:
            out.append(("--ds.zero_stage 3", r(lay, zero_stage=3)))
        if not lay.checkpointing:
            out.append(("--actor.gradient_checkpointing_enable", r(lay, checkpointing=True)))
    out += _micro_candidates(lay)
    if lay.backend == "deepspeed":
        out += _more_gpus(lay, hw)
    return out


def _micro_candidates(lay: Layout) -> list:
    """Halved micro-batches, training and log-prob forward, down to 1."""
    out = []
    for flag, field in (("--train.micro_batch_size", "train_micro"), ("--rollout.micro_batch_size", "rollout_micro")):
        micro = getattr(lay, field) // 2
        while micro >= 1:
            out.append((f"{flag} {micro}", dataclasses.replace(lay, **{field: micro})))
            micro //= 2
    return out


def _ref_candidates(d: ModelDims, lay: Layout, hw: Hardware) -> list:
    out = [] if lay.ref_offload or lay.backend == "megatron" else [("--ref.offload", dataclasses.replace(lay, ref_offload=True))]
    return out + [c for c in _micro_candidates(lay) if c[0].startswith("--rollout")]


def _engine_candidates(d: ModelDims, lay: Layout, hw: Hardware) -> list:
    r = dataclasses.replace
    out = []
    weights, runtime, _, per_token, _ = engine_capacity(d, lay, hw)
    want = (weights.nbytes + runtime.nbytes + needed_per_engine(lay) * lay.max_len * per_token) / hw.gpu_bytes
    util = math.ceil(want * 100) / 100
    if lay.utilization < util <= MAX_UTILIZATION:
        out.append((f"--vllm.gpu_memory_utilization {util:g}", r(lay, utilization=util)))
    gpus, tp = lay.engines * lay.vllm_tp, lay.vllm_tp * 2
    while tp <= hw.gpus_per_node and gpus % tp == 0 and d.heads % tp == 0:
        out.append((f"--vllm.tensor_parallel_size {tp} --vllm.num_engines {gpus // tp}",
                    r(lay, vllm_tp=tp, engines=gpus // tp)))
        tp *= 2
    if lay.speed:
        for p in range(lay.inflight_prompts - 1, 0, -1):
            out.append((f"--speed.max_inflight_prompts {p}", r(lay, inflight_prompts=p)))
    out.append((f"--vllm.num_engines {lay.engines * 2} on {lay.engines * lay.vllm_tp} more GPUs",
                 r(lay, engines=lay.engines * 2)))
    return out


def _host_candidates(d: ModelDims, lay: Layout, hw: Hardware) -> list:
    r = dataclasses.replace
    out = []
    if lay.backend == "deepspeed" and lay.adam_offload and actor_part(d, r(lay, adam_offload=False), hw).fits:
        out.append(("without --ds.adam_offload", r(lay, adam_offload=False)))
    if lay.backend == "deepspeed" and lay.adam_offload:
        out.append((f"--actor.num_nodes {lay.actor_nodes * 2}", r(lay, actor_nodes=lay.actor_nodes * 2)))
    if lay.has_ref and lay.ref_offload:
        out.append(("without --ref.offload", r(lay, ref_offload=False)))
    return out


CANDIDATES = {"actor": _actor_candidates, "reference": _ref_candidates, "engines": _engine_candidates,
              "host": _host_candidates}


def _name(flag: str) -> str:
    name = flag.split()[0] if flag.startswith("--") else flag
    return "--actor.num_*" if name.startswith("--actor.num_") else name  # one "more GPUs" suffices


def fixes(key: str, d: ModelDims, lay: Layout, hw: Hardware) -> list:
    """The single changes under which part `key` fits, with its new total; of several values
    of one flag only the first that fits (the smallest change). When none does alone, the
    first pair of changes to two different flags that does."""
    candidates = CANDIDATES[key](d, lay, hw)
    found, seen = [], set()
    for flag, changed in candidates:
        if _name(flag) in seen:
            continue
        part = PART_OF[key](d, changed, hw)
        if part.fits:
            seen.add(_name(flag))
            found.append(f"{flag} ({part.ratio()})")
    if found:
        return found
    for i, (flag_a, lay_a) in enumerate(candidates):
        for flag_b, lay_b in candidates[i + 1:]:
            if _name(flag_a) == _name(flag_b):
                continue
            changes = {f.name: getattr(lay_b, f.name) for f in dataclasses.fields(lay)
                       if getattr(lay_b, f.name) != getattr(lay, f.name)}
            part = PART_OF[key](d, dataclasses.replace(lay_a, **changes), hw)
            if part.fits:
                return [f"{flag_a} with {flag_b} ({part.ratio()})"]
    return []
