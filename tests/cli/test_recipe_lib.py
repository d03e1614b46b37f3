"""The recipes' shell libraries on their own: examples/scripts/recipe_lib.sh's switches and 7B
layout, and slurm/slurm_lib.sh's Ray head address, each called with stand-ins (a venv whose
python imports only what a case says, a DNS answer, an interface), so that every branch runs
on this machine in milliseconds."""

import os
import re
import subprocess

import pytest
from _util import REPO

SCRIPTS = REPO / "examples" / "scripts"
SBATCH = SCRIPTS / "slurm" / "train_speed_qwen32b.sbatch"
NO_FLASH_ATTN_NOTE = "flash_attn is not importable"


# -- recipe_lib.sh's switches, with a stand-in venv ---------------------------------------------
def stub_venv(tmp_path, importable: str):
    """A venv whose `python -c "import M"` succeeds only for the module named `importable`."""
    venv = tmp_path / f"venv-{importable or 'bare'}"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\n[ "$2" = "import {importable}" ] && exit 0\nexit 1\n')
    python.chmod(0o755)
    return venv


def lib_call(venv, call: str, **env):
    script = f'source "{SCRIPTS}/recipe_lib.sh"; {call}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "VENV": str(venv), **env})


@pytest.mark.parametrize("flash_attn, packing, want_packing, want_attn, note", [
    (True, None, True, "flash_attention_2", None),
    (False, None, False, "sdpa", NO_FLASH_ATTN_NOTE),
    (True, "0", False, "flash_attention_2", None),  # switched off by hand: no extra flag can
    (False, "0", False, "sdpa", NO_FLASH_ATTN_NOTE),
    (True, "1", True, "flash_attention_2", None),
    (False, "1", True, "flash_attention_2", "PACKING=1"),
])
def test_7b_packing_follows_flash_attn_and_packing(tmp_path, flash_attn, packing, want_packing, want_attn, note):
    venv = stub_venv(tmp_path, "flash_attn" if flash_attn else "")
    out = lib_call(venv, 'qwen7b_deepspeed_args A; printf "%s\\n" "${A[@]}"',
                   **({"PACKING": packing} if packing else {}))
    assert out.returncode == 0, out.stderr
    args = out.stdout.split("\n")
    assert ("--ds.packing_samples" in args) == want_packing
    assert args[args.index("--ds.attn_implementation") + 1] == want_attn
    notes = [line for line in out.stderr.splitlines() if "vLLM engines" not in line]  # but the layout's
    if note:
        assert note in out.stderr
    else:
        assert notes == []


def test_bad_packing_value_is_named(tmp_path):
    out = lib_call(stub_venv(tmp_path, ""), "qwen7b_deepspeed_args A", PACKING="yes")
    assert out.returncode != 0 and "PACKING=yes" in out.stderr and "auto" in out.stderr


@pytest.mark.parametrize("te", [True, False])
def test_megatron_note_when_transformer_engine_is_missing(tmp_path, te):
    out = lib_call(stub_venv(tmp_path, "transformer_engine.pytorch" if te else ""), "megatron_te_note")
    assert out.returncode == 0
    assert ("transformer_engine is not importable" in out.stderr) != te
    assert te or "local layer spec" in out.stderr


