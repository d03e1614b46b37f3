"""scripts/bootstrap.sh and its helpers, without installing or downloading anything: where
the CPU torch comes from (scripts/torch_cpu_source.py), the CUDA pins (requirements/
constraints-gpu.txt) and the check of openrlhf's requirements (scripts/check_gpu_resolve.py).
The resolver dry run itself needs PyPI: `make check-gpu-resolve`, not run here."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _util import REPO
from packaging.requirements import Requirement
from packaging.version import Version

SCRIPTS = REPO / "scripts"
PYTORCH_CPU = "https://download.pytorch.org/whl/cpu"
WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


src = load("torch_cpu_source")
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
    check = load("check_gpu_resolve")
    env = {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"}
    versions = {"torch": "2.13.0", "deepspeed": "0.19.6"}
    assert check.unmet(["torch==2.13.0", "deepspeed==0.19.6", "vllm==0.29.0; extra == 'vllm'",
                        "pywin32; sys_platform == 'win32'"], versions, env) == []
    assert check.unmet(["flash-attn==2.8.3", "torch>2.13"], versions, env) == [
        "flash-attn==2.8.3 (resolved: None)", "torch>2.13 (resolved: 2.13.0)"]
    assert Version("2.13.0")  # packaging is what both sides compare with
