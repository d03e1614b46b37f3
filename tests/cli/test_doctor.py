"""`openrlhf-speed doctor` (cli/doctor.py): its table, its exit status, and the fix text of each
failing check. The judges are fed made-up facts (a CPU machine like this one, a GPU node with
pieces missing); one slow test runs the real command end to end, engine included."""

import copy
import json
import subprocess

import pytest
from _cli import run_cli
from _util import openrlhf_speed_cmd

from openrlhf_speed.cli import doctor

CPU_FACTS = {
    "torch": {"version": "2.13.0+cpu", "cuda": None, "cuda_available": False, "gpus": []},
    "smi": None,
    "nvcc": {"path": None, "release": None, "cuda_home": None},
    "precision": {"native_bf16": False, "isa": "AVX2", "reason": "no native bf16 on this CPU (AVX2)", "dtype": "fp32"},
    "nccl_allreduce": None,
    "ds_ops": {"version": "0.19.6", "accelerator": "cpu",
               "ops": {"cpu_adam": {"prebuilt": False, "compatible": True},
                       "fused_adam": {"prebuilt": False, "compatible": True}}},
    "imports": {"flash_attn": {"error": "ModuleNotFoundError"}, "transformer_engine": {"error": "ModuleNotFoundError"}},
    "engine": {"ok": True, "model": "/cache/proving-ci", "dtype": "float32", "start_s": 31.0, "generate_s": 0.2,
               "tokens": 16, "text": "5"},
    "ray": None,
    "disk": {"path": "/ckpt", "checked": "/", "free_gb": 80.0},
}
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_gb": 79.1, "capability": "9.0"}
GPU_FACTS = {
    **CPU_FACTS,
    "torch": {"version": "2.13.0", "cuda": "13.0", "cuda_available": True, "gpus": [H100, H100], "nccl": "2.27.7"},
    "smi": {"driver": "580.95.05", "gpus": [H100["name"]] * 2},
    "nvcc": {"path": "/usr/local/cuda-13.0/bin/nvcc", "release": "13.0", "cuda_home": "/usr/local/cuda-13.0"},
    "nccl_allreduce": {"ok": True, "value": 2.0, "seconds": 6.1, "nccl": "2.27.7"},
    "ds_ops": {"version": "0.19.6", "accelerator": "cuda",
               "ops": {"cpu_adam": {"prebuilt": False, "compatible": True, "loaded": True, "seconds": 61.0},
                       "fused_adam": {"prebuilt": False, "compatible": True, "loaded": True, "seconds": 48.0}}},
    "imports": {"flash_attn": {"version": "2.8.3"}, "transformer_engine": {"version": "2.11.0"}},
    "engine": {"ok": True, "model": "/cache/proving-ci", "dtype": "bfloat16", "start_s": 40.0, "generate_s": 0.1,
               "tokens": 16, "text": "5"},
    "disk": {"path": "/ckpt", "checked": "/ckpt", "free_gb": 900.0},
}


def rows_by_check(facts, min_gb=5.0):
    return {row.check: row for row in doctor.judge(facts, min_gb)}


def gpu_with(**changes):
    facts = copy.deepcopy(GPU_FACTS)
    for path, value in changes.items():
        target = facts
        *parents, leaf = path.split("__")
        for key in parents:
            target = target[key]
        target[leaf] = value
    return facts


def test_cpu_machine_table_lines_and_exit_0():
    rows = doctor.judge(CPU_FACTS, 5.0)
    table = doctor.format_table(rows).splitlines()
    assert table[0].split("|")[1:5] == [" check                ", " status ", " detail ", " fix "]
    checks = [line.split("|")[1].strip() for line in table[2:]]
    assert checks == ["machine", "bf16", "driver", "torch", "nvcc", "nccl", "deepspeed cpu_adam", "deepspeed fused_adam",
                      "flash-attn", "Transformer Engine", "vllm engine", "ray", "disk"]
    assert "CPU mode" in rows[0].detail
    assert doctor.exit_status(rows, on_gpu=False) == 0
    # Even with every GPU piece missing and the engine failing, a CPU machine exits 0.
    broken = {**CPU_FACTS, "engine": {"ok": False, "error": "boom"}, "ds_ops": {"error": "deepspeed does not import"}}
    assert doctor.exit_status(doctor.judge(broken, 5.0), on_gpu=False) == 0


def test_bf16_line_says_what_auto_means():
    bf16 = rows_by_check(CPU_FACTS)["bf16"]
    assert bf16.status == doctor.INFO and "AVX2" in bf16.detail and "float32" in bf16.detail
    native = {**CPU_FACTS, "precision": {"native_bf16": True, "isa": "AVX512", "reason": "native bf16 on this CPU (amx_bf16)",
                                         "dtype": "bf16"}}
    row = rows_by_check(native)["bf16"]
    assert row.status == doctor.OK and "amx_bf16" in row.detail and "bf16" in row.detail


