"""The run's device: decided once in the driver, passed to the workers, never asked of
torch.cuda in a worker's set-up (compat/device.py). Each case runs on this CPU machine:
GPUs and clusters are stood in for by the resources Ray would report."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from openrlhf_speed.compat import device

H100_CLUSTER = {"CPU": 256.0, "GPU": 32.0, "accelerator_type:H100": 4.0, "memory": 1e12}
LOGICAL_GPUS = {"CPU": 6.0, "GPU": 2.0, "memory": 1e10}  # the CPU two-node test's cluster


def no_torch():
    raise AssertionError("torch asked in a run sent to a cluster")


@pytest.mark.parametrize("environ, local_cuda, cluster, want", [
    ({}, False, None, "cpu"),  # a local run: this driver's torch
    ({}, True, None, "cuda"),
    ({"RAY_ADDRESS": "head:6379"}, no_torch, H100_CLUSTER, "cuda"),  # CPU head node, GPU cluster
    ({"RAY_ADDRESS": "head:6379"}, no_torch, LOGICAL_GPUS, "cpu"),  # logical GPUs on CPU nodes
    ({"RAY_ADDRESS": "head:6379"}, no_torch, {"CPU": 4.0}, "cpu"),
    ({"RAY_ADDRESS": "head:6379", device.DEVICE_ENV: "cuda"}, no_torch, LOGICAL_GPUS, "cuda"),  # override wins
    ({device.DEVICE_ENV: "CPU"}, True, None, "cpu"),
])
def test_decide(environ, local_cuda, cluster, want):
    local = local_cuda if callable(local_cuda) else (lambda: local_cuda)
    got, reason = device.decide(environ, local_cuda=local,
                                cluster_resources=(lambda: cluster) if cluster is not None else None)
    assert got == want, reason
    assert reason


def test_dry_run_with_ray_address_does_not_probe_and_says_so():
    got, reason = device.decide({"RAY_ADDRESS": "head:6379"}, local_cuda=no_torch, cluster_resources=None)
    assert got == "cuda" and device.DEVICE_ENV in reason


def test_bad_override_names_the_variable_and_the_choices():
    with pytest.raises(device.DeviceError, match=f"{device.DEVICE_ENV}='gpu'.*cuda.*cpu"):
        device.decide({device.DEVICE_ENV: "gpu"}, local_cuda=no_torch)


def run_py(code: str, env: dict | None = None) -> dict:
    """Runs `code` in a fresh interpreter (no inherited device decision, none of the variables
    the runtime env reads: conftest.py sets TOKENIZERS_PARALLELISM); returns its last stdout
    line as JSON."""
    import os

    cleared = (device.DEVICE_ENV, "RAY_ADDRESS", "TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "DS_ACCELERATOR")
    base = {k: v for k, v in os.environ.items() if k not in cleared}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=300, env={**base, **(env or {})})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# torch.cuda made unusable: any query in the set-up path raises, as a real early CUDA
# initialisation would pin the worker to the wrong GPU.
FORBID_CUDA = """
import json, torch
def forbidden(*a, **k):
    raise RuntimeError("torch.cuda queried in the worker set-up path")
for name in ("is_available", "init", "device_count", "current_device", "_lazy_init"):
    setattr(torch.cuda, name, forbidden)
torch._C._cuda_getDeviceCount = forbidden
"""


@pytest.mark.parametrize("passed", ["cuda", "cpu", None])
def test_worker_setup_never_touches_torch_cuda(passed):
    """Ray's worker_process_setup_hook and vLLM's plugin, with the driver's decision passed
    (cuda: nothing CPU-specific installed; cpu: the shims) and without one (this torch is a
    CPU build, so CPU, still without a CUDA call)."""
    env = {device.DEVICE_ENV: passed} if passed else {}
    got = run_py(FORBID_CUDA + """
from openrlhf_speed import compat
from openrlhf_speed.compat import vllm_plugin
import os
compat.setup_worker()
vllm_plugin.register()
print(json.dumps({"cpu_shims": compat.install(worker=True)["cpu_shims"],
                  "ds": os.environ.get("DS_ACCELERATOR"), "initialized": torch.cuda.is_initialized()}))
