"""`openrlhf-speed proving-ground`: the shipped proving-ground model, its rebuild and its difficulty.

    openrlhf-speed proving-ground show                  # the shipped model: sha256, recipe, pass tables
    openrlhf-speed proving-ground build                 # rebuild into the cache, compare with the shipped one
    openrlhf-speed proving-ground build --variant ci    # CI's smaller one (about a minute on 2 cores)
    openrlhf-speed proving-ground difficulty --samples 50 --prompts 400
    openrlhf-speed proving-ground calibrate --runs runs/bench_proving_v5 --frontier 0=shipped 50=A/difficulty.json
    openrlhf-speed proving-ground mix --name high       # rebuild a regime-map mix, compare with the shipped one

The package ships one build of each variant, pinned by sha256 (proving/shipped/MANIFEST.sha256);
the model names `proving` and `proving-ci` resolve to it wherever a model is taken (train,
evaluate, bench), so every machine benchmarks the same start model. `build` remakes it from its
recipe (about 16-30 minutes on 2 cores without native bf16) and prints both pass tables and both
sha256s: a build on another CPU kind trains other weights. `difficulty` measures the RL prompt
set on the shipped model as the paper's Fig. 2 does (pass rate at 50 samples per prompt).
"""

import argparse
import json
import sys
import time
from pathlib import Path

from openrlhf_speed.proving.recipe import VARIANTS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed proving-ground", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build", help="rebuild a variant into the cache and compare it with the shipped one")
    b.add_argument("--variant", choices=sorted(VARIANTS), default="full")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--force", action="store_true", help="rebuild even when the cache has it")
    b.add_argument("--out", default=None, help="folder to write instead of the cache's")
    s = sub.add_parser("show", help="print the shipped variant's sha256, provenance and pass tables")
    s.add_argument("--variant", choices=sorted(VARIANTS), default="full")
    d = sub.add_parser("difficulty", help="pass rate at --samples per prompt on the shipped model (Fig. 2)")
    d.add_argument("--variant", choices=sorted(VARIANTS), default="full")
    d.add_argument("--samples", type=int, default=50)
    d.add_argument("--prompts", type=int, default=400, help="first N prompts of the split (0: all)")
    d.add_argument("--split", choices=("train", "test"), default="train")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--out", default=None, help="folder for difficulty.json and difficulty.md")
    d.add_argument("--model", default=None,
                   help="an HF folder to measure instead of the shipped start model, e.g. a run's --ckpt.save_hf "
                   "checkpoint: how the frontier moved during training (the variant still gives the prompts)")
    d.add_argument("--ship", action="store_true",
                   help="store the result beside the shipped model and re-pin the manifest (maintainers)")
    c = sub.add_parser("calibrate", help="whether `off` runs put a horizon in the paper's regime (still learning at "
                       "its end, a frontier that moves), before any curriculum is compared on it")
    c.add_argument("--runs", required=True, help="a bench folder of `--curricula off` runs (off-r*/metrics.jsonl)")
    c.add_argument("--frontier", nargs="*", default=[], metavar="STEP=FILE",
                   help="a checkpoint's difficulty.json (from `difficulty --model`) at STEP; `0=shipped` takes the "
                   "start model's shipped table")
    c.add_argument("--variant", choices=sorted(VARIANTS), default="full", help="whose shipped table `shipped` means")
    c.add_argument("--out", default=None, help="folder for calibration.json and calibration.md")
    m = sub.add_parser("mix", help="rebuild a regime-map data mix from the shipped v5 split (proving/mixes.py) and "
                       "compare it with the shipped one")
    from openrlhf_speed.proving.mixes import MIXES

    m.add_argument("--name", choices=sorted(MIXES), required=True)
    m.add_argument("--out", default=None, help="folder for the rebuilt train.jsonl and recipe.json (default: none)")
    m.add_argument("--ship", action="store_true",
                   help="store the rebuild's recipe and sha256 as the shipped mix and re-pin the manifest (maintainers)")
    sh = sub.add_parser("ship", help="copy a build folder into the package as the shipped variant (maintainers)")
    sh.add_argument("--variant", choices=sorted(VARIANTS), default="full")
    sh.add_argument("--source", required=True, help="a folder written by `proving-ground build`")
    sh.add_argument("--commit", default=None,
                    help="git commit of the code that made a build whose build.json predates provenance")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from openrlhf_speed.proving.shipped import ShippedModelError

    try:
        return {"build": _build, "show": _show, "difficulty": _difficulty, "calibrate": _calibrate,
                "mix": _mix, "ship": _ship}[args.action](args)
    except ShippedModelError as e:
        print(f"openrlhf-speed proving-ground: error: {e}", file=sys.stderr)
        return 2


def _build(args) -> int:
    from openrlhf_speed.proving import build as builder
    from openrlhf_speed.proving.ship import compare

    from openrlhf_speed.proving import get_variant, shipped

    source = get_variant(args.variant).weights_from  # v5 starts from v4's shipped weights
    out = builder.build(args.variant, seed=args.seed, out=args.out, force=args.force,
                   weights_dir=shipped.path(source) if source else None)
    text, _ = compare(args.variant, out)
    print(text)
    print(out)
    return 0


def _show(args) -> int:
    from openrlhf_speed.proving import shipped

    print(shipped.describe(args.variant)["text"])
    return 0


