"""`openrlhf-speed advise`: before a run, screen a sample of the data with the model and say
whether SPEED will pay off against stock OpenRLHF (or uniform RLOO, or DAPO), and by how much.

1. Screening: `--prompts` K rows drawn with `--seed` from `--data`, `--samples` S responses
   each, on a vLLM engine with the training's sampling flags (`--rollout.temperature`,
   `--rollout.top_p`, `--rollout.max_new_tokens`, the chat template), scored by the training
   reward (rewards/reward_func.score_query, on prompt + response as OpenRLHF hands it over).
   Prompts over the training's prompt limit are left out, as the SPEED driver skips them.
2. The difficulty table: never / some / always solved at S (observed) and at the training N
   (predicted from each prompt's pass-rate posterior, curriculum/posterior.py), and the histogram.
3. The mechanism per step of each curriculum, the break-even, the range of SPEED's step
   saving and speedup and a verdict (curriculum/payoff.py, whose ASSUMPTIONS are printed).
Steps 2 and 3 are curriculum/advice.py, with no engine; this command screens and prints.

Training flags keep their names and meaning: the `--speed.*` ones are the train parser's own
actions (cli/flags.py), and the SPEED configuration is built and validated by the code that
builds it for training (rollout/speed_config.py). `--speed.strategy` names the curriculum SPEED
is compared against. A model may be any HF folder, a run's checkpoint saved with
`--ckpt.save_hf` or its final `--ckpt.output_dir` included: the regime moves during training.

Refusals come before any engine starts, in one line with exit status 2: fewer usable
prompts than K, rows without a label, flag combinations training would refuse.
"""

import argparse
import dataclasses
import json
import os
import sys
import time
from types import SimpleNamespace

import numpy as np

from openrlhf_speed.curriculum import payoff
from openrlhf_speed.curriculum.advice import analyse, draw
from openrlhf_speed.curriculum.posterior import FITTED, FIXED_PRIORS
from openrlhf_speed.data.loader import prompt_text

# The training's --speed.* flags that the prediction reads; copied from the train parser.
SPEED_FLAGS = ("--speed.n_init", "--speed.pass_rate_low", "--speed.pass_rate_high",
               "--speed.correct_threshold", "--speed.max_inflight_prompts")
PAPER_COST_RATIO = 2.0  # generation : training time of a uniform RLOO step (the paper's Fig. 2)


