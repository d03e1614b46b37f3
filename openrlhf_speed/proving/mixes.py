"""The regime map's data mixes: v5's RL prompts re-weighted by level to move the share of
stock OpenRLHF's groups that carry no gradient, on the same start model.

Where screening pays depends on how much of the baseline's work is zero-variance groups
(docs/benchmarks.md, "The regime map"). v5's split puts about 0.4 of `off`'s groups at N = 24
there; a mix moves that share by level alone, since on this model a level's difficulty is
what sets a prompt's pass rate (the shipped difficulty table, per level: 2-digit sums and
2-digit x 1-digit products sit inside the band, 3-digit sums and 2x2-digit products are
mostly never solved, the one-step facts mostly always solved).

A mix is a subset of the shipped v5 split, so it adds no new prompt and never repeats one:
each level gives its first `round(weight x size)` rows in file order, `size` the largest
the split's rows allow, and a seeded shuffle interleaves them. Its rows are a function of the
pinned split, so the package ships the recipe, not a second copy of the rows: recipe.json
(pinned in the shipped manifest) holds the rows' sha256, and the first use builds the file
into the cache and refuses it unless it hashes to that. `openrlhf-speed proving-ground mix`
rebuilds one and says whether it is the pinned one.
"""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path

# Weights per level (they sum to 1). Set from the shipped difficulty table's per-level
# zero-variance odds at N = 24 before any run on the mix, then checked with `advise`
# (each mix's difficulty.md).
MIXES = {
    # Low: mostly the levels inside the band; some hard and fact prompts so that screening
    # still has something to reject.
    "low": {"sum_small": 0.004, "sum_1digit": 0.008, "mul_1x1": 0.018, "sum_2digit": 0.30,
            "addsub_2d1d_nocarry": 0.04, "mul_2x1": 0.30, "addsub_3digit": 0.10, "mul_2x2": 0.08,
            "expr_3term": 0.15},
    # High: mostly never-solved (3-digit, 2x2-digit) and always-solved (facts) prompts, as late
    # in a long run or on a data set far from the model's level; a few inside the band.
    "high": {"sum_small": 0.01, "sum_1digit": 0.025, "mul_1x1": 0.04, "sum_2digit": 0.055,
             "addsub_2d1d_nocarry": 0.105, "mul_2x1": 0.065, "addsub_3digit": 0.36, "mul_2x2": 0.30,
             "expr_3term": 0.04},
}
SEED = 0
FILE = "train.jsonl"


def mix_folder(name: str, root: Path | None = None) -> Path:
    """proving-full-v5/mixes/<name>: beside the split it is drawn from (not verified)."""
    from openrlhf_speed.proving import shipped

    if name not in MIXES:
        raise ValueError(f"unknown proving-ground mix {name!r}; mixes are: {', '.join(MIXES)}")
    return (Path(root) if root else shipped.ROOT) / "proving-full-v5" / "mixes" / name


def pinned_sha256(name: str) -> str:
    """The sha256 the shipped recipe pins the mix's rows to (the v5 folder verified first)."""
    from openrlhf_speed.proving import shipped

    shipped.verify("full")
    recipe = mix_folder(name) / "recipe.json"
    if not recipe.is_file():
        raise shipped.ShippedModelError(f"the shipped mix recipe {recipe} is missing; restore it from git")
    return json.loads(recipe.read_text())["train_sha256"]


def _cache_folder(name: str, pin: str) -> str:
    return f"{name}-{pin[:12]}"


def mix_of(path: str) -> str | None:
    """The mix whose mix_path `path` is, read back from its cache folder; None for any other file
    (a benchmark records its training file, and the regime map names each cell's mix by it)."""
    folder = Path(path).parent
    name, _, pin = folder.name.rpartition("-")
    return name if folder.parent.name == "mixes" and name in MIXES and folder.name == _cache_folder(name, pin) else None


def mix_path(name: str) -> str:
    """The mix's train.jsonl: the cache's build of the pinned recipe, built on first use and
    checked against the pinned sha256 (a ShippedModelError when it differs)."""
    from openrlhf_speed.models.default_model import cache_root
    from openrlhf_speed.proving import shipped

    pin = pinned_sha256(name)
    path = cache_root() / "mixes" / _cache_folder(name, pin) / FILE
    if path.is_file() and shipped.sha256_file(path) == pin:
        return str(path)
    rows, recipe = build(name, shipped.data_paths("full")[0])
    tmp = path.with_name(path.name + ".tmp")
    write(rows, recipe, tmp.parent, file=tmp.name)
    got = shipped.sha256_file(tmp)
    if got != pin:
        tmp.unlink()
        raise shipped.ShippedModelError(f"the {name} mix rebuilt from the shipped split has sha256 {got}, but its recipe "
                                        f"pins {pin}: mixes.py or the split changed; restore them from git")
    tmp.replace(path)
    return str(path)


def select(rows: list, weights: dict, seed: int = SEED) -> list:
    """The mix's rows: per level the first round(w x size) rows in order, `size` the largest
    that every weighted level's rows allow, then a seeded shuffle.

    rows: dicts with a 'level' key, in the split's order."""
    total = sum(weights.values())
    if abs(total - 1.0) > 1e-9 or any(w < 0 for w in weights.values()):
        raise ValueError(f"mix weights must be >= 0 and sum to 1, got a sum of {total:.6f}")
    by_level = collections.defaultdict(list)
    for r in rows:
        by_level[r.get("level")].append(r)
    missing = [lv for lv, w in weights.items() if w > 0 and not by_level.get(lv)]
    if missing:
        raise ValueError(f"the split has no rows of level(s) {', '.join(missing)} that the mix weights")
    size = min(int(len(by_level[lv]) / w) for lv, w in weights.items() if w > 0)
    chosen = [r for lv, w in weights.items() for r in by_level[lv][:min(round(w * size), len(by_level[lv]))]]
    random.Random(seed).shuffle(chosen)
    return chosen


def build(name: str, source: str) -> tuple[list, dict]:
    """(rows, recipe) of mix `name` drawn from the split file `source`."""
    with open(source) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    chosen = select(rows, MIXES[name])
    counts = collections.Counter(r["level"] for r in chosen)
    recipe = {"mix": name, "source": "proving-full-v5/data/train.jsonl", "source_rows": len(rows), "seed": SEED,
              "weights": MIXES[name], "rows": len(chosen), "rows_per_level": dict(sorted(counts.items())),
              "rule": "per level the first round(w x size) rows of the source in order, size the largest the "
                      "source allows, then random.Random(seed).shuffle"}
    return chosen, recipe


def write(rows: list, recipe: dict, folder: Path, file: str = FILE) -> Path:
    """The rows as jsonl (`file`) and recipe.json, with the rows' sha256 in it, in `folder`."""
    from openrlhf_speed.proving.shipped import sha256_file

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / file, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    recipe = {**recipe, "train_sha256": sha256_file(folder / file)}
    (folder / "recipe.json").write_text(json.dumps(recipe, indent=1) + "\n")
    return folder / file


__all__ = ["FILE", "MIXES", "SEED", "build", "mix_folder", "mix_of", "mix_path", "pinned_sha256", "select", "write"]