""", env)
    want_cpu = passed != "cuda"
    assert got == {"cpu_shims": want_cpu, "ds": "cpu" if want_cpu else None, "initialized": False}


def test_runtime_env_for_a_gpu_cluster_seen_from_a_cpu_driver():
    """This CPU driver, RAY_ADDRESS at a cluster of H100s: the driver installs its own CPU
    shims (it has no GPU), but the workers get the GPU decision and OpenRLHF's environment,
    none of the CPU settings."""
    got = run_py(f"""
import json, os
from openrlhf_speed import compat
from openrlhf_speed.compat import device
compat.install()  # what the CLI does first, in the driver
assert compat.cpu_mode()
device.probe_cluster_resources = lambda: {H100_CLUSTER!r}
print(device.decide_for_run(dry_run=False))
print(json.dumps(compat.ray_runtime_env()))
""", {"RAY_ADDRESS": "10.0.0.1:6379"})
    env = got["env_vars"]
    assert env[device.DEVICE_ENV] == "cuda"
    assert not {"DS_ACCELERATOR", "VLLM_CPU_KVCACHE_SPACE"} & set(env)
    assert env["TOKENIZERS_PARALLELISM"] == "true"  # OpenRLHF's default, not the CPU mode's
    assert env["NCCL_DEBUG"] == "WARN" and env["RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"] == "1"
    assert got["worker_process_setup_hook"] == "openrlhf_speed.compat.setup_worker"


def test_runtime_env_keeps_the_users_values():
    got = run_py("""
import json
from openrlhf_speed import compat
print(json.dumps(compat.ray_runtime_env(run_device="cuda")["env_vars"]))
""", {"TOKENIZERS_PARALLELISM": "false", "NCCL_DEBUG": "INFO"})
    assert got["TOKENIZERS_PARALLELISM"] == "false" and got["NCCL_DEBUG"] == "INFO"


def test_runtime_env_for_a_local_cpu_run():
    got = run_py("""
import json
from openrlhf_speed import compat
from openrlhf_speed.compat import device
print(device.decide_for_run())
print(json.dumps(compat.ray_runtime_env()["env_vars"]))
""")
    assert got[device.DEVICE_ENV] == "cpu" and got["DS_ACCELERATOR"] == "cpu"
    assert got["TOKENIZERS_PARALLELISM"] == "false"


def test_train_from_a_cpu_driver_keeps_gpu_flags_for_a_gpu_cluster():
    """The whole driver path (`openrlhf-speed train`, not a dry run) with RAY_ADDRESS at a GPU
    cluster: flash attention, packing and NCCL sync are kept (a CPU decision would refuse
    --ds.packing_samples and turn the rest into sdpa/gloo), and ray.init gets the GPU env."""
    got = run_py(f"""
import json, sys
import ray
from openrlhf_speed.compat import device
from openrlhf_speed.cli import flags, train
device.probe_cluster_resources = lambda: {H100_CLUSTER!r}
seen = {{}}
def start_ray(args, plan):
    from openrlhf_speed import compat
    seen.update(runtime_env=compat.ray_runtime_env()["env_vars"], attn=args.ds.attn_implementation,
                packing=args.ds.packing_samples, sync=args.vllm.sync_backend)
    print(json.dumps(seen), flush=True)
    import os
    os._exit(0)
flags._start_ray = start_ray
train.main(["--vllm.num_engines", "1", "--actor.num_gpus_per_node", "1", "--algo.advantage.estimator", "rloo",
            "--algo.kl.init_coef", "0", "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4",
            "--train.batch_size", "16", "--ds.packing_samples", "--ds.attn_implementation", "flash_attention_2"])
