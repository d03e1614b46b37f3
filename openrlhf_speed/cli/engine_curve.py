"""`openrlhf-speed engine-curve`: the engine's generation throughput against the number of
sequences it decodes at once, on the project's own vLLM engine.

The GPU projection's concurrency bound (bench/concurrency.py) prices a step's generation by
this curve. For each level c, c prompts go to one `vllm.LLM.generate` call with one response
each, and the tokens returned over the call's seconds give the level's tokens/s; the first
call (a warm-up that compiles and fills caches) is not counted. The engine's `max_num_seqs`
is the largest level, so no level is capped by the scheduler. Sampling is the training's:
temperature 1.0, `--max_new_tokens`, the model's chat template.

Run it with the machine to itself: it is a throughput measurement.
"""

import argparse
import json
import os
import sys
import time


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed engine-curve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="proving", help="a proving-ground alias or a local HF folder (default: proving)")
    p.add_argument("--data", default=None, help="prompts jsonl (default: the proving ground's RL split)")
    p.add_argument("--levels", default="1,4,16,64,256,1024", help="comma-separated concurrency levels")
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--max_model_len", type=int, default=256)
    p.add_argument("--dtype", default="float32", help="the engine's dtype (the proving preset's: float32)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the curve to this JSON file (bench/concurrency.load_curve reads it)")
    return p


def _levels(text: str) -> list:
    try:
        levels = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        levels = []
    if not levels or levels[0] < 1:
        raise SystemExit(f"openrlhf-speed engine-curve: error: --levels {text!r}: give positive integers, e.g. 1,4,16,64")
    return levels


def _prompts(args, tok, n: int) -> list:
    from openrlhf_speed import proving

    path = args.data or (proving.data_paths(args.model)[0] if proving.is_proving(args.model) else None)
    if not path:
        raise SystemExit("openrlhf-speed engine-curve: error: --data is needed for a model that is not a proving ground")
    texts = []
    with open(path) as f:
        for line in f:
            if line.strip() and len(texts) < n:
                row = json.loads(line)
                msgs = row["prompt"] if isinstance(row["prompt"], list) else [{"role": "user", "content": row["prompt"]}]
                texts.append(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))
    if not texts:
        raise SystemExit(f"openrlhf-speed engine-curve: error: {path} has no prompts")
    return [texts[i % len(texts)] for i in range(n)]


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    levels = _levels(args.levels)
    from openrlhf_speed import compat, proving

    compat.install()
    if compat.cpu_mode():
        os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    from vllm import LLM, SamplingParams

    model = proving.resolve_model_or_proving(args.model)
    llm = LLM(model=model, dtype=args.dtype, max_model_len=args.max_model_len, seed=args.seed,
              max_num_seqs=levels[-1], max_num_batched_tokens=max(levels[-1] * 64, args.max_model_len),
              enforce_eager=True)
    prompts = _prompts(args, llm.get_tokenizer(), levels[-1])
    sp = SamplingParams(n=1, temperature=1.0, max_tokens=args.max_new_tokens, seed=args.seed)
    llm.generate(prompts[:min(16, len(prompts))], sp, use_tqdm=False)  # warm-up, not counted
    rows = []
    for c in levels:
        t0 = time.time()
        outs = llm.generate(prompts[:c], sp, use_tqdm=False)
        secs = time.time() - t0
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        rows.append({"concurrency": c, "tokens": tokens, "seconds": secs, "tokens_per_s": tokens / secs})
        print(f"[engine-curve] {c:>5} sequences: {tokens:>7} tokens in {secs:6.2f} s = {tokens / secs:8.0f} tokens/s",
              flush=True)
    result = {"source": f"openrlhf-speed engine-curve --model {args.model} ({model})", "model": model,
              "dtype": args.dtype, "max_new_tokens": args.max_new_tokens, "levels": rows,
              "machine": _machine()}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"[engine-curve] wrote {args.out}")
    return 0


def _machine() -> dict:
    """Which kind of CPU the curve came from (timings of the two kinds do not mix)."""
    from openrlhf_speed.compat.precision import cpu_precision

    prec = cpu_precision()
    return {"cpus": len(os.sched_getaffinity(0)), "cpu_isa": prec.isa, "cpu_native_bf16": prec.native_bf16}


if __name__ == "__main__":
    sys.exit(main())
