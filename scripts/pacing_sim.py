"""What pacing the screenings (--speed.pace_batches P) trades on the serial schedule, on the
simulated engine: groups lost to the staleness bound, tokens generated and discarded per
trained step, and how old the trained screenings are. The evidence behind docs/design.md's
pacing table.

    .venv/bin/python scripts/pacing_sim.py benchmarks/sim      # writes pacing.json, seconds

Settings (in the file, so the table says what it shows): the regime cells' driver shape (B=16,
N=24, N_init=4, 64 prompts in flight, bound 2), 16 completions a tick, 60 steps, seed 0, on two
mixes of 2,000 prompts: an easy one (pass rates uniform in 0.5-0.95, most of a screening
batch qualifies) and Beta(0.6, 0.9) (the staleness table's). The simulation holds the policy
fixed and has no engine throughput: fewer prompts in flight cost nothing here, which on real
engines they may (a smaller generation batch), so the benchmark, not this table, says whether
pacing pays.
"""

import json
import os
import sys
import warnings

import numpy as np

from openrlhf_speed.curriculum import SpeedConfig, StarvationWarning
from openrlhf_speed.curriculum.simulate import run_serial

SETTINGS = {"prompts": 2000, "batch_prompts": 16, "n": 24, "n_init": 4, "max_inflight_prompts": 64,
            "max_staleness": 2, "completions_per_tick": 16, "steps": 60, "seed": 0}
MIXES = {"easy": ["uniform", 0.5, 0.95], "beta": ["beta", 0.6, 0.9]}
PACES = (None, 1, 2, 3)


def rates(mix: str) -> np.ndarray:
    kind, a, b = MIXES[mix]
    rng = np.random.default_rng(SETTINGS["seed"])
    return getattr(rng, kind)(a, b, size=SETTINGS["prompts"])


def one(mix: str, strategy: str, pace) -> dict:
    s = SETTINGS
    cfg = SpeedConfig(n_samples_per_prompt=s["n"], n_init=s["n_init"], batch_prompts=s["batch_prompts"],
                      max_inflight_prompts=s["max_inflight_prompts"], max_staleness=s["max_staleness"],
                      strategy=strategy, seed=s["seed"], num_epochs=10, pace_batches=pace)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StarvationWarning)
        res = run_serial(rates(mix), cfg, s["steps"], seed=s["seed"], completions_per_tick=s["completions_per_tick"])
    t, steps = res.scheduler.totals(), len(res.batches)
    return {"mix": mix, "strategy": strategy, "pace": pace, "steps": steps,
            "stale_groups_per_step": t.get("prompts_rescreened_stale", 0) / steps,
            "tokens_generated_per_step": t["tokens_generated"] / steps,
            "tokens_discarded_per_step": t["tokens_discarded"] / steps,
            "screening_age_mean": float(np.mean([b.metrics["speed/staleness_screen_mean"] for b in res.batches]))}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: pacing_sim.py OUT_DIR (e.g. benchmarks/sim)", file=sys.stderr)
        return 2
    rows = []
    for mix in MIXES:
        for strategy in ("speed", "dapo"):
            for pace in PACES:
                rows.append(one(mix, strategy, pace))
                print(f"[pacing] {mix} {strategy} P={pace}: {rows[-1]}", flush=True)
    os.makedirs(argv[0], exist_ok=True)
    with open(os.path.join(argv[0], "pacing.json"), "w") as f:
        json.dump({"command": "python scripts/pacing_sim.py " + argv[0], "settings": SETTINGS, "mixes": MIXES,
                   "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