class AdviseError(ValueError):
    """A refusal: one line that names the input or flag and says what to do."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openrlhf-speed advise", description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default",
                   help="'default' (embedded SmolLM2-135M-Instruct), a proving-ground alias or a local HF folder "
                   "(a checkpoint saved with --ckpt.save_hf works too)")
    p.add_argument("--data", "--data.prompt_dataset", dest="data", default=None,
                   help="prompts with labels (jsonl, json, parquet, csv, arrow or a folder, as in training); default: "
                   "the proving ground's train split for a proving model, else the embedded train split")
    p.add_argument("--data.input_key", dest="input_key", default="prompt", help="field with the prompt")
    p.add_argument("--data.label_key", dest="label_key", default="answer", help="field with the reference answer")
    p.add_argument("--data.apply_chat_template", dest="apply_chat_template", action="store_true", default=False,
                   help="wrap string prompts in the tokenizer's chat template, as in training (on by default for "
                   "the proving ground's and the embedded data; message lists always go through it)")
    p.add_argument("--data.input_template", dest="input_template", default=None,
                   help="format string for string prompts without the chat template, as in training")
    p.add_argument("--data.max_len", dest="max_len", type=int, default=2048,
                   help="prompt + response limit, as in training (the engine's max_model_len)")
    p.add_argument("--group_key", default="level", help="field to break the difficulty table down by (ignored when absent)")
    g = p.add_argument_group("screening")
    g.add_argument("--prompts", type=int, default=512, help="K, prompts drawn from the data (seeded)")
    g.add_argument("--samples", type=int, default=16, help="S, responses per prompt (>= 2)")
    g.add_argument("--seed", type=int, default=0, help="seed of the draw and of the engine's sampling")
    g.add_argument("--prior", default="mixture", choices=[*FITTED, *FIXED_PRIORS],
                   help="prior of the per-prompt pass-rate posteriors: a mixture of Betas on a grid of means, fitted "
                   "to the screening (empirical Bayes), one fitted Beta, Jeffreys' Beta(0.5, 0.5) or uniform Beta(1, 1)")
    g.add_argument("--vllm.dtype", dest="vllm_dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"],
                   help="engine dtype; auto: bfloat16 on GPU and on CPUs with native bf16, float32 on CPUs without")
    g.add_argument("--vllm.tensor_parallel_size", dest="tensor_parallel_size", type=int, default=1,
                   help="GPUs of the engine")
    t = p.add_argument_group("training settings (they mean what they mean in `openrlhf-speed train`)")
    t.add_argument("--rollout.n_samples_per_prompt", dest="n", type=int, default=24,
                   help="N, responses per trained group (default: the paper's 24)")
    t.add_argument("--rollout.batch_size", dest="batch", type=int, default=16,
                   help="B, prompts (groups) per training step (default: the paper's 16)")
    t.add_argument("--rollout.max_new_tokens", dest="max_new_tokens", type=int, default=None,
                   help="response limit; default: --data.max_len minus the prompt, as in training")
    t.add_argument("--rollout.temperature", dest="temperature", type=float, default=1.0,
                   help="sampling temperature, as in training")
    t.add_argument("--rollout.top_p", dest="top_p", type=float, default=1.0, help="nucleus sampling, as in training")
    _add_training_speed_flags(t)
    t.add_argument("--speed.strategy", dest="baseline", default="off", choices=["off", "uniform", "dapo"],
                   help="the curriculum SPEED is compared against: off (stock OpenRLHF) and uniform predict alike, "
                   "dapo generates all N and drops zero-variance groups")
    c = p.add_argument_group("inference-to-training cost ratio")
    c.add_argument("--cost_ratio", type=float, default=None,
                   help=f"generation time : training time of a stock OpenRLHF step (default {PAPER_COST_RATIO:g}, the "
                   "paper's Fig. 2)")
    c.add_argument("--from_run", default=None,
                   help="measure the cost ratio from a run's metrics.jsonl (a run folder or the file): seconds per "
                   "generated token over seconds per trained token; an `off` run measures it best")
    p.add_argument("--from_screening", default=None, metavar="JSON",
                   help="no engine: judge the screening saved in an earlier `advise --json` output again, with this "
                   "run's training settings and the current calibration (alpha); its model, data and sampling stay")
    p.add_argument("--json", action="store_true", help="print one JSON object (every figure) to stdout and nothing else")
    return p


# What a saved --json output keeps of its screening; everything else is judged again.
SCREENED = ("model", "data", "prompts", "usable_prompts", "samples", "seed", "sampling", "levels", "screening")
# Flags that choose or sample the screening (by dest): with --from_screening they are refused
# where they differ from it (a saved screening cannot be redrawn or resampled).
SCREENING_FLAGS = ("model", "data", "input_key", "label_key", "apply_chat_template", "input_template", "max_len",
                   "group_key", "prompts", "samples", "seed", "vllm_dtype", "tensor_parallel_size", "temperature",
                   "top_p", "max_new_tokens")


def given_flags(argv) -> dict:
    """{dest: the flag as the parser first names it} of the flags written on the command line
    (not left at their defaults)."""
    p = build_parser()
    names = {a.dest: a.option_strings[0] for a in p._actions if a.option_strings}
    for action in p._actions:
        action.default = argparse.SUPPRESS
    return {dest: names[dest] for dest in vars(p.parse_args(argv))}


def saved_screening(path: str, args, given: dict) -> dict:
    """The screening part of a saved `advise --json` output, or AdviseError."""
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except OSError as e:
        raise AdviseError(f"--from_screening {path}: cannot read it ({e.strerror})") from None
    except ValueError as e:
        raise AdviseError(f"--from_screening {path}: not JSON ({e}); give a file written by "
                          "`openrlhf-speed advise --json`") from None
    lacking = [k for k in SCREENED if k not in saved] if isinstance(saved, dict) else list(SCREENED)
    if lacking:
        raise AdviseError(f"--from_screening {path} lacks {', '.join(lacking)}: give a file written by "
                          "`openrlhf-speed advise --json`")
    recorded = {**saved["sampling"], **{k: saved[k] for k in ("model", "data", "prompts", "samples", "seed")}}
    for dest in sorted(set(given) & set(SCREENING_FLAGS)):
        if dest not in recorded or getattr(args, dest) != recorded[dest]:
            raise AdviseError(f"{given[dest]} with --from_screening: the screening in {path} is fixed "
                              f"({recorded.get(dest, 'not recorded')}); leave the flag out, or screen again without "
                              "--from_screening")
    out = {k: saved[k] for k in SCREENED}
    first = saved.get("screened") or saved  # judged again before: where it was screened stays
    out["screened"] = {"from": path, **{k: first[k] for k in ("command", "machine") if k in first}}
    return out


def _training_speed_actions() -> list:
    """The train command's --speed.* flags (cli/flags.py), as argparse actions."""
    from openrlhf_speed.cli.speed_flags import add_speed_arguments

    source = argparse.ArgumentParser(add_help=False)
    add_speed_arguments(source)
    return [a for a in source._actions if a.dest.startswith("speed.")]