def test_gpu_recipes_take_the_gpu_venv_when_it_exists(tmp_path):
    (tmp_path / ".venv-gpu" / "bin").mkdir(parents=True)
    script = f'source "{SCRIPTS}/recipe_lib.sh"; cd "{tmp_path}"; default_gpu_venv; rm -r .venv-gpu; default_gpu_venv'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == [".venv", ".venv"]  # no python in it: not a venv
    (tmp_path / ".venv-gpu" / "bin").mkdir(parents=True)
    python = tmp_path / ".venv-gpu" / "bin" / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    out = subprocess.run(["bash", "-c", f'source "{SCRIPTS}/recipe_lib.sh"; cd "{tmp_path}"; default_gpu_venv'],
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == [".venv-gpu"]


# -- the 7B layout (recipe_lib.sh's qwen7b_layout) ----------------------------------------------
def layout(tmp_path, call="qwen7b_deepspeed_args A; printf '%s\\n' \"${A[@]}\"", **env):
    return lib_call(stub_venv(tmp_path, "flash_attn"), call, TRAIN_BATCH="384", **env)


def flag(args: list, name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("env, actor, engines, tp", [
    ({}, (1, 4), 4, 1),  # the default: a whole 8-GPU node, half for the actor
    ({"GPUS_PER_NODE": "4"}, (1, 2), 2, 1),
    ({"NNODES": "2", "RAY_ADDRESS": "10.0.0.1:6379"}, (1, 8), 8, 1),  # the actor on one whole node
    ({"NNODES": "4", "RAY_ADDRESS": "10.0.0.1:6379"}, (2, 8), 16, 1),
    ({"ACTOR_GPUS": "2", "VLLM_TP": "2"}, (1, 2), 3, 2),
])
def test_7b_layout_scales_with_the_gpus(tmp_path, env, actor, engines, tp):
    out = layout(tmp_path, **env)
    assert out.returncode == 0, out.stderr
    args = out.stdout.split("\n")
    assert (int(flag(args, "--actor.num_nodes")), int(flag(args, "--actor.num_gpus_per_node"))) == actor
    assert (int(flag(args, "--vllm.num_engines")), int(flag(args, "--vllm.tensor_parallel_size"))) == (engines, tp)
    total = int(env.get("GPUS_PER_NODE", 8)) * int(env.get("NNODES", 1))
    assert actor[0] * actor[1] + engines * tp == total  # every GPU used
    assert f"{total} GPUs" in out.stderr  # said


def test_7b_reference_model_takes_the_actors_gpus(tmp_path):
    """OpenRLHF requires the same nodes x GPUs for actor and reference when they are colocated."""
    out = layout(tmp_path, "qwen7b_deepspeed_args A; qwen7b_ref_args A; printf '%s\\n' \"${A[@]}\"",
                 NNODES="4", RAY_ADDRESS="10.0.0.1:6379")
    args = out.stdout.split("\n")
    assert flag(args, "--ref.num_nodes") == flag(args, "--actor.num_nodes") == "2"
    assert flag(args, "--ref.num_gpus_per_node") == flag(args, "--actor.num_gpus_per_node") == "8"
    assert "--train.colocate_actor_ref" in args


@pytest.mark.parametrize("env, needle", [
    ({"GPUS_PER_NODE": "1"}, "need 2 GPUs or more"),
    ({"ACTOR_GPUS": "8"}, "leaves none of the 8 GPUs"),
    ({"NNODES": "2", "RAY_ADDRESS": "x:1", "ACTOR_GPUS": "12"}, "must be whole nodes"),
    ({"ACTOR_GPUS": "5"}, "use a divisor of 192"),
    ({"VLLM_TP": "3"}, "VLLM_TP=3"),
    ({"NNODES": "2"}, "RAY_ADDRESS"),
    ({"GPUS_PER_NODE": "eight"}, "GPUS_PER_NODE=eight"),
])
def test_7b_layout_that_does_not_fit_is_named(tmp_path, env, needle):
    out = layout(tmp_path, "qwen7b_deepspeed_args A", **env)
    assert out.returncode != 0 and needle in out.stderr, out.stderr


# -- the Slurm job: the Ray head's address and the resources each `ray start` gets ---------------
def slurm_head_ip(tmp_path, getent="", hostname_i="", iface_ip="", **env):
    """slurm_lib.sh's ray_head_ip with stand-ins: getent (the cluster's DNS answer), srun
    (runs its command here), hostname -I (the head's own addresses) and ip (one interface)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    lines = "\n".join(f"{a} STREAM node1" for a in getent.split())
    scripts = {
        "getent": f"#!/bin/sh\ncat <<'X'\n{lines}\nX\n",
        "srun": '#!/bin/bash\nwhile [[ $1 == -* ]]; do [[ $1 == -w ]] && shift; shift; done\nexec "$@"\n',
        "hostname": f"#!/bin/sh\necho '{hostname_i}'\n",
        "ip": (f"#!/bin/sh\necho '3: ib0    inet {iface_ip}/16 brd 10.1.255.255 scope global ib0'\n" if iface_ip
               else "#!/bin/sh\nexit 1\n"),
    }
    for name, text in scripts.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    script = f'source "{SCRIPTS}/slurm/slurm_lib.sh"; ray_head_ip node1'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{bin_}:/usr/bin:/bin", **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_ray_head_ip_is_never_loopback(tmp_path):
    # A Debian-style /etc/hosts: the name resolves to 127.0.1.1 first.
    assert slurm_head_ip(tmp_path, getent="127.0.1.1 10.0.0.5") == "10.0.0.5"
    # Only loopback from DNS: the head's own addresses, the first routable IPv4 one.
    assert slurm_head_ip(tmp_path, getent="127.0.1.1", hostname_i="169.254.3.1 10.0.0.7 fe80::1") == "10.0.0.7"
    assert slurm_head_ip(tmp_path, getent="127.0.1.1") == ""  # the job then stops, naming RAY_HEAD_IP


def test_ray_head_ip_follows_the_interface_nccl_is_told_to_use(tmp_path):
    assert slurm_head_ip(tmp_path, getent="10.0.0.5", iface_ip="10.1.0.5", NCCL_SOCKET_IFNAME="ib0") == "10.1.0.5"
    assert slurm_head_ip(tmp_path, getent="10.0.0.5", iface_ip="10.1.0.5", NCCL_SOCKET_IFNAME="^docker,lo") == "10.0.0.5"
    assert slurm_head_ip(tmp_path, getent="10.0.0.5", RAY_HEAD_IP="192.168.1.9") == "192.168.1.9"


def test_sbatch_gives_each_ray_node_the_cores_it_declares():
    text = SBATCH.read_text()
    assert re.search(r"^#SBATCH --mem=0$", text, re.M) and re.search(r"^#SBATCH --exclusive$", text, re.M)
    assert "hostname --ip-address" not in text.split("set -euo pipefail")[1]
    step = re.search(r"^STEP=\((.*)\)$", text, re.M).group(1)
    assert '--cpus-per-task="$CPUS_PER_NODE"' in step and '--gpus-per-task="$GPUS_PER_NODE"' in step
    assert text.count('"${STEP[@]}" -w') == 2  # head and workers
    assert text.count('--num-cpus="$CPUS_PER_NODE" --num-gpus="$GPUS_PER_NODE"') == 2
