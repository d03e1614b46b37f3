"""Carries what a lent GPU machine lacks for scripts/gpu_driver_check.sh, in parts of one transfer.

That machine has torch 2.11.0 (CUDA 13), Python 3.12 and transformers, no vLLM, Ray or
DeepSpeed, reaches no index, and takes at most 64 MiB of files a call, the repository's tree
included; so the packages travel as one xz archive split into parts, one ignored folder
`.carry/part-NN/` a call.

    python3 scripts/gpu_carry.py build [--present FREEZE] [--chunk_mib 16]   # where pip reaches an index
    python3 scripts/gpu_carry.py receive        # on the lent machine, each call: parts to /tmp/gpu_carry
    python3 scripts/gpu_carry.py install        # there, once every part came: into /tmp/site

`build` resolves vLLM 0.26.0 (the newest release whose wheel requires torch 2.11.0), Ray 2.55.0
without extras, OpenRLHF's and this project's requirements (requirements/cpu.txt less tests
and plotting) and Megatron-Core for Python 3.12 on Linux x86-64, wheels only; drops what the
machine has (PRESENT, or the `pip list --format=freeze` that `receive` saved from it,
`--present`); cuts vLLM's FlashAttention and MoE kernels and Ray's jars, dashboard UI, RLlib,
Data and Serve (CUT); adds DeepSpeed's and OpenRLHF's own files; and writes the parts with a
MANIFEST.json (sha256, sizes, packages). Standard library only; Python 3.11+.
"""

import argparse
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
          "--abi", "abi3", "--abi", "none", "--platform", "manylinux_2_28_x86_64", "--platform",
          "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]
ROOTS = ["vllm==0.26.0", "ray==2.55.0", "megatron-core==0.16.1", "hjson", "msgpack", "py-cpuinfo", "ninja",
         "nvidia-ml-py", "pydantic>=2"]
# requirements/cpu.txt lines left out: tests, plotting, build tools, and what ROOTS gives instead.
# transformers-stream-generator is an sdist that nothing on this path imports.
LEFT_OUT = {"hypothesis", "pytest", "pytest-timeout", "matplotlib", "isort", "wheel", "ray", "megatron-core",
            "transformers-stream-generator"}
# On the lent machines already (the versions there pin the resolution); `--present` replaces it.
PRESENT = ["torch==2.11.0", "transformers==5.17.0", "triton", "nvidia-*", "cuda-*", "numpy", "packaging", "pyyaml",
           "requests", "filelock", "fsspec", "tqdm", "regex", "jinja2", "markupsafe", "sympy", "mpmath", "networkx",
           "typing-extensions", "setuptools", "pip", "huggingface-hub", "tokenizers", "safetensors", "peft",
           "accelerate", "psutil", "pytest", "pluggy", "iniconfig"]
NOT_IMPORTED = {"bitsandbytes", "wandb"}  # only with --ds.load_in_4bit / --logger.wandb
# Files cut from wheels: kernels the driver check never loads (fp32 attention takes no
# FlashAttention; no MoE model), and Ray's Java, web UI and libraries it never imports.
CUT = {"vllm": ["vllm/vllm_flash_attn/_vllm_fa2_C*", "vllm/vllm_flash_attn/_vllm_fa3_C*", "vllm/_moe_C*"],
       "ray": ["ray/jars/*", "ray/dashboard/client/*", "ray/rllib/*", "ray/data/*", "ray/serve/*"]}
SDISTS = ["deepspeed==0.19.6"]  # built on the machine, no ops (DS_BUILD_OPS=0): its JIT builds them
NO_DEPS = ["openrlhf==0.11.2"]  # its flash-attn pin is an sdist; its other requirements are in ROOTS
ARCHIVE = "carry.tar.xz"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip(*args) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    print(f"[gpu_carry] pip {' '.join(args[:6])} ...", flush=True)
    if subprocess.run(cmd).returncode != 0:
        sys.exit(f"gpu_carry.py: error: pip {args[0]} failed (above): this needs an index that serves the packages")