def _add_training_speed_flags(group) -> None:
    for action in _training_speed_actions():
        if action.option_strings[0] in SPEED_FLAGS:
            group._add_action(action)


def speed_settings(args, cost_ratio: float) -> payoff.Settings:
    """The prediction's settings, through training's own SpeedConfig (defaults and checks)."""
    from openrlhf_speed.rollout.speed_config import speed_config

    speed = {a.dest.split(".", 1)[1]: a.default for a in _training_speed_actions()}  # training's defaults
    speed.update({name: getattr(args, f"speed.{name}") for name in (f.split(".", 1)[1] for f in SPEED_FLAGS)})
    speed["strategy"] = "speed"
    ns = SimpleNamespace(speed=SimpleNamespace(**speed), train=SimpleNamespace(seed=max(args.seed, 0), num_episodes=1),
                         rollout=SimpleNamespace(n_samples_per_prompt=args.n, batch_size=args.batch))
    try:
        cfg = speed_config(ns).validate()
    except ValueError as e:
        raise AdviseError(str(e).replace(":\n  ", ": ").replace("\n  ", "; ")) from None
    s = payoff.Settings(n=cfg.n_samples_per_prompt, n_init=cfg.n_init, low=cfg.pass_rate_low, high=cfg.pass_rate_high,
                        batch=cfg.batch_prompts, gen_batch=cfg.inflight_limit, cost_ratio=cost_ratio,
                        baseline=args.baseline)
    try:
        return s.validate()
    except ValueError as e:
        raise AdviseError(str(e)) from None


def cost_ratio(args) -> tuple:
    """(r, where it comes from): --cost_ratio, --from_run's timings, or the paper's 2."""
    if args.from_run and args.cost_ratio is not None:
        raise AdviseError("give --cost_ratio or --from_run, not both")
    if args.cost_ratio is not None:
        if not args.cost_ratio > 0:
            raise AdviseError(f"--cost_ratio ({args.cost_ratio}) must be > 0")
        return args.cost_ratio, {"source": "--cost_ratio"}
    if not args.from_run:
        return PAPER_COST_RATIO, {"source": "the paper's 2:1 (Fig. 2); --from_run DIR measures it"}
    path = os.path.join(args.from_run, "metrics.jsonl") if os.path.isdir(args.from_run) else args.from_run
    try:
        with open(path, encoding="utf-8") as f:
            steps = [r for r in map(json.loads, filter(str.strip, f)) if r.get("event") == "step"]
        measured = payoff.cost_ratio_from_steps(steps)
    except OSError as e:
        raise AdviseError(f"--from_run {args.from_run}: cannot read {path} ({e.strerror}); give a run folder "
                          "with a metrics.jsonl (--log.jsonl) or the file") from None
    except (ValueError, AttributeError) as e:
        raise AdviseError(f"--from_run {path}: {e}") from None
    return measured["ratio"], {"source": f"--from_run {path}", **measured}


