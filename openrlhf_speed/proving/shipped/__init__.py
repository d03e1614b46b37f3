"""The shipped proving ground: the start model and RL prompts every machine benchmarks on.

A build's weights depend on the CPU that trains them (float reductions differ with the
kernels and the thread count), and on this model's scale a few bits move its pass table by
several points, so a benchmark whose subject is rebuilt on each machine measures a
different start model on each. The package therefore carries one build per variant, made
once by `openrlhf-speed proving-ground build` (its recipe, command, machine and CPU are in
its build.json), and the names `proving`, `proving-full` and `proving-ci` resolve to it.

Every shipped file is pinned by sha256 in MANIFEST.sha256 (`sha256sum -c` reads it from
this folder). A folder is checked before it is handed out: a changed, missing or unlisted
file is refused with its name, so a benchmark never runs on a copy that differs from the
published one. `openrlhf-speed proving-ground build` still rebuilds into the cache and
compares the rebuild with the shipped copy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path

from openrlhf_speed.models import ModelNotFoundError
from openrlhf_speed.proving.recipe import get_variant

ROOT = Path(__file__).resolve().parent
MANIFEST = ROOT / "MANIFEST.sha256"
WEIGHTS = "model.safetensors"
BUILD_INFO = "build.json"
DIFFICULTY = "difficulty.json"


class ShippedModelError(ModelNotFoundError):
    """The shipped proving-ground copy is missing or differs from its manifest (a
    ModelNotFoundError, so the CLIs print it as a one-line error)."""


def folder(name: str) -> Path:
    """The shipped folder of a proving-ground name or variant (not verified; see `path`)."""
    return ROOT / get_variant(name).folder


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(manifest: Path | None = None) -> dict[str, str]:
    """{relative path: sha256} from `sha256sum`-format lines (MANIFEST by default)."""
    manifest = Path(manifest) if manifest else MANIFEST
    if not manifest.is_file():
        raise ShippedModelError(f"{manifest} is missing: the shipped proving ground is incomplete; "
                                "reinstall the package (make setup) or restore the file from git")
    pins = {}
    for i, line in enumerate(manifest.read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            raise ShippedModelError(f"{manifest}:{i}: not a `sha256  path` line: {line!r}")
        pins[rel] = digest
    return pins


def files_under(base: Path) -> list[str]:
    """Every file below `base`, as paths relative to ROOT (the manifest's keys)."""
    return sorted(p.relative_to(ROOT).as_posix() for p in base.rglob("*") if p.is_file())


def verify(name: str, root: Path | None = None) -> Path:
    """The variant's shipped folder, after checking every file against the manifest.

    Raises ShippedModelError naming the first file that is missing, changed or not pinned.
    `root` replaces ROOT (tests check a copy)."""
    base_root = Path(root) if root else ROOT
    return verify_folder(get_variant(name).folder, base_root)


@functools.lru_cache(maxsize=None)
def verify_folder(folder_name: str, base_root: Path) -> Path:
    """`verify` of one folder under `base_root`, once per process: a train run resolves the
    name several times, and the files are read-only package data (ship.py clears the cache
    after it re-pins them)."""
    base = base_root / folder_name
    if not base.is_dir():
        raise ShippedModelError(f"the shipped proving ground {base} is missing; reinstall the package "
                                "(make setup) or restore it from git")
    pins = {rel: d for rel, d in read_manifest(base_root / MANIFEST.name).items()
            if rel.startswith(folder_name + "/")}
    if not pins:
        raise ShippedModelError(f"{base_root / MANIFEST.name} pins no file of {folder_name}")
    present = {p.relative_to(base_root).as_posix() for p in base.rglob("*") if p.is_file()}
    for rel in sorted(pins):
        path = base_root / rel
        if rel not in present:
            raise ShippedModelError(f"shipped file {path} is missing; restore it from git (it is pinned in "
                                    f"{MANIFEST.name})")
        got = sha256_file(path)
        if got != pins[rel]:
            raise ShippedModelError(f"shipped file {path} has sha256 {got}, but {MANIFEST.name} pins "
                                    f"{pins[rel]}: the copy was changed; restore it from git, or pass a "
                                    "folder of your own as the model instead of a proving-ground name")
    extra = sorted(present - set(pins))
    if extra:
        raise ShippedModelError(f"shipped folder {base} holds files {MANIFEST.name} does not pin: "
                                f"{', '.join(extra)}; remove them")
    return base


def is_shipped(name: str) -> bool:
    """Whether the manifest pins the variant (then its files must match: see `verify`)."""
    prefix = get_variant(name).folder + "/"
    return MANIFEST.is_file() and any(rel.startswith(prefix) for rel in read_manifest())


def path(name: str) -> Path:
    """The folder a proving-ground name resolves to: the verified shipped copy, or, for a
    variant this checkout does not ship (a recipe changed without a new shipped build), the
    cache's build of it, built on first use, with a warning that it is machine-dependent."""
    if is_shipped(name):
        return verify(name)
    from openrlhf_speed.proving.build import ensure_built

    print(f"[proving] warning: '{name}' has no shipped copy in {ROOT} ({MANIFEST.name} does not pin "
          f"{get_variant(name).folder}); using the cache's build, whose weights depend on this machine's "
          "CPU: results are not comparable across machines", file=sys.stderr, flush=True)
    source = get_variant(name).weights_from
    return ensure_built(name, weights_dir=path(source) if source else None)


def data_paths(name: str) -> tuple[str, str]:
    """(train.jsonl, test.jsonl): the shipped RL prompts and held-out prompts, verified."""
    data = path(name) / "data"
    return str(data / "train.jsonl"), str(data / "test.jsonl")


def build_info(name: str) -> dict:
    return json.loads((path(name) / BUILD_INFO).read_text())


def describe(name: str) -> dict:
    """What a benchmark report prints about its start model, from the verified shipped copy.

    Keys: name, variant, shipped (False: no shipped copy, this machine's cache build), folder, weights_file, weights_sha256, parameters, made (recipe
    version, command, machine, CPU), pass_table / held_out_pass_table (dicts) and their
    `*_text` renderings, difficulty (dict or None) and difficulty_text, and `text`: the whole
    block ready to print (a header line with the sha256, then the tables)."""
    from openrlhf_speed.proving.passtable import format_table

    base = path(name)
    info = build_info(name)
    is_pinned = is_shipped(name)
    weights_sha = read_manifest()[f"{base.name}/{WEIGHTS}"] if is_pinned else sha256_file(base / WEIGHTS)
    difficulty = None
    if (base / DIFFICULTY).is_file():
        difficulty = json.loads((base / DIFFICULTY).read_text())
    made = info.get("made", {})
    d = {
        "name": name, "variant": info["variant"], "shipped": is_pinned, "folder": str(base), "weights_file": WEIGHTS,
        "weights_sha256": weights_sha, "parameters": info["parameters"], "made": made,
        "pass_table": info["pass_table"], "held_out_pass_table": info.get("held_out_pass_table"),
        "pass_table_text": "RL train prompts, " + format_table(info["pass_table"]),
        "held_out_pass_table_text": ("held-out prompts, " + format_table(info["held_out_pass_table"])
                                     if info.get("held_out_pass_table") else ""),
        "difficulty": difficulty,
        "difficulty_text": format_difficulty(difficulty) if difficulty else "",
    }
    where = f"shipped {base.name}" if is_pinned else f"NOT SHIPPED: this machine's build {base}"
    header = (f"start model: '{name}' = {where} ({info['parameters'] / 1e6:.2f}M parameters), "
              f"{WEIGHTS} sha256 {weights_sha}")
    if made:
        header += (f"\n  made by `{made.get('command', '?')}` (recipe v{made.get('recipe_version', '?')}, seed "
                   f"{info.get('seed')}) on {made.get('cpu', '?')}, torch {made.get('torch', '?')}, "
                   f"{made.get('torch_threads', '?')} threads, {made.get('date', '?')}")
    d["text"] = "\n".join(x for x in (header, d["pass_table_text"], d["held_out_pass_table_text"],
                                       d["difficulty_text"]) if x)
    return d


def format_difficulty(d: dict) -> str:
    """The Fig. 2-style difficulty statement: shares never / always solved, mean pass rate,
    and the histogram of per-prompt pass rates."""
    a = d["all"]
    lines = [f"RL prompt set difficulty ({d['split']}.jsonl, {a['prompts']} prompts x {d['samples']} samples at "
             f"temperature {d['temperature']}): never solved {a['never']:.2f}, always solved {a['always']:.2f}, "
             f"mean pass rate {a['pass_rate']:.3f} (paper, Qwen2.5-Math-7B on DAPO-17k: about 0.26 never solved)",
             f"{'level':<22}{'prompts':>8}{'never':>8}{'some':>8}{'always':>8}{'pass':>8}"]
    for lv, r in [*d["levels"].items(), ("all", a)]:
        lines.append(f"{lv:<22}{r['prompts']:>8}{r['never']:>8.2f}{r['some']:>8.2f}{r['always']:>8.2f}"
                     f"{r['pass_rate']:>8.3f}")
    lines.append("per-prompt pass rate histogram:")
    width = max(c for _, c in d["histogram"]) or 1
    for label, count in d["histogram"]:
        lines.append(f"  {label:>11} {count:>6} {count / a['prompts']:>6.2f} {'#' * round(40 * count / width)}")
    return "\n".join(lines)


__all__ = ["MANIFEST", "ROOT", "ShippedModelError", "data_paths", "describe", "folder", "format_difficulty",
           "is_shipped", "path", "read_manifest", "sha256_file", "verify"]