def test_complete_gpu_node_is_ready():
    rows = doctor.judge(GPU_FACTS, 100.0)
    assert all(row.status in (doctor.OK, doctor.INFO) for row in rows), doctor.format_table(rows)
    assert doctor.exit_status(rows, on_gpu=True) == 0
    assert "all-reduce over 2 GPUs gave 2" in rows_by_check(GPU_FACTS)["nccl"].detail


def test_an_arch_list_deepspeed_cannot_read_is_rewritten_and_said():
    # The probe rewrites TORCH_CUDA_ARCH_LIST=9.0a as the policy actor does (DeepSpeed 0.19.6
    # stops on the suffix); the table says so and the node stays ready.
    note = "TORCH_CUDA_ARCH_LIST='9.0a' -> '9.0' for DeepSpeed's op builds"
    rows = doctor.judge(gpu_with(ds_ops__arch_note=note), 100.0)
    assert {r.check: r for r in rows}["cuda archs"].detail == note
    assert doctor.exit_status(rows, on_gpu=True) == 0


@pytest.mark.parametrize("changes, check, fix_has, required", [
    (dict(nvcc={"path": None, "release": None, "cuda_home": None},
          ds_ops__ops__cpu_adam={"prebuilt": False, "compatible": False, "error": "MissingCUDAException"}),
     "nvcc", "install CUDA toolkit 13.0", True),
    (dict(nvcc={"path": "/usr/local/cuda/bin/nvcc", "release": "13.1", "cuda_home": "/usr/local/cuda"},
          ds_ops__ops__fused_adam={"prebuilt": False, "compatible": True, "loaded": False, "error": "CUDAMismatch"}),
     "nvcc", "DS_SKIP_CUDA_CHECK=1", True),
    (dict(ds_ops__ops__fused_adam={"prebuilt": False, "compatible": True, "loaded": False, "error": "CUDAMismatch"},
          nvcc={"path": "/usr/local/cuda/bin/nvcc", "release": "13.1", "cuda_home": "/usr/local/cuda"}),
     "deepspeed fused_adam", "DS_SKIP_CUDA_CHECK=1", True),
    (dict(imports__flash_attn={"error": "ModuleNotFoundError"}), "flash-attn", "FLASH_ATTN=0 uses sdpa", False),
    (dict(imports__transformer_engine={"error": "ModuleNotFoundError"}), "Transformer Engine", "TE=1", False),
    (dict(smi={"driver": "550.54.15", "gpus": [H100["name"]]}), "driver", "nvidia-driver-580", True),
    (dict(torch={"version": "2.13.0+cpu", "cuda": None, "cuda_available": False, "gpus": []}), "torch",
     "make setup-gpu", True),
    (dict(nccl_allreduce={"ok": False, "error": "NCCL WARN connect failed"}), "nccl", "NCCL_SOCKET_IFNAME", True),
    (dict(engine={"ok": False, "error": "CUDA out of memory"}), "vllm engine", "--skip_engine", True),
    (dict(ray={"address": "head:6379", "error": "ConnectionError"}), "ray", "ray start --head", True),
    (dict(ray={"address": "head:6379", "nodes": [
        {"host": "a", "ip": "10.0.0.1", "gpus": 8, "cpus": 128, "accelerator": "H100"},
        {"host": "b", "ip": "10.0.0.2", "gpus": 4, "cpus": 64, "accelerator": "H100"}]}),
     "ray", "--actor.num_gpus_per_node", False),
    (dict(disk={"path": "/ckpt", "checked": "/", "free_gb": 20.0}), "disk", "--ckpt.path", False),
])
def test_gpu_node_missing_pieces_get_their_fix(changes, check, fix_has, required):
    facts = gpu_with(**changes)
    rows = doctor.judge(facts, 100.0)
    row = {r.check: r for r in rows}[check]
    assert row.status in (doctor.FAIL, doctor.WARN), doctor.format_table(rows)
    assert fix_has in row.fix
    assert doctor.exit_status(rows, on_gpu=doctor.gpu_machine(facts)) == (1 if required else 0)


def test_ray_cluster_gpus_per_node_are_listed():
    facts = gpu_with(ray={"address": "head:6379", "nodes": [
        {"host": "gpu-01", "ip": "10.0.0.1", "gpus": 8, "cpus": 128, "accelerator": "H100"},
        {"host": "gpu-02", "ip": "10.0.0.2", "gpus": 8, "cpus": 128, "accelerator": "H100"}]})
    row = rows_by_check(facts)["ray"]
    assert row.status == doctor.OK
    assert "2 node(s): gpu-01 (10.0.0.1): 8 GPU H100, 128 CPU; gpu-02" in row.detail