def roots() -> list:
    out = list(ROOTS)
    for line in (REPO / "requirements" / "cpu.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        if name and canonical(name.group()) not in LEFT_OUT:
            out.append(line)
    return out


def present(freeze) -> list:
    if not freeze:
        return PRESENT
    return [line.strip() for line in Path(freeze).read_text().splitlines() if "==" in line]


def is_present(name: str, have: list) -> bool:
    return any(fnmatch.fnmatch(canonical(name), canonical(p.split("==")[0]).replace("-*", "*")) for p in have)


def resolve(work: Path, have: list) -> list:
    """[name==version] to carry: the resolution of roots() for the machine, less what it has."""
    pins = [p for p in have if "==" in p and "*" not in p]
    constraints = work / "present.txt"
    constraints.write_text("".join(p + "\n" for p in pins))
    report = work / "report.json"
    pip("install", "--dry-run", "--ignore-installed", "--quiet", "--target", str(work / "unused"), "--report",
        str(report), "-c", str(constraints), *TARGET, *roots())
    chosen = [(i["metadata"]["name"], i["metadata"]["version"]) for i in json.loads(report.read_text())["install"]]
    return [f"{n}=={v}" for n, v in chosen if not is_present(n, have) and canonical(n) not in NOT_IMPORTED]


def cut(wheel: Path, patterns: list) -> int:
    """Rewrites `wheel` without the members matching `patterns` (RECORD too); bytes removed."""
    tmp = wheel.with_suffix(".tmp")
    removed = 0
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        gone = {i.filename for i in src.infolist() if any(fnmatch.fnmatch(i.filename, p) for p in patterns)}
        for info in src.infolist():
            if info.filename in gone:
                removed += info.file_size
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(True) if line.split(b",")[0].decode() not in gone)
            dst.writestr(info, data)
    tmp.replace(wheel)
    return removed


