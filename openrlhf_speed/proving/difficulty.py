"""The RL prompt set's difficulty on the shipped start model, measured as the paper's Fig. 2
measures DAPO-17k's on Qwen2.5-Math-7B: many samples per prompt at temperature 1.0, then the
share of prompts never solved, always solved, and the histogram of per-prompt pass rates.

It is a property of the start model and the prompts alone, stated before any curriculum is
run; nothing here reads a training result. Prompts are the first `prompts` rows of the
split's jsonl (the splits are shuffled draws, so the first rows are a uniform sample of the
set). Sampling is HF `generate` in float32 (passtable.sample: top_k 0, top_p 1, the bench's
64 new tokens), scored by the training reward.

Departure from the paper: Fig. 2 samples 50 responses from a 7B model on math problems; here
the subject is the shipped proving-ground model on its arithmetic prompts, so the figure to
compare is the shape (the never-solved share, about 0.26 in the paper), not the prompts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

# Per-prompt pass-rate bins: the two ends alone (they carry no gradient), tenths between.
EDGES = [i / 10 for i in range(11)]


def histogram(rates: list[float]) -> list[tuple[str, int]]:
    bins = [("0", sum(r == 0 for r in rates))]
    for lo, hi in zip(EDGES, EDGES[1:]):
        count = sum(lo < r <= hi if hi < 1 else lo < r < 1 for r in rates)
        bins.append((f"({lo:.1f},{hi:.1f}{']' if hi < 1 else ')'}", count))
    bins.append(("1", sum(r == 1 for r in rates)))
    return bins


def summarize(levels: list[str], solved: list[int], k: int) -> dict:
    """Shares never / some / always solved and mean pass rate, per level and for all."""
    groups: dict[str, list[int]] = {}
    for lv, s in zip(levels, solved):
        groups.setdefault(lv, []).append(s)
        groups.setdefault("all", []).append(s)
    out = {}
    for key, ss in groups.items():
        n = len(ss)
        out[key] = {"prompts": n, "never": round(sum(s == 0 for s in ss) / n, 3),
                    "some": round(sum(0 < s < k for s in ss) / n, 3), "always": round(sum(s == k for s in ss) / n, 3),
                    "pass_rate": round(sum(ss) / (n * k), 4)}
    return out


def measure(model_dir: Path, rows: list[dict], samples: int = 50, max_new_tokens: int = 64, seed: int = 0,
            split: str = "train") -> dict:
    """Sample `samples` responses per row and return the difficulty record (see module doc)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from openrlhf_speed.proving.passtable import correct, sample

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    problems = [SimpleNamespace(question=r["question"], answer=r["answer"], level=r["level"]) for r in rows]
    with torch.no_grad():
        responses = sample(model, tok, [p.question for p in problems], samples, max_new_tokens, seed)
    solved = [sum(correct(r, p.answer) for r in rs) for p, rs in zip(problems, responses)]
    table = summarize([p.level for p in problems], solved, samples)
    every = table.pop("all")
    levels = dict(sorted(table.items(), key=lambda kv: -kv[1]["pass_rate"]))
    return {"split": split, "samples": samples, "temperature": 1.0, "max_new_tokens": max_new_tokens, "seed": seed,
            "sampler": "HF generate, float32, top_k 0, top_p 1", "all": every, "levels": levels,
            "histogram": histogram([s / samples for s in solved]), "solved_per_prompt": solved,
            "ids": [r.get("id") for r in rows], "seconds": round(time.time() - t0, 1),
            "torch_threads": torch.get_num_threads()}


def load_rows(path: str, prompts: int | None) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if prompts is not None and len(rows) >= prompts:
                break
            rows.append(json.loads(line))
    return rows
