"""What `openrlhf-speed doctor` looks at: each probe gathers plain facts (JSON-able dicts) and
judges nothing; cli/doctor.py turns the facts into table rows.

The probes that load compiled code or start processes (DeepSpeed's Adam ops, the NCCL
all-reduce, the vLLM engine) run in a child process of their own (`python -m
openrlhf_speed.probes.node NAME ...`), so a crash, a hang or a compiler's output stays
out of the doctor's table: the child prints its facts as the last line, after RESULT_MARK.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

RESULT_MARK = "DOCTOR_RESULT "


def _run(cmd: list, timeout: float) -> tuple:
    """(returncode, stdout + stderr) of a command; (None, why) when it cannot run or times out."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return None, f"{cmd[0]} not found"
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(cmd[:3])} did not finish in {timeout:.0f} s"
    return proc.returncode, proc.stdout + proc.stderr


def child(name: str, *args: str, timeout: float = 600) -> dict:
    """Run probe `name` in a child Python process; its facts, or {"error": ...}."""
    code, out = _run([sys.executable, "-m", "openrlhf_speed.probes.node", name, *args], timeout)
    lines = [line for line in (out or "").splitlines() if line.startswith(RESULT_MARK)]
    if lines:
        return json.loads(lines[-1][len(RESULT_MARK):])
    tail = " | ".join(line.strip() for line in (out or "").strip().splitlines()[-3:])
    return {"error": f"the {name} probe exited with {code}: {tail[-400:]}" if code is not None else out}


# -- in-process probes ---------------------------------------------------------------------
def torch_facts() -> dict:
    import torch

    facts = {"version": torch.__version__, "cuda": torch.version.cuda, "cuda_available": False, "gpus": []}
    if torch.version.cuda and torch.cuda.is_available():
        facts["cuda_available"] = True
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            facts["gpus"].append({"name": props.name, "memory_gb": round(props.total_memory / 2**30, 1),
                                  "capability": f"{props.major}.{props.minor}"})
        try:
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as e:  # a build without NCCL
            facts["nccl_error"] = str(e)
    return facts