def _tokenizer(model: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model, trust_remote_code=True, local_files_only=True)


def load_inputs(args) -> tuple:
    """(model folder, data path, usable rows, tokenizer, load report), or AdviseError."""
    from openrlhf_speed import proving
    from openrlhf_speed.data.folders import load_dataset_rows
    from openrlhf_speed.data.loader import DatasetError, prompt_limit
    from openrlhf_speed.models import ModelNotFoundError

    if args.prompts < 1 or args.samples < 2:
        raise AdviseError(f"need --prompts >= 1 and --samples >= 2 (got {args.prompts} and {args.samples}): a pass "
                          "rate needs two responses")
    try:
        model = proving.resolve_model_or_proving(args.model)
    except ModelNotFoundError as e:
        raise AdviseError(str(e).replace("\n", " ")) from None
    if not os.path.isfile(os.path.join(model, "config.json")):
        raise AdviseError(f"--model {model} has no config.json: give an HF folder (a checkpoint saved with "
                          "--ckpt.save_hf, a run's --ckpt.output_dir), not DeepSpeed's shards")
    if args.data is None:  # training's defaults: the proving ground's own prompts, else the embedded ones
        if proving.is_proving(args.model):
            args.data = proving.data_paths(args.model)[0]
        else:
            from openrlhf_speed.data.embedded import ensure_embedded_dataset

            args.data = ensure_embedded_dataset()[0]
        args.input_key, args.label_key, args.apply_chat_template = "prompt", "answer", True
    tok = _tokenizer(model)
    limit, _ = prompt_limit(args.max_len, args.max_new_tokens)
    try:
        rows, report = load_dataset_rows(args.data, input_key=args.input_key, label_key=args.label_key,
                                         skip_hint=None, max_prompt_tokens=limit, tokenizer=tok,
                                         apply_chat_template=args.apply_chat_template,
                                         input_template=args.input_template)
    except (DatasetError, FileNotFoundError) as e:
        raise AdviseError(f"--data {e}".replace("\n", " ")) from None
    if len(rows) < args.prompts:
        long = report.dropped.get("prompt_too_long", 0)
        raise AdviseError(f"--data {args.data} has {len(rows)} usable prompts"
                          + (f" ({long} over the prompt limit of {limit} tokens left out)" if long else "")
                          + f", fewer than --prompts {args.prompts}: lower --prompts to at most {len(rows)} or add prompts")
    return model, args.data, rows, tok, report


def _model_len(model: str, max_len: int) -> int:
    """--data.max_len, capped at the model's positions (vLLM refuses a longer max_model_len)."""
    with open(os.path.join(model, "config.json"), encoding="utf-8") as f:
        positions = json.load(f).get("max_position_embeddings")
    return min(max_len, int(positions)) if positions else max_len