def test_main_prints_the_table_and_the_verdict(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "gather", lambda args: copy.deepcopy(CPU_FACTS))
    assert doctor.main(["--skip_engine"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("| check") and "CPU machine: CPU mode, ready; exit 0" in out
    monkeypatch.setattr(doctor, "gather", lambda args: gpu_with(engine={"ok": False, "error": "boom"}))
    assert doctor.main([]) == 1
    assert "GPU machine: missing: vllm engine; exit 1" in capsys.readouterr().out


FITS = {"fits": True, "verdict": "fits", "hardware": {"source": "GPU 79.1 GiB (--plan.gpu_memory_gib)"},
        "parts": [{"title": "actor: DeepSpeed ZeRO-3 on 1 x 4 GPUs, per GPU", "ratio": "22.9 of 79.1 GiB"},
                  {"title": "vLLM: 4 engines x TP 1, per GPU", "ratio": "128 sequences needed, 251 held"}]}
TOO_BIG = {**FITS, "fits": False,
           "verdict": "does not fit: actor needs 83.3 GiB per GPU, 79.1 GiB there; fix: --ds.adam_offload (26.6 of "
                      "79.1 GiB) or --actor.num_gpus_per_node 4 (51.3 of 79.1 GiB)"}


@pytest.mark.parametrize("plan, status, detail_has, fix_has", [
    ({"memory": FITS, "text": "..."}, doctor.OK, "fits: actor 22.9 of 79.1 GiB; vLLM 128 sequences needed", ""),
    ({"memory": TOO_BIG, "text": "..."}, doctor.FAIL, "does not fit: actor needs 83.3 GiB", "--ds.adam_offload"),
    ({"error": "the dry run exited with 2: unrecognized arguments: --foo"}, doctor.FAIL, "--foo", "--dry_run"),
    ({"memory": {"error": "/m has no config.json"}}, doctor.WARN, "not made: /m has no config.json", ""),
])
def test_the_memory_plan_row(plan, status, detail_has, fix_has):
    rows = doctor.judge(gpu_with(plan=plan), 100.0)
    row = rows[-1]
    assert (row.check, row.status) == ("memory plan", status) and detail_has in row.detail and fix_has in row.fix
    assert doctor.exit_status(rows, on_gpu=True) == (1 if status == doctor.FAIL else 0)
    assert "memory plan" not in rows_by_check(GPU_FACTS)  # no row without --plan


def test_plan_flags_come_from_this_node_and_the_cluster():
    # this node's smallest GPU; without a cluster, this node's RAM and GPU count
    assert doctor.plan_flags({**GPU_FACTS, "host_memory_gib": 503.2}) == [
        "--plan.gpu_memory_gib", "79.1", "--plan.gpus_per_node", "2", "--plan.host_memory_gib", "503.2"]
    # with a cluster: the smallest memory Ray had free among its GPU nodes, the most GPUs per node
    nodes = [{"host": "a", "gpus": 8, "memory_gib": 900.5}, {"host": "b", "gpus": 8, "memory_gib": 700.0},
             {"host": "head", "gpus": 0, "memory_gib": 60.0}]
    assert doctor.plan_flags({**GPU_FACTS, "ray": {"address": "h:6379", "nodes": nodes}}) == [
        "--plan.gpu_memory_gib", "79.1", "--plan.host_memory_gib", "700", "--plan.gpus_per_node", "8"]
    assert doctor.plan_flags(CPU_FACTS) == []  # nothing known: the plan assumes, and says so


def test_plan_needs_the_run_after_the_separator(capsys):
    with pytest.raises(SystemExit):
        doctor.main(["--plan"])
    assert "--plan and the run after `--` go together" in capsys.readouterr().err


def test_doctor_plan_end_to_end(tmp_path):
    """`doctor --plan -- TRAIN_FLAGS`: the run's dry run, its plan under the table, and a row
    whose fix is the plan's (a 7B actor on 2 GPUs of 40 GiB with Adam on the GPU)."""
    model = tmp_path / "qwen2.5-math-7b"  # Qwen2.5-Math-7B's architecture fields, no weights
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 4096, "tie_word_embeddings": False}))
    run = ["--actor.model_name_or_path", str(model), "--actor.num_gpus_per_node", "2", "--ds.zero_stage", "3",
           "--vllm.num_engines", "2", "--algo.advantage.estimator", "rloo", "--algo.kl.init_coef", "0",
           "--rollout.batch_size", "4", "--rollout.n_samples_per_prompt", "8", "--train.batch_size", "32",
           "--data.max_len", "4096", "--actor.gradient_checkpointing_enable", "--plan.gpu_memory_gib", "40"]
    proc = run_cli("doctor", "--plan", "--skip_engine", "--skip_ds_ops", "--", *run, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]  # a CPU machine exits 0
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| memory plan"))
    assert "| MISSING | does not fit: actor needs" in row and "GPU 40 GiB (--plan.gpu_memory_gib)" in row, row
    assert "--ds.adam_offload (" in row
    assert "[openrlhf-speed] memory plan" in proc.stdout and "\nverdict: does not fit: actor" in proc.stdout


@pytest.mark.slow
def test_doctor_end_to_end_with_the_engine(tmp_path):
    proc = subprocess.run([*openrlhf_speed_cmd(), "doctor", "--save_path", str(tmp_path / "ckpt")],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert "CPU mode" in lines["machine"] and "bf16" in lines
    assert "| ok " in lines["vllm engine"] and "proving-ci" in lines["vllm engine"], lines["vllm engine"]
    assert "CPU machine: CPU mode, ready; exit 0" in proc.stdout
