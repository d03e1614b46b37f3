"""Which device a run's workers use, decided once in the driver and handed to the workers;
and, on GPU runs with DeepSpeed's CPU Adam (--ds.adam_offload), how many threads it gets
(`cpu_adam_threads`, at the end).

Why once, and why in the driver:
- A Ray worker must not ask torch about CUDA before Ray has given it its GPUs. Ray's
  `worker_process_setup_hook` runs when the worker process starts, before Ray sets
  CUDA_VISIBLE_DEVICES for the actor it will host; `torch.cuda.is_available()` there
  initialises CUDA, later changes to CUDA_VISIBLE_DEVICES are ignored, and every rank can
  land on GPU 0. Workers therefore read the decision from `DEVICE_ENV`, never from torch.
- The driver may not be where the work runs: a CPU-only head node with RAY_ADDRESS pointing
  at a GPU cluster must still send GPU settings. With RAY_ADDRESS the decision comes from the
  cluster's resources, otherwise from torch in the driver.

The driver puts its decision into `DEVICE_ENV` in its own environment (so every later
`compat.cpu_mode()` in the driver answers for the run) and into the job's runtime env
(`compat.ray_runtime_env`), which reaches every Ray worker and the vLLM processes they start.
"""

import os

DEVICE_ENV = "OPENRLHF_SPEED_DEVICE"
DEVICES = ("cpu", "cuda")
# Ray adds this resource (value 1) on every node where NVML names a GPU model, whether the
# node's GPU count was detected or declared (`ray start --num-gpus`). Logical GPUs declared
# on a CPU node (the CPU mode and its tests do that) come without it.
ACCELERATOR_PREFIX = "accelerator_type:"


class DeviceError(ValueError):
    """A device override that is not one of DEVICES."""


def from_env(environ=os.environ):
    """The decision passed in `DEVICE_ENV`, or None when there is none."""
    value = environ.get(DEVICE_ENV, "").strip().lower()
    if not value:
        return None
    if value not in DEVICES:
        raise DeviceError(f"{DEVICE_ENV}={environ[DEVICE_ENV]!r} is not one of {', '.join(DEVICES)}: "
                          f"set it to cuda (GPU workers) or cpu (the CPU mode), or unset it to detect")
    return value


def from_cluster(resources: dict) -> tuple:
    """(device, reason) from `ray.cluster_resources()` of the cluster the run is sent to."""
    gpus = resources.get("GPU", 0)
    models = sorted(k[len(ACCELERATOR_PREFIX):] for k in resources if k.startswith(ACCELERATOR_PREFIX))
    if gpus and models:
        return "cuda", f"the Ray cluster has {gpus:g} GPUs ({', '.join(models)})"
    if gpus:
        return "cpu", (f"the Ray cluster declares {gpus:g} GPUs but no node reports a GPU model "
                       f"(logical GPUs on CPU nodes); set {DEVICE_ENV}=cuda if they are real GPUs")
    return "cpu", "the Ray cluster has no GPUs"


def torch_is_cpu_build() -> bool:
    """True for a torch built without CUDA/ROCm: then the answer is CPU with no CUDA call."""
    import torch

    return not torch.backends.cuda.is_built()


def decide(environ=os.environ, local_cuda=None, cluster_resources=None) -> tuple:
    """(device, reason) for a run: the override, else the cluster's resources when RAY_ADDRESS
    names a cluster, else torch in this (driver) process. `local_cuda` and `cluster_resources`
    are callables, so tests can stand in for torch and for a cluster."""
    override = from_env(environ)
    if override:
        return override, f"{DEVICE_ENV}={override}"
    if environ.get("RAY_ADDRESS"):
        if cluster_resources is None:
            return "cuda", (f"RAY_ADDRESS is set and the cluster was not probed (dry run): GPU workers "
                            f"assumed; set {DEVICE_ENV} to choose")
        return from_cluster(cluster_resources())
    has_cuda = (local_cuda or _local_cuda)()
    return ("cuda", "torch sees a CUDA device") if has_cuda else ("cpu", "torch sees no CUDA device")


def _local_cuda() -> bool:
    import torch

    return not torch_is_cpu_build() and torch.cuda.is_available()


def probe_cluster_resources() -> dict:
    """Resources of the cluster named by RAY_ADDRESS. Connects and disconnects: the job's own
    `ray.init` comes later, with a runtime env that carries the decision made from this."""
    import ray

    address = os.environ["RAY_ADDRESS"]
    try:
        ray.init(address=address, log_to_driver=False)
    except Exception as e:  # ConnectionError, or whatever ray.init raises for a bad address
        raise DeviceError(f"could not reach the Ray cluster at RAY_ADDRESS={address} to count its GPUs ({e}): "
                          f"start it (ray start --head) or fix RAY_ADDRESS; {DEVICE_ENV}=cuda|cpu skips "
                          f"this probe") from e
    try:
        return dict(ray.cluster_resources())
    finally:
        ray.shutdown()


def decide_for_run(dry_run: bool = False) -> tuple:
    """The driver's one decision: made, written to `DEVICE_ENV` in this process, returned as
    (device, reason). A dry run never connects to a cluster."""
    device, reason = decide(cluster_resources=None if dry_run else probe_cluster_resources)
    os.environ[DEVICE_ENV] = device
    return device, reason