def pack(pkgs: Path, out: Path, chunk: int, packages: list) -> dict:
    """The archive of `pkgs` in parts of `chunk` bytes under out/part-NN/, each with MANIFEST.json."""
    out.mkdir(parents=True, exist_ok=True)
    archive = out / ARCHIVE
    with tarfile.open(archive, "w:xz", preset=9) as t:
        for f in sorted(pkgs.iterdir()):
            t.add(f, arcname=f.name)
    data = archive.read_bytes()
    archive.unlink()
    parts = [data[i:i + chunk] for i in range(0, len(data), chunk)]
    manifest = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "parts": len(parts),
                "packages": packages, "built": time.strftime("%Y-%m-%d"), "how": "python3 scripts/gpu_carry.py build"}
    for i, part in enumerate(parts, 1):
        folder = out / f"part-{i:02d}"
        folder.mkdir(parents=True)
        (folder / f"{ARCHIVE}.{i:02d}").write_bytes(part)
        (folder / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def build(args) -> int:
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory() as tmp:
        work, pkgs = Path(tmp), Path(tmp) / "pkgs"
        packages = resolve(work, present(args.present)) + NO_DEPS
        pip("download", "--no-deps", "-d", str(pkgs), *TARGET, *packages)
        pip("download", "--no-deps", "--no-binary=:all:", "-d", str(pkgs), *SDISTS)
        for wheel in pkgs.glob("*.whl"):
            patterns = CUT.get(canonical(wheel.name.split("-")[0]))
            if patterns:
                print(f"[gpu_carry] {wheel.name}: {cut(wheel, patterns) / 2**20:.0f} MiB cut", flush=True)
        for f in sorted(pkgs.iterdir(), key=lambda f: -f.stat().st_size)[:12]:
            print(f"[gpu_carry] {f.stat().st_size / 2**20:7.1f} MiB  {f.name}")
        manifest = pack(pkgs, out, args.chunk_mib * 2**20, packages + SDISTS)
    print(f"[gpu_carry] {manifest['bytes'] / 2**20:.1f} MiB in {manifest['parts']} parts under {out}/: carry "
          f"{out}/part-NN, one a call, each call running `python3 scripts/gpu_carry.py receive`")
    return 0


def receive(args) -> int:
    """Copies the parts this call carried to `--to` (kept while the machine stays warm); says
    which are still to come. The first call also records what the machine has ($OUT/present.txt)."""
    dest = Path(args.to)
    dest.mkdir(parents=True, exist_ok=True)
    for part in sorted(Path(args.carry).glob("part-*/*")):
        shutil.copy2(part, dest / part.name)
    out = os.environ.get("OUT")
    if out and not (dest / "present.saved").exists():
        freeze = subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
        Path(out, "present.txt").write_text(freeze.stdout)
        (dest / "present.saved").write_text("")
    return report_parts(dest)


def report_parts(dest: Path) -> int:
    if not (dest / "MANIFEST.json").is_file():
        print(f"gpu_carry.py: error: no part has come to {dest} yet: carry .carry/part-01 with this call", file=sys.stderr)
        return 1
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    missing = [i for i in range(1, manifest["parts"] + 1) if not (dest / f"{ARCHIVE}.{i:02d}").is_file()]
    print(f"[gpu_carry] {manifest['parts'] - len(missing)} of {manifest['parts']} parts in {dest}"
          + (f"; still to carry: {', '.join(f'.carry/part-{i:02d}' for i in missing)}" if missing else ": complete"))
    return 0


def install(args) -> int:
    """Joins the parts, checks them against MANIFEST.json, and installs every package into --site."""
    src, site = Path(args.source), Path(args.site)
    manifest = json.loads((src / "MANIFEST.json").read_text())
    parts = [src / f"{ARCHIVE}.{i:02d}" for i in range(1, manifest["parts"] + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        sys.exit(f"gpu_carry.py: error: {src} lacks {', '.join(missing)}: carry those .carry/part-NN folders first")
    data = b"".join(p.read_bytes() for p in parts)
    if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        sys.exit(f"gpu_carry.py: error: the parts in {src} do not join to the archive MANIFEST.json names: carry them again")
    pkgs = src / "pkgs"
    pkgs.mkdir(exist_ok=True)
    (src / ARCHIVE).write_bytes(data)
    with tarfile.open(src / ARCHIVE) as t:
        t.extractall(pkgs, filter="data")
    files = sorted(str(f) for f in pkgs.iterdir())
    env = {**os.environ, "DS_BUILD_OPS": "0"}
    common = ["--no-index", "--no-deps", "--no-build-isolation", "--no-compile", "--target", str(site), "--upgrade"]
    for what in (files, [str(REPO)]):  # the packages, then this project (its entry points: vLLM's plugin)
        cmd = [sys.executable, "-m", "pip", "install", "-q", *common, *what]
        if subprocess.run(cmd, env=env).returncode != 0:
            sys.exit(f"gpu_carry.py: error: pip install into {site} failed (above)")
    print(f"[gpu_carry] {len(files)} packages and this project in {site}: export PYTHONPATH={site}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="where pip reaches an index: resolve, download, cut, pack into parts")
    b.add_argument("--out", default=str(REPO / ".carry"))
    b.add_argument("--present", default=None, help="`pip list --format=freeze` of the lent machine ($OUT/present.txt)")
    b.add_argument("--chunk_mib", type=int, default=16, help="MiB a part (64 a call, less the repository's tree)")
    r = sub.add_parser("receive", help="on the lent machine: keep this call's parts")
    r.add_argument("--carry", default=str(REPO / ".carry"))
    r.add_argument("--to", default="/tmp/gpu_carry")
    i = sub.add_parser("install", help="on the lent machine: join the parts and install them")
    i.add_argument("--from", dest="source", default="/tmp/gpu_carry")
    i.add_argument("--site", default="/tmp/site")
    args = p.parse_args(argv)
    return {"build": build, "receive": receive, "install": install}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
