"""scripts/bootstrap.sh and its helpers, without installing or downloading anything: where
the CPU torch comes from (scripts/torch_cpu_source.py), the CUDA pins (requirements/
constraints-gpu.txt), the check of openrlhf's requirements (scripts/check_gpu_resolve.py),
and the GPU set-up's checks and build plan (scripts/gpu_build_lib.sh, `bootstrap.sh --gpu
--check`) against a stand-in nvcc and nvidia-smi. The resolver dry run itself needs PyPI:
`make check-gpu-resolve`, not run here."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _util import REPO, load_script
from packaging.requirements import Requirement

SCRIPTS = REPO / "scripts"
PYTORCH_CPU = "https://download.pytorch.org/whl/cpu"
WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


src = load_script("torch_cpu_source")
PATTERN = src.wheel_pattern("2.13.0", "cp311", "x86_64")


def test_pip_config_list_is_read_as_pip_prints_it():
    text = ("global.find-links='/opt/wheels'\n:env:.find-links='/opt/wheels'\n"
            "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'\n"
            "global.cert='/etc/ssl/certs/ca-certificates.crt'\n")
    assert src.pip_locations(text) == {"find-links": ["/opt/wheels"],
                                       "index": ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]}


def test_local_find_links_wheel_is_used(tmp_path):
    (tmp_path / WHEEL).write_bytes(b"")
    locations = {"find-links": ["https://example.org/wheels", f"file://{tmp_path}"], "index": []}
    assert src.local_cpu_wheel(locations, PATTERN) == str(tmp_path / WHEEL)
    assert src.pip_args("2.13.0", str(tmp_path / WHEEL), PYTORCH_CPU) == ["torch==2.13.0+cpu"]


def test_local_simple_index_entry_is_used(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text(f'<a href="../../files/{WHEEL}#sha256=00">{WHEEL}</a>')
    assert src.local_cpu_wheel({"find-links": [], "index": [f"file://{tmp_path}"]}, PATTERN).endswith(WHEEL)


@pytest.mark.parametrize("name", [
    "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",  # PyPI's CUDA build
    "torch-2.14.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",  # another version
    "torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl",  # another Python
    "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_aarch64.whl",  # another machine
])
def test_other_wheels_are_not_taken_for_it(tmp_path, name):
    (tmp_path / name).write_bytes(b"")
    assert src.local_cpu_wheel({"find-links": [str(tmp_path)], "index": []}, PATTERN) is None


def run_source(*args, **env):
    out = subprocess.run([sys.executable, str(SCRIPTS / "torch_cpu_source.py"), *args], capture_output=True,
                         text=True, timeout=120, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.split(), out.stderr


def test_without_a_local_wheel_pytorchs_cpu_index_is_added():
    args, why = run_source("--config-list", "")
    assert args == ["--extra-index-url", PYTORCH_CPU, "torch==2.13.0+cpu"]
    assert PYTORCH_CPU in why
    args, _ = run_source("--config-list", "", TORCH_CPU_INDEX="https://mirror.example/whl/cpu")
    assert args[1] == "https://mirror.example/whl/cpu"


@pytest.mark.skipif(not list(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl")),
                    reason="only on machines whose pip find-links holds the CPU wheel in /opt/wheels")
def test_this_machines_pip_config_gives_the_local_wheel():
    """Here pip is configured (find-links /opt/wheels) to see torch 2.13.0+cpu: no index added,
    so the bootstrap never reaches for download.pytorch.org."""
    args, why = run_source()
    assert args == ["torch==2.13.0+cpu"]
    assert "/opt/wheels/torch-2.13.0+cpu" in why


def test_bootstrap_refuses_an_unknown_argument():
    out = subprocess.run(["bash", str(SCRIPTS / "bootstrap.sh"), "--cuda"], capture_output=True, text=True)
    assert out.returncode == 2 and "'--cuda'" in out.stderr and "--gpu" in out.stderr
    out = subprocess.run(["bash", str(SCRIPTS / "bootstrap.sh"), "--check"], capture_output=True, text=True)
    assert out.returncode == 2 and "--gpu --check" in out.stderr  # the check is of the GPU set-up
    assert subprocess.run(["bash", "-n", str(SCRIPTS / "bootstrap.sh")]).returncode == 0


def constraints(name: str) -> dict:
    pins = {}
    for line in (REPO / "requirements" / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            pins[req.name] = req.specifier
    return pins


def test_gpu_pins_are_the_issues_versions():
    pins = constraints("constraints-gpu.txt")
    for name, version in {"torch": "2.13.0", "vllm": "0.29.0", "deepspeed": "0.19.6", "flash-attn": "2.8.3",
                          "openrlhf": "0.11.2", "megatron-core": "0.16.1"}.items():
        assert str(pins[name]) == f"=={version}", name
    for name in ("transformer-engine", "transformer-engine-torch", "transformer-engine-cu12", "transformer-engine-cu13"):
        te = pins[name]  # megatron-core 0.16.1's bounds; unpinned pip would take 2.20
        assert te.contains("2.9.0") and te.contains("2.11.0") and not te.contains("2.12.0") and not te.contains("2.20.0")


def test_bootstrap_and_setup_py_name_the_same_pins():
    pins = {name: str(spec)[2:] for name, spec in constraints("constraints-gpu.txt").items() if str(spec).startswith("==")}
    bootstrap = (SCRIPTS / "bootstrap.sh").read_text()
    setup = (REPO / "setup.py").read_text()
    for name in ("deepspeed", "flash-attn", "openrlhf", "torch"):
        assert f"{name}=={pins[name]}" in bootstrap, name
    for name in ("torch", "vllm", "deepspeed", "flash-attn", "megatron-core"):
        assert f'"{name}=={pins[name]}' in setup, name
    assert re.search(r"transformer-engine\[pytorch\]>=2\.9,<2\.12", setup)
    assert "transformer-engine[pytorch,core-$cu]>=2.9,<2.12" in bootstrap


def test_openrlhf_requirements_check_reads_markers_and_pins():
    check = load_script("check_gpu_resolve")
    env = {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"}
    versions = {"torch": "2.13.0", "deepspeed": "0.19.6"}
    assert check.unmet(["torch==2.13.0", "deepspeed==0.19.6", "vllm==0.29.0; extra == 'vllm'",
                        "pywin32; sys_platform == 'win32'"], versions, env) == []
    assert check.unmet(["flash-attn==2.8.3", "torch>2.13"], versions, env) == [
        "flash-attn==2.8.3 (resolved: None)", "torch>2.13 (resolved: 2.13.0)"]
    # Versions compare as versions, not text ("2.13.0" < "2.9" as strings); a pin takes a local
    # build of its version; names match in any spelling; a marker for this platform is checked.
    assert check.unmet(["torch>=2.9,<2.14", "Flash_Attn==2.8.3", "deepspeed==0.19.6; sys_platform == 'linux'"],
                       {**versions, "flash-attn": "2.8.3", "torch": "2.13.0+cu130"}, env) == []
    assert check.unmet(["torch>=2.9,<2.13; sys_platform == 'linux'"], versions, env) == [
        "torch>=2.9,<2.13; sys_platform == 'linux' (resolved: 2.13.0)"]


# -- bootstrap.sh --gpu: what it checks before compiling, with a stand-in toolkit and GPU ------
def fake_machine(tmp_path, nvcc=None, caps=()):
    """PATH directories with a stand-in nvcc (printing `nvcc --version` of release `nvcc`,
    in tmp/cuda/bin as a toolkit has it) and nvidia-smi (one compute capability per GPU);
    the system's gcc and Python stay visible through /usr/bin and /bin."""
    path = []
    if nvcc:
        cuda_bin = tmp_path / "cuda" / "bin"
        cuda_bin.mkdir(parents=True)
        (cuda_bin / "nvcc").write_text("#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                                       f"echo 'Cuda compilation tools, release {nvcc}, V{nvcc}.88'\n")
        (cuda_bin / "nvcc").chmod(0o755)
        path.append(str(cuda_bin))
    if caps:
        smi = tmp_path / "smi"
        smi.mkdir()
        (smi / "nvidia-smi").write_text("#!/bin/sh\nprintf '%s\\n' " + " ".join(caps) + "\n")
        (smi / "nvidia-smi").chmod(0o755)
        path.append(str(smi))
    return ":".join([*path, str(Path(sys.executable).parent), "/usr/bin", "/bin"])


def gpu_check(tmp_path, nvcc=None, caps=(), **env):
    keep = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG")}
    base = {**keep, "PATH": fake_machine(tmp_path, nvcc, caps), "CUDA_FALLBACK_HOME": str(tmp_path / "no-cuda"),
            "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPTS / "bootstrap.sh"), "--gpu", "--check"], capture_output=True,
                          text=True, timeout=60, env={**base, **env})


def needs_gcc():
    if not (Path("/usr/bin/gcc").exists() and Path("/usr/bin/g++").exists()):
        pytest.skip("no gcc/g++ in /usr/bin on this machine")
    import sysconfig
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        pytest.skip("this Python has no headers")


def test_gpu_check_on_an_h100_with_cuda_13_0(tmp_path):
    """The matching toolkit: no DeepSpeed override; archs from the visible GPUs (9.0 on
    H100) for DeepSpeed (TORCH_CUDA_ARCH_LIST) and flash-attn (FLASH_ATTN_CUDA_ARCHS=90)."""
    needs_gcc()
    out = gpu_check(tmp_path, nvcc="13.0", caps=("9.0",) * 8)
    assert out.returncode == 0, out.stderr
    assert f"nvcc 13.0 ({tmp_path}/cuda/bin/nvcc), torch's CUDA 13.0\n" in out.stdout
    assert "DS_SKIP_CUDA_CHECK" not in out.stdout
    assert "GPU archs: 9.0 (the visible GPUs, nvidia-smi)" in out.stdout
    assert "FLASH_ATTN_CUDA_ARCHS=90 MAX_JOBS=" in out.stdout and "expect about" in out.stdout


def test_gpu_check_writes_an_arch_specific_list_as_deepspeed_reads_it(tmp_path):
    """TORCH_CUDA_ARCH_LIST=9.0a (NVIDIA's images set such entries): DeepSpeed 0.19.6 cannot
    parse the suffix (its install stopped on an H100 with "invalid literal for int() with
    base 10: '0a'"), so its ops are built for 9.0, and the set-up says so."""
    needs_gcc()
    out = gpu_check(tmp_path, nvcc="13.0", caps=("9.0",), TORCH_CUDA_ARCH_LIST="9.0a")
    assert out.returncode == 0, out.stderr
    assert "GPU archs: 9.0 (TORCH_CUDA_ARCH_LIST=9.0a as you set it, written as DeepSpeed" in out.stdout
    assert "for 9.0 (1-5 min" in out.stdout and "FLASH_ATTN_CUDA_ARCHS=90 " in out.stdout


def test_gpu_check_skips_deepspeeds_cuda_check_for_another_13_minor(tmp_path):
    needs_gcc()
    out = gpu_check(tmp_path, nvcc="13.2", caps=("9.0",))
    assert out.returncode == 0, out.stderr
    assert "DS_SKIP_CUDA_CHECK=1: DeepSpeed 0.19.6 accepts another minor version only for CUDA 10-12" in out.stdout


@pytest.mark.parametrize("nvcc, needle", [
    (None, "nvcc: no CUDA toolkit found (CUDA_HOME=unset, no nvcc on PATH)"),
    ("12.8", "nvcc 12.8 in "),
])
def test_gpu_check_stops_and_names_what_to_install(tmp_path, nvcc, needle):
    out = gpu_check(tmp_path, nvcc=nvcc, caps=("9.0",))
    assert out.returncode == 1
    assert needle in out.stderr
    assert "install CUDA toolkit 13.0" in out.stderr and "CUDA_HOME" in out.stderr
    assert "DS_ADAM=0 FLASH_ATTN=0 TE=0" in out.stderr  # the way on without compiling
    assert "Traceback" not in out.stderr and "TypeError" not in out.stderr


def test_gpu_check_names_missing_python_headers(tmp_path):
    fake_py = tmp_path / "python3.11"
    fake_py.write_text("#!/bin/sh\nexit 1\n")  # a Python whose Python.h does not exist
    fake_py.chmod(0o755)
    out = gpu_check(tmp_path, nvcc="13.0", caps=("9.0",), PYTHON=str(fake_py))
    assert out.returncode == 1 and "install python3.11-dev" in out.stderr


def test_gpu_check_without_anything_to_compile_needs_no_toolkit(tmp_path):
    out = gpu_check(tmp_path, DS_ADAM="0", FLASH_ATTN="0", TE="0")
    assert out.returncode == 0 and "nothing to compile" in out.stdout
    out = gpu_check(tmp_path, DS_ADAM="0")  # flash-attn / TE on auto: skipped, said so
    assert out.returncode == 0 and "flash-attn and transformer-engine skipped" in out.stdout


def test_gpu_check_without_a_visible_gpu_builds_for_the_common_archs(tmp_path):
    needs_gcc()
    out = gpu_check(tmp_path, nvcc="13.0")
    assert out.returncode == 0, out.stderr
    assert "GPU archs: 8.0;9.0;10.0;12.0 (no GPU visible" in out.stdout
    assert "FLASH_ATTN_CUDA_ARCHS=80;90;100;120" in out.stdout


def lib(call: str, **env) -> str:
    out = subprocess.run(["bash", "-c", f'set -euo pipefail; source "{SCRIPTS}/gpu_build_lib.sh"; {call}'],
                         capture_output=True, text=True, timeout=30, env={"PATH": os.environ["PATH"], **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("value, want", [
    ("9.0a", "9.0"), ("8.0 9.0a 10.0f;12.0+PTX", "8.0;9.0;10.0;12.0+PTX"), ("9.0;9.0a", "9.0"),
    ("9.0a+PTX", "9.0+PTX"), ("8.0;9.0", "8.0;9.0"),
])
def test_deepspeed_arch_list_in_bash_is_the_actors(value, want):
    # the same cases as compat.device.deepspeed_arch_list's test: the set-up and the run agree
    assert lib(f'gpu_ds_archs "{value}"') == want


@pytest.mark.parametrize("caps, archs", [
    ("9.0", "90"), ("8.0;8.6;8.9", "80"), ("8.6;9.0;10.0;12.0", "80;90;100;120"), ("7.5", ""), ("12.1", "120"),
])
def test_flash_attn_archs_are_the_values_its_setup_reads(caps, archs):
    assert lib(f'gpu_flash_archs "{caps}"') == archs


@pytest.mark.parametrize("nvcc, torch, verdict", [
    ("13.0", "13.0", "match"), ("13.2", "13.0", "minor"), ("12.8", "13.0", "major"), ("", "13.0", "none"),
    ("12.4", "12.8", "ok-minor"),
])
def test_cuda_verdict(nvcc, torch, verdict):
    assert lib(f'gpu_cuda_verdict "{nvcc}" "{torch}"') == verdict


@pytest.mark.parametrize("cores, mem, archs, threads, jobs", [
    (16, 120, 1, 1, 16),  # one arch: a job per core
    (16, 40, 1, 1, 6),  # ... unless memory runs out first (6.5 GiB a job)
    (1, 120, 4, 4, 1),  # `srun --gpus=1` often gives one core
    (64, 500, 4, 4, 16),  # 4 archs x 4 nvcc threads: 16 jobs keep 64 cores busy (26 GiB each)
    (64, 200, 4, 4, 7),  # ... memory allows 7
])
def test_flash_attn_jobs_follow_cores_and_memory(cores, mem, archs, threads, jobs):
    assert int(lib(f"gpu_flash_jobs {cores} {mem} {archs} {threads}")) == jobs


def test_flash_attn_time_estimate_scales_with_archs_and_cores():
    one_arch_16 = int(lib("gpu_flash_minutes 16 1 16 1"))
    four_archs_1 = int(lib("gpu_flash_minutes 1 4 1 4"))
    assert one_arch_16 == 18 and four_archs_1 == 1152  # 72 files x 4 CPU-min x archs / busy cores


def test_an_nvcc_wrapper_on_path_yields_to_the_toolkit_with_headers(tmp_path):
    """An nvcc wrapper script in a bin directory of its own (/usr/local/bin/nvcc running
    /usr/local/cuda-13.0/bin/nvcc) makes torch guess CUDA_HOME=/usr/local; the set-up takes
    the toolkit that has CUDA's headers and exports it."""
    toolkit = tmp_path / "cuda-13.0"
    fake_machine(toolkit, nvcc="13.0")
    (toolkit / "cuda" / "include").mkdir()
    (toolkit / "cuda" / "include" / "cuda_runtime.h").write_text("")
    wrap = tmp_path / "local" / "bin"
    wrap.mkdir(parents=True)
    (wrap / "nvcc").write_text(f'#!/bin/sh\nexec {toolkit}/cuda/bin/nvcc "$@"\n')
    (wrap / "nvcc").chmod(0o755)
    home = lib("gpu_cuda_home", PATH=f"{wrap}:/usr/bin:/bin", CUDA_FALLBACK_HOME=str(toolkit / "cuda"))
    assert home == str(toolkit / "cuda")
    assert lib(f'gpu_nvcc_version "{home}"') == "13.0"


def test_gpu_check_on_gpus_flash_attn_2_cannot_use(tmp_path):
    """Compute capability 7.5 (T4): flash-attn is skipped on auto, an error with FLASH_ATTN=1."""
    needs_gcc()
    out = gpu_check(tmp_path, nvcc="13.0", caps=("7.5",))
    assert out.returncode == 0 and "flash-attn skipped: it needs compute capability 8.0+" in out.stdout
    assert "DeepSpeed: cpu_adam and fused_adam built into the venv for 7.5" in out.stdout
    out = gpu_check(tmp_path / "again", nvcc="13.0", caps=("7.5",), FLASH_ATTN="1")
    assert out.returncode == 1 and "set FLASH_ATTN=0" in out.stderr
