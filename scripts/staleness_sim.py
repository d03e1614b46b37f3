"""What the staleness bound (--speed.max_staleness) trades, on the simulated engine: how old
the trained groups' screenings are, how many prompts are screened again, and the share of
generated tokens thrown away for it. The evidence behind docs/design.md's staleness table.

    .venv/bin/python scripts/staleness_sim.py benchmarks/sim      # writes staleness.json, seconds

Settings (in the file, so the table says what it shows): 2,000 prompts with Beta(0.6, 0.9)
pass rates, B=32, N=8, N_init=4, 8 completions a tick (continuations overtake screenings, as
with real engines), seed 0; bounds 0, 1, 2 (the trainer's default) and none.
"""

import json
import os
import sys
import warnings
from collections import Counter

import numpy as np

from openrlhf_speed.curriculum import SpeedConfig, StarvationWarning
from openrlhf_speed.curriculum.simulate import run_simulation

SETTINGS = {"prompts": 2000, "beta": [0.6, 0.9], "batch_prompts": 32, "n": 8, "n_init": 4,
            "completions_per_tick": 8, "seed": 0}
BOUNDS = (0, 1, 2, None)


def one(bound) -> dict:
    s = SETTINGS
    rates = np.random.default_rng(s["seed"]).beta(*s["beta"], size=s["prompts"])
    cfg = SpeedConfig(n_samples_per_prompt=s["n"], n_init=s["n_init"], batch_prompts=s["batch_prompts"],
                      max_staleness=bound, strategy="speed", seed=s["seed"])
    ages = Counter()

    def observe(event, sched, payload):
        if event == "batch":  # a group's screening age: the policy that trains on it less the one that screened it
            ages.update(sched.policy_version - g.responses[0].policy_version for g in payload.groups)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StarvationWarning)
        res = run_simulation(rates, cfg, seed=s["seed"], completions_per_tick=s["completions_per_tick"],
                             observer=observe)
    t = res.scheduler.totals()
    return {"bound": bound, "trained_groups_by_age": {str(a): n for a, n in sorted(ages.items())},
            "max_age": max(ages), "rescreened": int(t.get("prompts_rescreened_stale", 0)),
            "stale_token_share": t.get("tokens_stale_discarded", 0) / t["tokens_generated"]}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: staleness_sim.py OUT_DIR (e.g. benchmarks/sim)", file=sys.stderr)
        return 2
    rows = []
    for bound in BOUNDS:
        rows.append(one(bound))
        print(f"[staleness] bound {bound}: {rows[-1]}", flush=True)
    os.makedirs(argv[0], exist_ok=True)
    with open(os.path.join(argv[0], "staleness.json"), "w") as f:
        json.dump({"command": "python scripts/staleness_sim.py " + argv[0], "settings": SETTINGS, "rows": rows}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
