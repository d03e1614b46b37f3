"""Putting a build into the package, and comparing a build with the shipped copy.

`ship` is how the shipped proving ground was made: a build folder (from `openrlhf-speed
proving-ground build`) is copied whole into proving/shipped/<folder> (the model, tokenizer
and chat template, build.json, the RL data), and MANIFEST.sha256 is rewritten over every
shipped file.
`compare` is what `proving-ground build` prints after a rebuild: both pass tables and both
weights' sha256, and whether the rebuild is the shipped model bit for bit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from openrlhf_speed.proving import shipped
from openrlhf_speed.proving.recipe import get_variant

# What a build must hold to be shipped: what HF and vLLM load, and what the benchmark reads.
REQUIRED = ("config.json", shipped.WEIGHTS, "tokenizer.json", "tokenizer_config.json", shipped.BUILD_INFO,
            "data/train.jsonl", "data/test.jsonl")


def write_manifest(root: Path | None = None) -> Path:
    """MANIFEST.sha256 over every file of every shipped variant folder (sha256sum's format,
    paths relative to the shipped folder, sorted)."""
    root = Path(root) if root else shipped.ROOT
    lines = []
    for base in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("proving-")):
        for f in sorted(x for x in base.rglob("*") if x.is_file()):
            lines.append(f"{shipped.sha256_file(f)}  {f.relative_to(root).as_posix()}")
    manifest = root / shipped.MANIFEST.name
    manifest.write_text("\n".join(lines) + "\n")
    shipped.verify_folder.cache_clear()
    return manifest


def ship(variant: str, source: Path, made: dict | None = None, root: Path | None = None) -> Path:
    """Copy build folder `source` into the package as the shipped `variant` and re-pin.

    `made` fills build.json's provenance when the build predates it (the command, machine and
    CPU it ran on)."""
    root = Path(root) if root else shipped.ROOT
    source = Path(source)
    dest = root / get_variant(variant).folder
    missing = [f for f in REQUIRED if not (source / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{source} is not a complete proving-ground build: missing {', '.join(missing)}")
    if dest.exists():
        shutil.rmtree(dest)
    for f in sorted(x for x in source.rglob("*") if x.is_file()):
        target = dest / f.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)
    info = json.loads((dest / shipped.BUILD_INFO).read_text())
    if made and "made" not in info:
        info["made"] = made
    (dest / shipped.BUILD_INFO).write_text(json.dumps(info, indent=1) + "\n")
    write_manifest(root)
    return dest


def compare(variant: str, rebuilt: Path) -> tuple[str, bool]:
    """(the text printed after a rebuild, whether its weights are the shipped ones).

    The data files are compared too: they come from seeded draws alone, so they match on any
    machine; the weights match only where the float arithmetic does (same CPU kind and
    thread count)."""
    from openrlhf_speed.proving.passtable import format_table

    rebuilt = Path(rebuilt)
    base = shipped.verify(variant)
    ours, theirs = json.loads((rebuilt / shipped.BUILD_INFO).read_text()), shipped.build_info(variant)
    pins = shipped.read_manifest()
    same = {}
    for f in (shipped.WEIGHTS, "data/train.jsonl", "data/test.jsonl"):
        same[f] = (shipped.sha256_file(rebuilt / f), pins[f"{base.name}/{f}"])
    lines = [f"shipped {base.name}: " + _made(theirs), "RL train prompts, " + format_table(theirs["pass_table"]),
             f"rebuilt {rebuilt}: " + _made(ours), "RL train prompts, " + format_table(ours["pass_table"]), ""]
    lines.append(f"{'file':<20}{'rebuilt sha256':<66}{'shipped sha256':<66}")
    for f, (a, b) in same.items():
        lines.append(f"{f:<20}{a:<66}{b:<66}{'same' if a == b else 'DIFFERENT'}")
    match = same[shipped.WEIGHTS][0] == same[shipped.WEIGHTS][1]
    if match:
        lines.append("the rebuild is the shipped model bit for bit")
    else:
        lines.append("the rebuild's weights differ from the shipped ones (another CPU kind or thread count changes "
                     "float reductions); benchmarks use the shipped copy (model name 'proving'), so results stay "
                     f"comparable; to benchmark the rebuild instead: openrlhf-speed bench --model {rebuilt} "
                     f"--prompt_data {rebuilt / 'data' / 'train.jsonl'} --eval_data {rebuilt / 'data' / 'test.jsonl'}")
    return "\n".join(lines), match


def _made(info: dict) -> str:
    m = info.get("made", {})
    return (f"seed {info.get('seed')}, {info.get('build_seconds', 0):.0f}s, on {m.get('cpu', '?')}, "
            f"{m.get('torch_threads', info.get('torch_threads', '?'))} threads, torch {m.get('torch', '?')}")
