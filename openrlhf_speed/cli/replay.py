"""`openrlhf-speed replay`: the requests a SPEED trace recorded, on raw vLLM, all at once.

The raw side of the driver measurement (bench/driver.py): one `vllm.LLM` in this process (no
Ray, no reward), built with the trace's engine settings as the run's engine had them (dtype,
max_model_len, seed, prefix caching, eager mode, log-prob mode, and the scheduler's limits:
vLLM's offline `LLM` would otherwise default to twice the sequences at once on CPU), given
every request of the trace in one `generate` call:
- the same prompts: the text the driver sent, tokenized as OpenRLHF's engine actor does it
  (no special tokens added; the oldest tokens cut when the prompt leaves less than max_tokens
  of max_length);
- the same responses: a request of n is n requests of one response, as the engine actor
  sends them, with the same sampling fields (temperature, top_p, top_k, max_tokens,
  min_tokens, log-probs).
Only the first engine's seed is used; with several engines in the run this is one engine
against their sum, so bench/driver.py runs one.
"""

import argparse
import json
import os
import sys
import time


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", required=True,
                   help="a --speed.trace_path file of one run (train --train.generation_only)")
    p.add_argument("--out", default=None, help="write the figures to this JSON file")
    p.add_argument("--model", default=None, help="model folder (default: the one the trace's run used)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from openrlhf_speed.bench.driver import TraceError, replay_requests

    try:
        plan = replay_requests(args.trace)
    except (TraceError, OSError) as e:
        print(f"openrlhf-speed replay: error: {e}", file=sys.stderr)
        return 2
    from openrlhf_speed import compat

    compat.install()
    if compat.cpu_mode():  # what the run's engine actors get (cli/flags.py, _start_ray)
        os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    cfg = plan["config"]
    kwargs = dict(model=args.model or cfg["model"], dtype=cfg["dtype"], max_model_len=cfg["max_model_len"],
                  seed=cfg["seed"], enforce_eager=cfg["enforce_eager"], trust_remote_code=True,
                  enable_prefix_caching=cfg["enable_prefix_caching"], max_num_seqs=cfg["max_num_seqs"],
                  max_num_batched_tokens=cfg["max_num_batched_tokens"],
                  enable_chunked_prefill=cfg["enable_chunked_prefill"])
    if cfg.get("gpu_memory_utilization") and not compat.cpu_mode():
        kwargs["gpu_memory_utilization"] = cfg["gpu_memory_utilization"]
    if cfg.get("logprobs_mode"):  # as OpenRLHF's create_vllm_engines sets them for the IS correction
        kwargs.update(logprobs_mode=cfg["logprobs_mode"], max_logprobs=1)
    if cfg["num_engines"] != 1:
        print(f"[replay] WARNING the run had {cfg['num_engines']} engines; this replay is one engine", flush=True)
    llm = LLM(**kwargs)
    tok = llm.get_tokenizer()
    ids_of, prompts, params = {}, [], []
    for r in plan["requests"]:
        if r["prompt"] not in ids_of:
            ids_of[r["prompt"]] = tok(r["text"], add_special_tokens=False)["input_ids"]
        s, ids = r["sampling"], ids_of[r["prompt"]]
        max_tokens = s["max_tokens"] or max(1, s["max_length"] - len(ids))
        ids = ids[-(s["max_length"] - max_tokens):] if len(ids) > s["max_length"] - max_tokens else ids
        sp = SamplingParams(n=1, temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"],
                            max_tokens=max_tokens, min_tokens=s["min_tokens"], logprobs=s["logprobs"],
                            skip_special_tokens=s["skip_special_tokens"])
        prompts += [TokensPrompt(prompt_token_ids=ids)] * r["n"]
        params += [sp] * r["n"]
    print(f"[replay] {len(plan['requests'])} requests, {len(prompts)} responses from {args.trace}, "
          f"all submitted at once", flush=True)
    t0 = time.time()
    outputs = llm.generate(prompts, params)
    gen_s = time.time() - t0
    tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    print(f"[replay] generated {tokens} tokens in {gen_s:.1f}s ({tokens / gen_s:.0f} tokens/s)", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"trace": args.trace, "engine": kwargs, "requests": len(plan["requests"]),
                       "responses": len(prompts), "tokens": tokens, "generation_s": gen_s}, f, indent=1)
    return 0
