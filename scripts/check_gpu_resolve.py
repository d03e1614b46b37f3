"""Checks, without installing or downloading any large wheel, that the CUDA stack of
`make setup-gpu` resolves: pip's resolver in dry-run mode (metadata only) against
requirements/gpu.txt + constraints-gpu.txt, then what pip cannot resolve for it.

    python3.11 scripts/check_gpu_resolve.py [--report-dir DIR]      (make check-gpu-resolve)

Any Python 3.11 with pip >= 22.2 runs it, the system's included: pip only resolves
(`--dry-run`, nothing is installed), and `packaging` comes from pip itself when it is not
installed. So it needs no venv, and `make check-gpu-resolve` does not build one first.

Why not `pip --platform manylinux_2_28_x86_64 --only-binary=:all:`: one of openrlhf's
requirements (transformers-stream-generator) exists only as an sdist, which pip refuses
under --platform. So this runs on a Linux x86-64 Python 3.11 (the target platform itself)
and refuses elsewhere. `--isolated`: this machine's pip configuration (a local CPU torch,
local indexes) must not stand in for PyPI. Needs PyPI; takes 2-3 minutes.

Checks, in order:
1. pip resolves torch 2.13.0 (the CUDA build: it pulls nvidia-* wheels), vllm 0.29.0,
   megatron-core 0.16.1 and transformer-engine's core within >=2.9,<2.12 together;
2. openrlhf 0.11.2's own requirements (from its wheel's metadata, `--no-deps`) are met by
   that set plus the pins bootstrap.sh builds apart (deepspeed, flash-attn);
3. those apart-built pins exist on the index (as sdists).
"""

import argparse
import json
import platform
import subprocess
import sys
import urllib.request
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # a bare Python 3.11 (make check-gpu-resolve needs no venv): pip's own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
C = REPO / "requirements" / "constraints-gpu.txt"
BUILT_APART = {"deepspeed": "0.19.6", "flash-attn": "2.8.3"}  # bootstrap.sh --gpu, --no-build-isolation
SDISTS = {**BUILT_APART, "transformer-engine-torch": "2.11.0"}
INDEX = "https://pypi.org/simple"
WANT = {"torch": "2.13.0", "vllm": "0.29.0", "megatron-core": "0.16.1", "openrlhf": "0.11.2"}


def pip_dry_run(report: Path, *args) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet",
           "--no-input", "--prefer-binary", "-c", str(C), "--report", str(report), *args]
    print("[check] " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, text=True, capture_output=True)
    if out.returncode != 0:
        sys.exit(f"[check] FAILED: pip could not resolve:\n{out.stderr[-4000:]}")


def installs(report: Path) -> dict:
    return {canonicalize_name(i["metadata"]["name"]): i for i in json.loads(report.read_text())["install"]}


def unmet(requirements, versions: dict, env: dict) -> list:
    """Requirements (strings) not satisfied by `versions` (name -> version) under `env`."""
    bad = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
            continue
        have = versions.get(canonicalize_name(req.name))
        if have is None or not req.specifier.contains(have, prereleases=True):
            bad.append(f"{text} (resolved: {have})")
    return bad


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report-dir", type=Path, default=Path("/tmp/openrlhf_speed_gpu_resolve"))
    parser.add_argument("--cuda", default="cu13", help="transformer-engine core for torch's CUDA (PyPI's torch 2.13.0: 13)")
    args = parser.parse_args(argv)
    if (platform.system(), platform.machine(), sys.version_info[:2]) != ("Linux", "x86_64", (3, 11)):
        sys.exit("[check] run this with Python 3.11 on Linux x86-64 (the CUDA stack's platform): "
                 f"this is {platform.system()} {platform.machine()} Python {platform.python_version()}")
    args.report_dir.mkdir(parents=True, exist_ok=True)
    stack, own = args.report_dir / "gpu_stack.json", args.report_dir / "openrlhf.json"

    pip_dry_run(stack, "-r", str(REPO / "requirements" / "gpu.txt"), f"torch=={WANT['torch']}",
                f"megatron-core=={WANT['megatron-core']}", f"transformer-engine[core-{args.cuda}]>=2.9,<2.12")
    got = installs(stack)
    versions = {name: i["metadata"]["version"] for name, i in got.items()}
    for name, version in WANT.items():
        if name != "openrlhf" and versions.get(name) != version:
            sys.exit(f"[check] FAILED: {name} resolved to {versions.get(name)}, want {version}")
    cuda = sorted(n for n in versions if n.startswith("nvidia-cu") or n.startswith("nvidia-nccl"))
    if not cuda:
        sys.exit("[check] FAILED: torch resolved without CUDA libraries (a CPU build?)")
    te = {n: v for n, v in versions.items() if n.startswith("transformer-engine")}
    if set(te) != {"transformer-engine", f"transformer-engine-{args.cuda}"} or not all(
            Requirement("te>=2.9,<2.12").specifier.contains(v) for v in te.values()):
        sys.exit(f"[check] FAILED: transformer-engine resolved to {te}, want it and its {args.cuda} core in >=2.9,<2.12")
    print(f"[check] 1/3 resolved {len(got)} packages: torch {versions['torch']} (+ {', '.join(cuda)}), "
          f"vllm {versions['vllm']}, megatron-core {versions['megatron-core']}, {te}")

    pip_dry_run(own, "--no-deps", f"openrlhf=={WANT['openrlhf']}")
    meta = installs(own)["openrlhf"]["metadata"]
    env = json.loads(stack.read_text())["environment"]
    missing = unmet(meta.get("requires_dist", []), {**versions, **BUILT_APART}, env)
    if missing:
        sys.exit("[check] FAILED: openrlhf 0.11.2 requirements not met:\n  " + "\n  ".join(missing))
    print(f"[check] 2/3 openrlhf {meta['version']}: all {len(meta.get('requires_dist', []))} requirements met "
          f"(deepspeed and flash-attn by the pins bootstrap.sh builds apart)")

    for name, version in SDISTS.items():
        with urllib.request.urlopen(f"{INDEX}/{name}/", timeout=60) as page:
            listing = page.read().decode()
        stem = f"{name.replace('-', '_')}-{version}.tar.gz"
        if stem not in listing and f"{name}-{version}.tar.gz" not in listing:
            sys.exit(f"[check] FAILED: {name} {version} has no sdist on {INDEX}")
    print(f"[check] 3/3 sdists on {INDEX}: " + ", ".join(f"{n} {v}" for n, v in SDISTS.items()))
    print(f"[check] OK (reports in {args.report_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
