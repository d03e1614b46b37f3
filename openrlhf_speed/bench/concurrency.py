"""The GPU projection's second bound: generation priced by the engine's throughput at the
step's concurrency, not per token.

The linear projection (aggregate.projected_clock) charges every generated token the same,
which is the pessimistic bound for a curriculum that keeps more sequences in flight: an
engine's tokens per second grow with the sequences it decodes at once, up to saturation.
This bound charges a step's generation tokens / thr(c), with c the sequences the step keeps
in flight, scaled from the proving preset's batch to the GPU recipe's, and thr a measured
throughput-against-concurrency curve:

- GPU: vLLM, Llama-2-7B fp16 on one H100 (64 GB), `max_num_seqs` swept 1-512, output tokens
  per second (Agullo et al., "Mind the Memory Gap", arXiv 2503.08311, Fig. 2, from the
  authors' published result files). It saturates near 200 running sequences (~3.9k tok/s).
- CPU: the project's own engine on the proving model (`openrlhf-speed engine-curve`).

The curve is normalised so that off's (else uniform's) generation still costs GEN_OVER_TRAIN x its training
per step, as in the linear bound; only the relative price of a step's tokens moves. Rule not to
break: c is what the step actually had in flight (the driver's `driver/outstanding_mean`; for
`off`, OpenRLHF's engines get the whole batch, B x N responses, at once), never a tuned figure.
"""

from __future__ import annotations

import bisect
import json
import math
import os
from typing import Optional

from openrlhf_speed.bench import aggregate

# (max_num_seqs, output tokens/s); arXiv 2503.08311 Fig. 2 data, Llama-2-7B fp16, 1x H100 64 GB,
# vLLM 0.5.2 (V0), ShareGPT prompts (~113 in / ~323 out tokens), request rate inf.
GPU_7B_H100 = {
    "source": "Agullo et al. 2025, 'Mind the Memory Gap: Unveiling GPU Bottlenecks in Large-Batch LLM Inference', "
              "arXiv 2503.08311, Fig. 2 (Llama-2-7B fp16, 1x H100 64 GB, vLLM 0.5.2, max_num_seqs swept)",
    "points": [(1, 91.9), (2, 179.3), (4, 342.2), (8, 637.3), (16, 1103.7), (32, 1781.7), (64, 2623.2),
               (96, 2928.6), (128, 3270.9), (192, 3687.0), (256, 3895.7), (512, 3985.0)],
}
# The paper's generation batch is 256 prompts a step against the proving preset's 16: the same
# curriculum at GPU scale keeps 16x the sequences in flight.
PAPER_PROMPTS_PER_STEP = 256


def throughput(points: list, c: float) -> float:
    """Tokens/s at concurrency c: linear in log(c) between measured points, flat beyond them."""
    xs = [p[0] for p in points]
    if c <= xs[0]:  # fewer sequences than the first point: proportionally fewer tokens
        return points[0][1] * max(c, 1e-9) / xs[0]
    if c >= xs[-1]:
        return points[-1][1]
    i = bisect.bisect_right(xs, c)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    f = (math.log(c) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return y0 + f * (y1 - y0)


def step_concurrency(step: dict, responses: int) -> Optional[float]:
    """Sequences in flight during the step: the driver's mean outstanding responses, else (for
    `off`, OpenRLHF's own generation) the whole batch of B x N responses submitted at once."""
    v = step.get("driver/outstanding_mean")
    if v is not None and not aggregate.is_nan(v) and v > 0:
        return float(v)
    return float(responses) if responses else None


def load_curve(path: str) -> dict:
    """A curve from an `engine-curve` JSON: {'source', 'points': [(c, tok/s)]}; a clear error otherwise."""
    try:
        with open(path) as f:
            d = json.load(f)
        pts = sorted((float(p["concurrency"]), float(p["tokens_per_s"])) for p in d["levels"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not an engine-curve result ({e}); make one with `openrlhf-speed engine-curve`")
    if len(pts) < 2:
        raise ValueError(f"{path}: an engine curve needs at least 2 concurrency levels")
    return {"source": d.get("source", os.path.basename(path)), "points": pts}


def projected_clocks(runs: dict, groups: dict, responses: int, batch: int, curve: dict = GPU_7B_H100,
                     scale: Optional[float] = None) -> tuple[dict, Optional[dict]]:
    """({run key: cumulative clock per step}, model) priced by throughput at concurrency; ({}, None)
    without off or uniform runs to anchor the price. scale multiplies the proving run's concurrency to
    the recipe's (default: the paper's 256 prompts a step / the run's batch)."""
    from openrlhf_speed.bench import evidence

    base = evidence.cost_model(runs, groups, responses)
    if not base:
        return {}, None
    scale = scale if scale is not None else PAPER_PROMPTS_PER_STEP / max(batch, 1)
    filled = {k: evidence.with_tokens(r["steps"], responses) for k, r in runs.items()}
    # Anchor (off's, else uniform's): its mean per-token generation price equals the linear model's.
    uni = [st for k, steps in filled.items() if groups.get(k, k) == base["anchor"] for st in steps]
    weights = [(aggregate.num(st, "speed/tokens_generated"), step_concurrency(st, responses)) for st in uni]
    tokens = sum(t for t, c in weights if c)
    if not tokens:
        return {}, None
    inv = sum(t / throughput(curve["points"], c * scale) for t, c in weights if c) / tokens  # mean s/token shape
    k = base["ratio"] * base["s_per_train_token"] / inv
    clocks = {}
    for key, steps in filled.items():
        out, total = [0.0], 0.0
        for st in steps:
            c = step_concurrency(st, responses)
            gen = aggregate.num(st, "speed/tokens_generated")
            price = k / throughput(curve["points"], c * scale) if c else base["ratio"] * base["s_per_train_token"]
            total += base["s_per_train_token"] * aggregate.num(st, "speed/tokens_trained") + price * gen
            out.append(total)
        clocks[key] = out
    return clocks, {"source": curve["source"], "scale": scale, **base}
