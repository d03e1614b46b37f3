"""`openrlhf-speed proving-ground`: build the proving-ground model and its RL prompts.

    openrlhf-speed proving-ground build               # the benchmark's model (about 10 min on 2 cores without native bf16)
    openrlhf-speed proving-ground build --variant ci  # CI's smaller one (under a minute there)

Prints supervised-training progress, then the start model's pass table (never / some /
always solved at 8 samples per level), and the folder to pass as a model. The model names
`proving` and `proving-ci` build it on first use anywhere a model is taken (train, evaluate,
bench), so running this first is optional; it is how to see the table or rebuild (--force).
"""

import argparse
import json

from openrlhf_speed.proving.recipe import VARIANTS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="openrlhf-speed proving-ground", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build", help="build (or find) a variant in the cache")
    b.add_argument("--variant", choices=sorted(VARIANTS), default="full")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--force", action="store_true", help="rebuild even when the cache has it")
    b.add_argument("--out", default=None, help="folder to write instead of the cache's")
    s = sub.add_parser("show", help="print a built variant's recipe summary and pass table")
    s.add_argument("--variant", choices=sorted(VARIANTS), default="full")
    args = p.parse_args(argv)

    from openrlhf_speed.proving import build as pg
    from openrlhf_speed.proving.passtable import format_table

    if args.action == "build":
        out = pg.build(args.variant, seed=args.seed, out=args.out, force=args.force)
        print(out)
        return 0
    folder = pg.model_dir(args.variant)
    if not pg.is_built(folder):
        raise SystemExit(f"openrlhf-speed proving-ground: error: '{args.variant}' is not built yet; run "
                         f"`openrlhf-speed proving-ground build --variant {args.variant}`")
    info = json.loads((folder / "build.json").read_text())
    print(f"{folder}: {info['parameters'] / 1e6:.2f}M parameters, built in {info['build_seconds']:.0f}s "
          f"(supervised {info['sft_seconds']:.0f}s), RL prompts {info['rl_rows']}")
    print("RL train prompts, " + format_table(info["pass_table"]))
    if "held_out_pass_table" in info:
        print("held-out prompts, " + format_table(info["held_out_pass_table"]))
    return 0