def _difficulty(args) -> int:
    from openrlhf_speed.proving import shipped
    from openrlhf_speed.proving.difficulty import load_rows, measure

    if args.samples < 1 or args.prompts < 0:
        raise SystemExit("openrlhf-speed proving-ground: error: --samples must be >= 1 and --prompts >= 0")
    if args.model and args.ship:
        raise SystemExit("openrlhf-speed proving-ground: error: --ship stores the shipped start model's difficulty; "
                         "a --model checkpoint's goes to --out")
    base = shipped.path(args.variant)
    model = Path(args.model) if args.model else base
    if not (model / "config.json").is_file():
        raise SystemExit(f"openrlhf-speed proving-ground: error: --model {model} has no config.json: give an HF folder "
                         "(a run's --ckpt.save_hf checkpoint or its --ckpt.output_dir)")
    rows = load_rows(str(base / "data" / f"{args.split}.jsonl"), args.prompts or None)
    print(f"[proving] sampling {len(rows)} {args.split} prompts x {args.samples} from {model}", flush=True)
    result = measure(model, rows, samples=args.samples, seed=args.seed, split=args.split)
    weights = model / shipped.WEIGHTS
    result["model_weights_sha256"] = (shipped.sha256_file(weights) if args.model and weights.is_file() else
                                      shipped.read_manifest().get(f"{base.name}/{shipped.WEIGHTS}"))
    result["command"] = ("openrlhf-speed proving-ground difficulty " + f"--variant {args.variant} --samples "
                         f"{args.samples} --prompts {args.prompts} --split {args.split} --seed {args.seed}"
                         + (f" --model {args.model}" if args.model else ""))
    text = shipped.format_difficulty(result) + f"\n({result['seconds']:.0f}s, {result['torch_threads']} threads)"
    print(text)
    for folder in ([Path(args.out)] if args.out else []) + ([base] if args.ship else []):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / shipped.DIFFICULTY).write_text(json.dumps(result, indent=1) + "\n")
        (folder / "difficulty.md").write_text(f"`{result['command']}`\n\n```\n{text}\n```\n")
        print(f"stored in {folder / shipped.DIFFICULTY} and {folder / 'difficulty.md'}")
    if args.ship:
        from openrlhf_speed.proving.ship import write_manifest

        write_manifest()
        print(f"re-pinned {shipped.MANIFEST}")
    return 0


def _calibrate(args) -> int:
    from openrlhf_speed.proving import shipped
    from openrlhf_speed.bench.calibrate import calibrate, format_calibration

    err = "openrlhf-speed proving-ground calibrate: error:"
    tables = []
    for item in args.frontier:
        step, sep, file = item.partition("=")
        if not sep or not step.isdigit():
            raise SystemExit(f"{err} --frontier {item!r}: give STEP=FILE, e.g. 50=runs/frontier/50/difficulty.json")
        path = shipped.path(args.variant) / shipped.DIFFICULTY if file == "shipped" else Path(file)
        if not path.is_file():
            raise SystemExit(f"{err} --frontier {item!r}: {path} does not exist (make it with `proving-ground "
                             "difficulty --model <checkpoint> --out <folder>`)")
        tables.append((int(step), json.loads(path.read_text())))
    try:
        result = calibrate(Path(args.runs), tables)
    except (OSError, ValueError) as e:
        raise SystemExit(f"{err} {e}") from None
    text = format_calibration(result)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "calibration.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "calibration.md").write_text(text + "\n")
        print(f"stored in {out / 'calibration.json'} and {out / 'calibration.md'}")
    return 0


def _mix(args) -> int:
    import tempfile

    from openrlhf_speed.proving import mixes, shipped

    rows, recipe = mixes.build(args.name, shipped.data_paths("full")[0])
    with tempfile.TemporaryDirectory() as tmp:
        rebuilt = shipped.sha256_file(mixes.write(rows, recipe, Path(tmp)))
    pinned = None
    if (mixes.mix_folder(args.name) / "recipe.json").is_file():
        pinned = json.loads((mixes.mix_folder(args.name) / "recipe.json").read_text()).get("train_sha256")
    print(f"mix {args.name}: {recipe['rows']} of {recipe['source_rows']} v5 RL prompts; per level "
          + ", ".join(f"{k} {v}" for k, v in recipe["rows_per_level"].items()))
    print(f"rebuilt sha256 {rebuilt}\npinned sha256  {pinned or '(none shipped)'}: "
          + ("same" if rebuilt == pinned else "DIFFERENT"))
    if args.out:
        print(f"stored in {mixes.write(rows, recipe, Path(args.out))}")
    if args.ship:  # the recipe and the rows' sha256 go into the package; the rows are built on use
        from openrlhf_speed.proving.ship import write_manifest

        folder = mixes.mix_folder(args.name)
        with tempfile.TemporaryDirectory() as tmp:
            mixes.write(rows, recipe, Path(tmp))
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "recipe.json").write_text((Path(tmp) / "recipe.json").read_text())
        write_manifest()
        print(f"shipped {folder / 'recipe.json'}; re-pinned {shipped.MANIFEST}; measure its step-0 difficulty with "
              f"`openrlhf-speed advise --model proving --data {mixes.mix_path(args.name)} --vllm.dtype float32 --json` "
              "(docs/benchmarks.md)")
    return 0


def _ship(args) -> int:
    from openrlhf_speed.proving import shipped
    from openrlhf_speed.proving.build import provenance
    from openrlhf_speed.proving.ship import ship

    # Used only when the build's own build.json lacks provenance: this machine's, so run `ship`
    # where the build ran; the date is the build's.
    source = Path(args.source)
    made = provenance(args.variant, json.loads((source / shipped.BUILD_INFO).read_text()).get("seed", 0))
    made["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((source / shipped.BUILD_INFO).stat().st_mtime))
    if args.commit:
        made["git_commit"] = args.commit
    dest = ship(args.variant, source, made=made)
    print(f"shipped {args.source} as {dest}; {shipped.MANIFEST} re-pinned")
    print(shipped.describe(args.variant)["text"])
    return 0
