"""Which device a run's workers use, decided once in the driver and handed to the workers.

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