def smi_facts():
    """nvidia-smi's driver version and GPUs; None when there is no nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    code, out = _run(["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"], 60)
    if code != 0:
        return {"error": (out or "").strip()[-300:] or f"nvidia-smi exited with {code}"}
    rows = [[part.strip() for part in line.split(",", 1)] for line in out.strip().splitlines() if "," in line]
    return {"driver": rows[0][0] if rows else None, "gpus": [name for _, name in rows]}


def nvcc_facts() -> dict:
    """The nvcc DeepSpeed would compile with: $CUDA_HOME/bin/nvcc (what torch's cpp_extension
    finds), else the one on PATH."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [os.path.join(cuda_home, "bin", "nvcc")] if cuda_home else []
    candidates += [p for p in [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"] if p]
    for path in candidates:
        if os.path.exists(path):
            code, out = _run([path, "--version"], 60)
            match = re.search(r"release (\d+\.\d+)", out or "")
            if code == 0 and match:
                return {"path": path, "release": match.group(1), "cuda_home": cuda_home}
    return {"path": None, "release": None, "cuda_home": cuda_home}


def import_facts(module: str) -> dict:
    """Version of `module` when the real one imports (not this project's flash_attn fallback)."""
    try:
        mod = __import__(module, fromlist=["__version__"])
        if getattr(mod, "__openrlhf_speed_fallback__", False):
            return {"error": "only the pure-torch fallback is present"}
        return {"version": getattr(mod, "__version__", "unknown version")}
    except Exception as e:  # ImportError, or an extension that fails to load (undefined symbol, ...)
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def precision_facts() -> dict:
    from openrlhf_speed.compat.precision import cpu_precision

    p = cpu_precision()
    return {"native_bf16": p.native_bf16, "isa": p.isa, "reason": p.reason, "dtype": p.dtype}


def ray_facts(address):
    """Alive nodes of the cluster at `address`; None without an address."""
    if not address:
        return None
    import ray

    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    except Exception as e:
        return {"address": address, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    try:
        nodes = []
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            res = node.get("Resources", {})
            models = [k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")]
            # Ray's heap and object-store memory: what the node had free when Ray started on it.
            memory_gib = (res.get("memory", 0) + res.get("object_store_memory", 0)) / 2**30
            nodes.append({"host": node.get("NodeManagerHostname"), "ip": node.get("NodeManagerAddress"),
                          "gpus": res.get("GPU", 0), "cpus": res.get("CPU", 0), "accelerator": ",".join(models),
                          "memory_gib": round(memory_gib, 1)})
        return {"address": address, "nodes": nodes}
    finally:
        ray.shutdown()


def host_memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def plan_facts(run: list, plan_flags: list, timeout: float) -> dict:
    """The memory plan of a run, from its `--dry_run`: `run` is the train flags, or a recipe
    (`run[0]` ending in .sh) and its extra flags. `plan_flags` (--plan.*, the memory doctor
    found) go before the user's own flags, so a --plan.* flag the user gives wins."""
    if run[0].endswith(".sh"):
        cmd = ["bash", run[0], "--dry_run", *plan_flags, *run[1:]]
    else:
        cmd = [sys.executable, "-m", "openrlhf_speed.cli.main", "train", "--dry_run", *plan_flags, *run]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"cmd": cmd, "error": f"the dry run did not finish in {timeout:.0f} s"}
    start = proc.stdout.find("{\n")  # the dry run prints notes, then the JSON (cli/flags.py)
    if proc.returncode != 0 or start < 0:
        tail = " | ".join(line.strip() for line in proc.stderr.strip().splitlines()[-3:])
        return {"cmd": cmd, "error": f"the dry run exited with {proc.returncode}: {tail[-600:]}"}
    memory = json.loads(proc.stdout[start:])["resources"]["memory"]
    text = proc.stderr[proc.stderr.find("[openrlhf-speed] memory plan"):]
    return {"cmd": cmd, "memory": memory, "text": text.strip()}


def disk_facts(path: str) -> dict:
    where = os.path.abspath(path)
    while not os.path.exists(where):
        where = os.path.dirname(where)
    return {"path": os.path.abspath(path), "checked": where, "free_gb": shutil.disk_usage(where).free / 1e9}


# -- child-process probes ------------------------------------------------------------------
def ds_ops_probe(build: bool) -> dict:
    """DeepSpeed's CPU Adam and FusedAdam for this machine's accelerator: prebuilt, compatible,
    and (with `build`) whether `load()` works: a prebuilt op imports, another JIT-compiles."""
    from openrlhf_speed import compat

    compat.install()  # the CPU mode's DS_ACCELERATOR=cpu
    arch_note = compat.device.fix_deepspeed_arch_list()  # as the policy actor does before a JIT build
    try:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        from deepspeed.git_version_info import installed_ops
    except Exception as e:
        return {"error": f"deepspeed does not import: {type(e).__name__}: {str(e)[:300]}"}
    out = {"version": deepspeed.__version__, "accelerator": get_accelerator()._name, "ops": {}}
    if arch_note:
        out["arch_note"] = arch_note
    for key, builder_name in (("cpu_adam", "CPUAdamBuilder"), ("fused_adam", "FusedAdamBuilder")):
        facts = {}
        try:
            builder = get_accelerator().create_op_builder(builder_name)
        except Exception as e:
            builder, facts["error"] = None, f"{type(e).__name__}: {str(e)[:300]}"
        if builder is None:
            facts.setdefault("error", f"no {builder_name} for the {out['accelerator']} accelerator")
            out["ops"][key] = facts
            continue
        facts["prebuilt"] = bool(installed_ops.get(builder.name, False))
        try:
            facts["compatible"] = bool(builder.is_compatible(verbose=False))
        except Exception as e:  # MissingCUDAException and friends
            facts["compatible"], facts["error"] = False, f"{type(e).__name__}: {str(e)[:300]}"
        if build and (facts["compatible"] or facts["prebuilt"]):
            start = time.time()
            try:
                builder.load(verbose=False)
                facts["loaded"] = True
            except BaseException as e:  # a failed compile raises, sometimes SystemExit
                facts["loaded"], facts["error"] = False, f"{type(e).__name__}: {str(e)[-400:]}"
            facts["seconds"] = round(time.time() - start, 1)
        out["ops"][key] = facts
    return out


def _allreduce_rank(rank: int, world: int, port: int, queue) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    tensor = torch.ones(1 << 20, device=f"cuda:{rank}")
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    if rank == 0:
        queue.put(float(tensor[0].item()))
    dist.destroy_process_group()


def nccl_probe() -> dict:
    """An NCCL all-reduce of 4 MiB over 2 GPUs of this node, in 2 processes."""
    import socket

    import torch
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    start = time.time()
    mp.start_processes(_allreduce_rank, args=(2, port, queue), nprocs=2, start_method="spawn")
    value = queue.get() if not queue.empty() else None
    return {"ok": value == 2.0, "value": value, "seconds": round(time.time() - start, 1),
            "nccl": ".".join(map(str, torch.cuda.nccl.version()))}


def engine_probe(model: str, max_tokens: int = 16) -> dict:
    """Start a vLLM engine on `model` (a proving-ground name or a local folder) and generate."""
    from openrlhf_speed import compat

    compat.install()
    import torch

    from openrlhf_speed import proving
    from openrlhf_speed.compat.precision import VLLM_NAMES, cpu_precision

    path = proving.resolve_model_or_proving(model)
    gpu = torch.cuda.is_available()
    dtype = "bfloat16" if gpu else VLLM_NAMES[cpu_precision().dtype]
    from vllm import LLM, SamplingParams

    start = time.time()
    kwargs = {"gpu_memory_utilization": 0.2} if gpu else {}
    llm = LLM(model=path, dtype=dtype, max_model_len=256, seed=0, enforce_eager=True, **kwargs)
    start_s = time.time() - start
    tok = llm.get_tokenizer()
    prompt = "What is 2 + 3?"
    if getattr(tok, "chat_template", None):
        prompt = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    start = time.time()
    out = llm.generate([prompt], SamplingParams(max_tokens=max_tokens, temperature=0.0))[0].outputs[0]
    return {"ok": len(out.token_ids) > 0, "model": path, "dtype": dtype, "start_s": round(start_s, 1),
            "generate_s": round(time.time() - start, 2), "tokens": len(out.token_ids), "text": out.text[:60]}


CHILD_PROBES = {
    "ds_ops": lambda *a: ds_ops_probe(build="--no_build" not in a),
    "nccl": lambda *a: nccl_probe(),
    "engine": lambda *a: engine_probe(*a),
}


def _main(argv) -> int:
    name, args = argv[0], argv[1:]
    try:
        facts = CHILD_PROBES[name](*args)
    except BaseException as e:
        facts = {"ok": False, "error": f"{type(e).__name__}: {str(e)[-400:]}"}
    print(RESULT_MARK + json.dumps(facts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
