"""`openrlhf-speed curves RUN`: draw a run's curves (reward, held-out accuracy, qualification
rate, tokens per step) to RUN/curves.png from its metrics log, during the run or after it.

RUN is the run folder, the parent of the run's `--ckpt.path`; its log is RUN/metrics.jsonl
unless the run was given another `--log.jsonl` (then pass it with --metrics). The trainer
draws the same file at each checkpoint and at the end (rollout/curves.py).
"""

import argparse
import os
import sys

from openrlhf_speed.rollout.ckpt_manifest import DiskFullError
from openrlhf_speed.rollout.curves import write_curves
from openrlhf_speed.rollout.run_summary import CURVES, METRICS, read_records, run_records


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed curves", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="the run folder (the parent of its --ckpt.path)")
    p.add_argument("--metrics", default=None, help=f"the run's --log.jsonl (default: RUN/{METRICS})")
    p.add_argument("--out", default=None, help=f"the PNG to write (default: RUN/{CURVES})")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    metrics = args.metrics or os.path.join(args.run, METRICS)
    if not os.path.isfile(metrics):
        print(f"openrlhf-speed curves: error: no metrics log at {metrics}: pass the run's --log.jsonl with --metrics, "
              "or RUN as the parent folder of the run's --ckpt.path", file=sys.stderr)
        return 2
    records = run_records(read_records(metrics))
    if not records:
        print(f"openrlhf-speed curves: error: {metrics} holds no step or evaluation record yet: rerun this after the "
              "run's first step", file=sys.stderr)
        return 2
    out = args.out or os.path.join(args.run, CURVES)
    try:
        write_curves(records, out, os.path.abspath(args.run))
    except DiskFullError as e:
        print(f"openrlhf-speed curves: ERROR {e}", file=sys.stderr)
        return 1
    steps = sum(r.get("event") == "step" for r in records)
    evals = sum(r.get("event") == "eval" for r in records)
    print(f"{out}: {steps} steps, {evals} evaluations (from {metrics})")
    return 0