""", {"RAY_ADDRESS": "10.0.0.1:6379"})
    assert got["packing"] is True and got["attn"] == "flash_attention_2" and got["sync"] == "nccl"
    assert got["runtime_env"][device.DEVICE_ENV] == "cuda" and "DS_ACCELERATOR" not in got["runtime_env"]


# CPU Adam threads on GPU runs (device.cpu_adam_threads): an 8-GPU node with 128 cores.
@pytest.mark.parametrize("kwargs, want", [
    (dict(run_device="cuda", adam_offload=True, node_cpus=128, node_gpus=8, usable_cores=128), 16),
    (dict(run_device="cuda", adam_offload=True, node_cpus=128, node_gpus=8, usable_cores=4), 4),  # cgroup: 4 cores
    (dict(run_device="cuda", adam_offload=True, node_cpus=6, node_gpus=8, usable_cores=6), 1),
    (dict(run_device="cuda", adam_offload=True, node_cpus=128, node_gpus=8, usable_cores=128, omp_env="1"), 16),
    (dict(run_device="cuda", adam_offload=True, node_cpus=128, node_gpus=8, usable_cores=128, omp_env="12"), None),
    (dict(run_device="cuda", adam_offload=False, node_cpus=128, node_gpus=8, usable_cores=128), None),
    (dict(run_device="cpu", adam_offload=True, node_cpus=2, node_gpus=1, usable_cores=2), None),
    (dict(run_device="cpu", adam_offload=False, node_cpus=2, node_gpus=1, usable_cores=2, override="3"), 3),
])
def test_cpu_adam_threads(kwargs, want):
    threads, reason = device.cpu_adam_threads(**kwargs)
    assert threads == want, reason
    if kwargs.get("omp_env") == "12":
        assert "OMP_NUM_THREADS=12 set by the user" in reason
    if want == 16:
        assert "128 CPUs / 8 GPUs on this node" in reason


def test_cpu_adam_threads_bad_override_names_the_variable():
    with pytest.raises(device.DeviceError, match=device.ADAM_THREADS_ENV):
        device.cpu_adam_threads("cuda", True, 8, 1, 8, override="many")


def test_set_cpu_adam_threads_in_cpu_mode_leaves_threads_alone(monkeypatch):
    import torch

    monkeypatch.setenv(device.DEVICE_ENV, "cpu")
    monkeypatch.delenv(device.ADAM_THREADS_ENV, raising=False)
    before = torch.get_num_threads()
    assert device.set_cpu_adam_threads(True).startswith("CPU Adam threads unchanged (CPU mode")
    assert torch.get_num_threads() == before


def test_set_cpu_adam_threads_override_sets_torch_and_omp(monkeypatch):
    import torch

    before = torch.get_num_threads()
    monkeypatch.setenv(device.ADAM_THREADS_ENV, "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    try:
        assert device.set_cpu_adam_threads(True) == f"CPU Adam threads: 1 ({device.ADAM_THREADS_ENV}=1)"
        assert torch.get_num_threads() == 1 and device.os.environ["OMP_NUM_THREADS"] == "1"
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("value, want", [
    ("9.0a", "9.0"), ("8.0 9.0a 10.0f;12.0+PTX", "8.0;9.0;10.0;12.0+PTX"), ("9.0;9.0a", "9.0"),
    ("9.0a+PTX", "9.0+PTX"), ("8.0;9.0", "8.0;9.0"),
])
def test_deepspeed_arch_list_drops_arch_suffixes(value, want):
    assert device.deepspeed_arch_list(value) == want


def test_deepspeeds_own_op_builder_reads_the_rewritten_arch_list(monkeypatch):
    # DeepSpeed 0.19.6's CUDA op builder, install and JIT mode: it stops on "9.0a" (an image
    # with TORCH_CUDA_ARCH_LIST=9.0a stopped the Adam op build on an H100 with exactly this)
    # and builds sm_90 from the rewritten list that the policy actor sets before DeepSpeed.
    from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder

    env = {"TORCH_CUDA_ARCH_LIST": "9.0a"}
    for jit in (False, True):
        builder = FusedAdamBuilder()
        builder.jit_mode = jit
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
        with pytest.raises(ValueError, match="'0a'"):
            builder.compute_capability_args()
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", device.deepspeed_arch_list("9.0a"))
        args = builder.compute_capability_args()  # JIT: torch's own build reads the list it sets
        assert args == ([] if jit else ["-gencode=arch=compute_90,code=sm_90"])
        assert os.environ["TORCH_CUDA_ARCH_LIST"] in ("9.0", "9.0+PTX")
    note = device.fix_deepspeed_arch_list(env)
    assert env == {"TORCH_CUDA_ARCH_LIST": "9.0"} and "'9.0a' -> '9.0'" in note
    assert device.fix_deepspeed_arch_list(env) is None and device.fix_deepspeed_arch_list({}) is None