def screen(args, model: str, rows: list, tok) -> dict:
    """S responses per row on a vLLM engine; correct counts and mean response lengths."""
    from openrlhf_speed import compat, proving

    compat.install()
    from vllm import LLM, SamplingParams

    from openrlhf_speed.compat.precision import engine_dtype, enforce_eager

    from openrlhf_speed.rewards.math_reward import reward_counters
    from openrlhf_speed.rewards.reward_func import score_query

    prompts = [prompt_text(r[args.input_key], tok, args.apply_chat_template, args.input_template) for r in rows]
    dtype = args.vllm_dtype
    if dtype == "auto" and proving.is_proving(args.model):
        dtype = "float32"  # as the bench runs it (bench/commands.py): its tables are measured in float32
    llm = LLM(model=model, dtype=engine_dtype(dtype, tag="advise"), max_model_len=_model_len(model, args.max_len),
              seed=args.seed, enforce_eager=enforce_eager(), tensor_parallel_size=args.tensor_parallel_size)
    # The SPEED driver's sampling fields (rollout/speed_generator._sampling_params).
    params = SamplingParams(n=args.samples, temperature=args.temperature, top_p=args.top_p, top_k=-1,
                            max_tokens=args.max_new_tokens, min_tokens=1, skip_special_tokens=False)
    print(f"[advise] screening {len(prompts)} prompts x {args.samples} responses", file=sys.stderr, flush=True)
    t0 = time.time()
    outputs = llm.generate(prompts, params, use_tqdm=True)  # vLLM's progress bar, on stderr
    seconds = time.time() - t0
    outcomes, lengths = [], []  # [K, S] correct (0/1) in sampling order, [K] mean tokens
    for prompt, row, out in zip(prompts, rows, outputs):
        rewards = [score_query(prompt + o.text, prompt, row[args.label_key]).reward for o in out.outputs]
        outcomes.append([int(r >= getattr(args, "speed.correct_threshold")) for r in rewards])
        lengths.append(float(np.mean([len(o.token_ids) for o in out.outputs])))
    tokens = sum(len(o.token_ids) for out in outputs for o in out.outputs)
    print(f"[advise] screened in {seconds:.1f} s: {tokens} tokens, {tokens / max(seconds, 1e-9):.0f} tokens/s",
          file=sys.stderr, flush=True)
    return {"correct": [sum(o) for o in outcomes], "outcomes": outcomes, "lengths": lengths, "seconds": seconds,
            "tokens": tokens, "reward_statuses": dict(reward_counters())}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    json_out = None
    if args.json:
        # stdout holds the JSON alone: fd 1 goes to stderr until the process ends, so that the
        # engine's processes and its shutdown logs (at exit, after the JSON) write there too.
        sys.stdout.flush()
        json_out = os.dup(1)
        os.dup2(2, 1)
    try:
        ratio, ratio_source = cost_ratio(args)
        s = speed_settings(args, ratio)
        if args.from_screening:
            saved = saved_screening(args.from_screening, args, given_flags(argv))
        else:
            model, data, rows, tok, report = load_inputs(args)
    except AdviseError as e:
        print(f"openrlhf-speed advise: error: {e}", file=sys.stderr)
        if json_out is not None:  # nothing started: give stdout back
            os.dup2(json_out, 1)
            os.close(json_out)
        return 2
    if args.from_screening:
        result = {**saved, "settings": dataclasses.asdict(s), "cost_ratio": ratio_source,
                  **analyse(saved["screening"], saved["levels"], s, saved["samples"], args.prior)}
    else:
        chosen = draw(rows, args.prompts, args.seed)
        print(f"[advise] model {model}; data {data}: {len(chosen)} of {len(rows)} usable prompts (seed {args.seed})",
              file=sys.stderr, flush=True)
        screening = screen(args, model, chosen, tok)
        levels = [str(r.get(args.group_key, "all")) for r in chosen]
        result = {"model": model, "data": data, "prompts": len(chosen), "usable_prompts": len(rows),
                  "samples": args.samples, "seed": args.seed, "settings": dataclasses.asdict(s),
                  "cost_ratio": ratio_source, "sampling": {"temperature": args.temperature, "top_p": args.top_p,
                                                           "max_new_tokens": args.max_new_tokens},
                  "levels": levels, "screening": screening, **analyse(screening, levels, s, args.samples, args.prior)}
    if json_out is not None:
        os.write(json_out, (json.dumps(result, default=float) + "\n").encode())
        return 0
    from openrlhf_speed.cli.advise_report import render_report

    print(render_report(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
