"""Carries what a lent GPU machine lacks for scripts/gpu_driver_check.sh, in parts of one transfer.

That machine has torch 2.11.0 (CUDA 13), Python 3.12 and transformers, no vLLM, Ray or
DeepSpeed, reaches no index, and takes at most 64 MiB of files a call, the repository's tree
included; so the packages travel as one xz archive split into parts, one ignored folder
`.carry/part-NN/` a call.

    python3 scripts/gpu_carry.py build [--present FREEZE] [--chunk_mib 54]   # where pip reaches an index
    python3 scripts/gpu_carry.py slim           # before the calls: the tree small enough to carry a part
    python3 scripts/gpu_carry.py receive        # on the lent machine, each call: parts to /tmp/gpu_carry
    python3 scripts/gpu_carry.py install        # there, once every part came: into /tmp/site
    python3 scripts/gpu_carry.py unslim         # after them, before any commit

`build` resolves vLLM 0.26.0 (the newest release whose wheel requires torch 2.11.0), Ray 2.55.0
without extras, OpenRLHF's and this project's requirements (requirements/cpu.txt less tests
and plotting) and Megatron-Core for Python 3.12 on Linux x86-64, wheels only; drops what the
machine has (the `pip list --format=freeze` that `receive` saves from it, kept as
scripts/gpu_lent_present.txt; `--present` another, `--present none` the short PRESENT list)
and what the check never imports (NOT_IMPORTED); cuts vLLM's kernels it never loads (FA2, MoE,
DeepGEMM, FlashMLA, Blackwell's) and Ray's jars, dashboard UI, RLlib, Data and Serve (CUT);
adds DeepSpeed's and OpenRLHF's own files; and writes the parts with a MANIFEST.json (sha256,
sizes, packages). Standard library only; Python 3.11+.
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
# pip matches a manylinux tag exactly, so each glibc the lent machine's (2.39, Ubuntu 24.04)
# covers is named: some wheels come for one tag alone (llguidance 2_24, NCCL 2_18).
GLIBC = list(range(39, 16, -1))
TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
          "--abi", "abi3", "--abi", "none", "--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64",
          *[a for n in GLIBC for a in ("--platform", f"manylinux_2_{n}_x86_64")]]
ROOTS = ["vllm==0.26.0", "ray==2.55.0", "megatron-core==0.16.1", "hjson", "msgpack", "py-cpuinfo", "ninja",
         "nvidia-ml-py", "pydantic>=2"]
# requirements/cpu.txt lines left out: tests, plotting, build tools, and what ROOTS gives instead.
# transformers-stream-generator is an sdist that nothing on this path imports.
LEFT_OUT = {"hypothesis", "pytest", "pytest-timeout", "matplotlib", "isort", "wheel", "ray", "megatron-core",
            "transformers-stream-generator"}
# On the lent machines already (`--present none`; by default scripts/gpu_lent_present.txt replaces it).
PRESENT = ["torch==2.11.0", "transformers==5.17.0", "triton", "nvidia-*", "cuda-*", "numpy", "packaging", "pyyaml",
           "requests", "filelock", "fsspec", "tqdm", "regex", "jinja2", "markupsafe", "sympy", "mpmath", "networkx",
           "typing-extensions", "setuptools", "pip", "huggingface-hub", "tokenizers", "safetensors", "peft",
           "accelerate", "psutil", "pytest", "pluggy", "iniconfig"]
# The machine's versions that the resolution must hold to: vLLM's wheel is built against torch's,
# and transformers' decides which of vLLM's model code loads. Other packages it has are dropped
# by name; vLLM's exact pins on some (numba 0.65.0, the machine's 0.68.0) would make the
# resolution impossible, and the check runs with the machine's versions of them.
PINNED = {"torch", "transformers"}
# Only with --ds.load_in_4bit / --logger.wandb; or vLLM's for models and inputs the check never
# has (DeepSeek's MLA and mHC kernels: tokenspeed-triton, tilelang and its z3; video decoding),
# which it imports only when such a model or input comes. About 210 MiB of wheels.
NOT_IMPORTED = {"bitsandbytes", "wandb", "tokenspeed-triton", "tilelang", "z3-solver", "pynvvideocodec", "torchcodec"}
# Files cut from wheels: kernels the driver check never loads (no MoE model), and Ray's
# Java, web UI and libraries it never imports. vLLM's GPU worker imports vllm_flash_attn,
# which refuses to load without one of its two kernel libraries: FA3's (Hopper, the lent
# H200's) stays, FA2's (Ampere and others) goes.
# vLLM's Rust frontend (vllm-rs) serves only `vllm serve` with VLLM_RUST_FRONTEND_PATH set;
# DeepGEMM, FlashMLA and the SM100 attention are kernels for FP8, MLA and Blackwell.
CUT = {"vllm": ["vllm/vllm_flash_attn/_vllm_fa2_C*", "vllm/_moe_C*",
                "vllm/vllm-rs", "vllm/third_party/deep_gemm/*", "vllm/third_party/fmha_sm100/*", "vllm/_flashmla_C*"],
       "ray": ["ray/jars/*", "ray/dashboard/client/*", "ray/rllib/*", "ray/data/*", "ray/serve/*"]}
SDISTS = ["deepspeed==0.19.6"]  # built on the machine, no ops (DS_BUILD_OPS=0): its JIT builds them
NO_DEPS = ["openrlhf==0.11.2"]  # its flash-attn pin is an sdist; its other requirements are in ROOTS
ARCHIVE = "carry.tar.xz"
LENT_PRESENT = REPO / "scripts" / "gpu_lent_present.txt"  # the lent H200's pip freeze, read 2026-11-30
# Each call carries the tracked tree beside one part, 64 MiB in all; benchmarks/ (41 MiB of
# evidence and growing) and the full proving builds (20 MiB) are files the check never reads.
SLIM = ["benchmarks", "openrlhf_speed/proving/shipped/proving-full-v4", "openrlhf_speed/proving/shipped/proving-full-v5"]
SLIM_MARK = "# gpu_carry.py slim: `python3 scripts/gpu_carry.py unslim` removes the lines below"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip(*args) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    print(f"[gpu_carry] pip {' '.join(args[:6])} ...", flush=True)
    if subprocess.run(cmd).returncode != 0:
        sys.exit(f"gpu_carry.py: error: pip {args[0]} failed (above): this needs an index that serves the packages")


def roots(have: list) -> list:
    """ROOTS and requirements/cpu.txt, less what LEFT_OUT names and what the machine has: its
    version is the one that runs (cpu.txt's transformers pin would conflict with it)."""
    out = list(ROOTS)
    for line in (REPO / "requirements" / "cpu.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        if name and canonical(name.group()) not in LEFT_OUT and not is_present(name.group(), have):
            out.append(line)
    return out


def present(freeze) -> list:
    if freeze == "none":
        return PRESENT
    # `pip list --format=freeze` lines, or bare names (device/KINDS.md lists names alone).
    # PRESENT's patterns too: the image's CUDA 13 is its own, and the NVIDIA wheels vLLM asks
    # beyond it (nvcc, NVVM, the CUTLASS DSL: 280 MiB) serve JIT builds the check never makes.
    lines = [line.strip() for line in Path(freeze).read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")] + [p for p in PRESENT if "*" in p]


def is_present(name: str, have: list) -> bool:
    return any(fnmatch.fnmatch(canonical(name), canonical(p.split("==")[0]).replace("-*", "*")) for p in have)


def resolve(work: Path, have: list) -> list:
    """[name==version] to carry: the resolution of roots() for the machine, less what it has."""
    pins = [p for p in have if "==" in p and canonical(p.split("==")[0]) in PINNED]
    constraints = work / "present.txt"
    constraints.write_text("".join(p + "\n" for p in pins))
    report = work / "report.json"
    pip("install", "--dry-run", "--ignore-installed", "--quiet", "--target", str(work / "unused"), "--report",
        str(report), "-c", str(constraints), *TARGET, *roots(have))
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
    with tarfile.open(archive, "w:xz", preset=1) as t:  # wheels are deflated already: 9 saves little, slowly
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


def git(repo: Path, *args) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"gpu_carry.py: error: git {' '.join(args[:3])} in {repo} failed: {out.stderr.strip()}")
    return out.stdout


def tracked_mib(repo: Path) -> float:
    return sum((repo / f).stat().st_size for f in git(repo, "ls-files", "-z").split("\0")
               if f and (repo / f).is_file()) / 2**20


def slim(args) -> int:
    """Takes SLIM out of git's index and ignores it there (the files stay on disk), so a device
    call carries the tree and a part; `unslim` puts them back. Nothing may be committed between."""
    repo, exclude = Path(args.repo), Path(args.repo) / ".git" / "info" / "exclude"
    text = exclude.read_text() if exclude.is_file() else ""
    if SLIM_MARK not in text:
        git(repo, "rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", *SLIM)
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text(text + ("" if text.endswith("\n") or not text else "\n") + SLIM_MARK + "\n"
                           + "".join(f"/{path}/\n" for path in SLIM))
    print(f"[gpu_carry] tracked tree {tracked_mib(repo):.1f} MiB (of 64 a call; the rest for one part). "
          f"Commit nothing until `python3 scripts/gpu_carry.py unslim`: git now sees {SLIM[0]}/ as deleted")
    return 0


def unslim(args) -> int:
    repo, exclude = Path(args.repo), Path(args.repo) / ".git" / "info" / "exclude"
    text = exclude.read_text() if exclude.is_file() else ""
    if SLIM_MARK in text:
        head, tail = text.split(SLIM_MARK + "\n", 1)
        rest = tail.splitlines(True)[len(SLIM):]
        exclude.write_text(head + "".join(rest))
    git(repo, "reset", "-q", "--", *SLIM)
    print(f"[gpu_carry] tracked tree {tracked_mib(repo):.1f} MiB: {', '.join(SLIM)} tracked again")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="where pip reaches an index: resolve, download, cut, pack into parts")
    b.add_argument("--out", default=str(REPO / ".carry"))
    b.add_argument("--present", default=str(LENT_PRESENT),
                   help="`pip list --format=freeze` of the lent machine ($OUT/present.txt of `receive`), or names "
                        "alone; `none`: the short PRESENT list")
    b.add_argument("--chunk_mib", type=int, default=54,
                   help="MiB a part: 64 a call, less the tree after `slim` (about 6)")
    r = sub.add_parser("receive", help="on the lent machine: keep this call's parts")
    r.add_argument("--carry", default=str(REPO / ".carry"))
    r.add_argument("--to", default="/tmp/gpu_carry")
    i = sub.add_parser("install", help="on the lent machine: join the parts and install them")
    i.add_argument("--from", dest="source", default="/tmp/gpu_carry")
    i.add_argument("--site", default="/tmp/site")
    for name, what in (("slim", "take what the check never reads out of the carried tree"),
                       ("unslim", "track it again")):
        sub.add_parser(name, help=what).add_argument("--repo", default=str(REPO))
    args = p.parse_args(argv)
    return {"build": build, "receive": receive, "install": install, "slim": slim, "unslim": unslim}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