def for_process(worker: bool = False) -> str:
    """The device of this process. The decision passed in `DEVICE_ENV` when there is one;
    else a CPU-only torch build means CPU (no CUDA call needed). Else a worker (Ray's setup
    hook, a vLLM plugin) assumes CUDA and leaves everything as upstream has it, without
    touching torch.cuda; only a driver or a standalone process asks torch."""
    passed = from_env()
    if passed:
        return passed
    if torch_is_cpu_build():
        return "cpu"
    if worker:
        return "cuda"
    return "cuda" if _local_cuda() else "cpu"


# CPU Adam (DeepSpeed's, with --ds.adam_offload) on GPU runs: how many threads it steps with.
# Ray gives an actor that reserves 1 CPU OMP_NUM_THREADS=1 (OpenRLHF's actors reserve one per
# GPU), so without this the optimizer step of a 7B model runs on one core of the node.
ADAM_THREADS_ENV = "OPENRLHF_SPEED_ADAM_THREADS"


def cpu_adam_threads(run_device: str, adam_offload: bool, node_cpus: float, node_gpus: float, usable_cores: int,
                     omp_env=None, ray_default: int = 1, override=None) -> tuple:
    """(threads or None, reason) for a policy actor's CPU Adam. None leaves the threads as
    they are: the CPU mode (which sets OMP_NUM_THREADS for every role itself), Adam on the
    GPU, or an OMP_NUM_THREADS the user chose (one that differs from Ray's default for the
    actor, `ray_default`). Otherwise the node's CPUs per GPU, at most the cores this process
    may run on. `override` (ADAM_THREADS_ENV) wins over everything."""
    if override not in (None, ""):
        if not str(override).isdigit() or int(override) < 1:
            raise DeviceError(f"{ADAM_THREADS_ENV}={override!r} is not a positive integer: set it to the number of "
                              f"threads DeepSpeed's CPU Adam should use, or unset it")
        return int(override), f"{ADAM_THREADS_ENV}={override}"
    if run_device != "cuda":
        return None, "CPU mode: OMP_NUM_THREADS is set for every role at start-up"
    if not adam_offload:
        return None, "Adam steps on the GPU (no --ds.adam_offload)"
    if omp_env not in (None, "", str(ray_default)):
        return None, f"OMP_NUM_THREADS={omp_env} set by the user"
    per_gpu = int(node_cpus // node_gpus) if node_gpus >= 1 else int(node_cpus)
    threads = max(1, min(per_gpu, usable_cores))
    return threads, (f"{node_cpus:g} CPUs / {node_gpus:g} GPUs on this node, {usable_cores} cores usable "
                     f"by this process")


def set_cpu_adam_threads(adam_offload: bool) -> str:
    """In a policy actor (a Ray worker), before DeepSpeed builds its optimizer: apply
    `cpu_adam_threads` to torch (`set_num_threads`) and to OMP_NUM_THREADS (read when DeepSpeed's
    CPU Adam op loads its OpenMP runtime). Returns the line to log."""
    import math

    override, run_device = os.environ.get(ADAM_THREADS_ENV), for_process(worker=True)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    node_cpus, node_gpus, ray_default = usable, 1, 1
    if not override and run_device == "cuda" and adam_offload:  # only then do the node's figures matter
        import ray

        ctx = ray.get_runtime_context()
        node = next((n for n in ray.nodes() if n.get("NodeID") == ctx.get_node_id()), {})
        node_cpus = node.get("Resources", {}).get("CPU", usable)
        node_gpus = node.get("Resources", {}).get("GPU", 1)
        assigned = ctx.get_assigned_resources().get("CPU")
        ray_default = max(math.floor(assigned), 1) if assigned is not None else 1
    threads, why = cpu_adam_threads(run_device, adam_offload, node_cpus, node_gpus, usable,
                                    omp_env=os.environ.get("OMP_NUM_THREADS"), ray_default=ray_default,
                                    override=override)
    if threads is None:
        return f"CPU Adam threads unchanged ({why})"
    import torch

    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    return f"CPU Adam threads: {threads} ({why})"


# DeepSpeed 0.19.6 builds its Adam ops at run time (unless built into the venv) for the
# archs in TORCH_CUDA_ARCH_LIST, and parses each minor version as an integer: an
# arch-specific entry that torch accepts ("9.0a", "10.0f"; NVIDIA's images set them) stops
# the actor with "invalid literal for int() with base 10: '0a'". scripts/gpu_build_lib.sh's
# gpu_ds_archs does the same for the install.
def deepspeed_arch_list(value: str) -> str:
    """`value` without a/f arch suffixes ("9.0a" -> "9.0"; "+PTX" stays), ";"-joined, no repeats."""
    out = []
    for cc in value.replace(";", " ").split():
        ptx = cc.endswith("+PTX")
        cc = cc[: -len("+PTX")] if ptx else cc
        cc = (cc[:-1] if cc[-1:] in ("a", "f") else cc) + ("+PTX" if ptx else "")
        if cc not in out:
            out.append(cc)
    return ";".join(out)


def fix_deepspeed_arch_list(environ=os.environ) -> str | None:
    """Rewrite TORCH_CUDA_ARCH_LIST in `environ` for DeepSpeed's op builder; the line to log,
    or None when it needed no change."""
    value = environ.get("TORCH_CUDA_ARCH_LIST")
    if not value:
        return None
    fixed = deepspeed_arch_list(value)
    if fixed == value:
        return None
    environ["TORCH_CUDA_ARCH_LIST"] = fixed
    return (f"TORCH_CUDA_ARCH_LIST={value!r} -> {fixed!r} for DeepSpeed's op builds (DeepSpeed 0.19.6 "
            "cannot parse a/f arch suffixes; its Adam ops need none)")
