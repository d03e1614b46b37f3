"""The model behind `openrlhf-speed advise` (cli/advise.py runs the engine and prints): from a
screening's correct counts and mean response lengths to every figure of its report, with no
engine. The draw of the screened prompts is here too, so a test can repeat it.

- the difficulty table: never / some / always solved at the S screened and, predicted from
  each prompt's pass-rate posterior (posterior.py), at the training N, per level, 'all' last;
- the posterior histogram and the held-out check of the prior;
- the prediction per step of each curriculum, the comparison and the verdict (payoff.py).

Rule: the figures depend on the screening and the settings alone, so the JSON that `advise
--json` prints and the text report (cli/advise_report.py) are one dict. docs/advise.md has the
model's validation.
"""

from __future__ import annotations

import random

import numpy as np

from . import payoff
from .posterior import Posteriors, holdout_check, outcome_shares, posterior_histogram


def draw(rows: list, k: int, seed: int) -> list:
    """K rows, a seeded uniform draw without replacement, in file order."""
    return [rows[i] for i in sorted(random.Random(seed).sample(range(len(rows)), k))]


def pass_table(levels: list, correct: list, samples: int, post: Posteriors, n: int) -> dict:
    """{level: {prompts, pass, at_S: {never, some, always}, at_N: {...}}}, 'all' last."""
    groups = {}
    for i, lv in enumerate(levels):
        groups.setdefault(lv, []).append(i)
    groups = dict(sorted(groups.items(), key=lambda kv: -float(np.mean([correct[i] for i in kv[1]]))))
    groups["all"] = list(range(len(levels)))
    table = {}
    for lv, idx in groups.items():
        c = np.asarray([correct[i] for i in idx])
        sub = post.select(idx)
        table[lv] = {"prompts": len(idx), "pass": float(c.mean() / samples),
                     "at_S": {"never": float(np.mean(c == 0)), "some": float(np.mean((c > 0) & (c < samples))),
                              "always": float(np.mean(c == samples))},
                     "at_N": outcome_shares(n, sub)}
    return table


def analyse(screening: dict, levels: list, s: payoff.Settings, samples: int, prior: str = "mixture") -> dict:
    """Every figure of the report from the screening's counts and lengths (no engine)."""
    post = Posteriors.from_counts(screening["correct"], samples, prior=prior)
    pred = payoff.predict(post, screening["lengths"], s)
    cmp = payoff.compare(pred, s)
    check = holdout_check(screening["outcomes"], prior) if "outcomes" in screening else None
    return {"prior": {"name": prior, "concentration": post.concentration,
                      "components": [dict(zip(("w", "a", "b"), c)) for c in post.prior]},
            "difficulty": pass_table(levels, screening["correct"], samples, post, s.n),
            "histogram": posterior_histogram(post, screening["correct"]), "holdout": check,
            "predicted": pred, "comparison": cmp,
            "verdict": payoff.verdict(pred, cmp, s), "assumptions": list(payoff.ASSUMPTIONS)}
