"""The start model's difficulty profile: per level, the share of prompts solved by none, some
or all of k samples (temperature 1.0, as RL samples), and the mean pass rate.

This is what SPEED screens on: the share of prompts never solved and always solved is the
share whose groups carry no gradient. Sampling runs in-process with HF `generate` (the model is tiny); responses
are scored by the training reward itself (rewards/math_reward.py).

Since recipe v3 the table also splits responses by style: `direct` is the share that give
`\\boxed{answer}` with no working, and `pass_worked` / `pass_direct` the pass rate of each
style (NaN where a level has none of it). The gap between the two is the room that RL can
gain by shifting the style, on every prompt at once.
"""

from __future__ import annotations

from collections import defaultdict

from openrlhf_speed.rewards.math_reward import math_reward


def correct(response: str, answer: int) -> bool:
    # The training reward itself, so the table and the RL reward never disagree on a response.
    return math_reward(response, str(answer)).reward == 1.0


DIRECT_MARK = "\\boxed"  # what a response without working opens with (build.DIRECT_OPENING adds its brace)


def is_direct(response: str) -> bool:
    """A response that skips the working: it opens with the boxed answer."""
    return response.lstrip().startswith(DIRECT_MARK)


def sample(model, tok, questions: list[str], k: int, max_new_tokens: int, seed: int, batch: int = 256) -> list[list[str]]:
    """k responses per question."""
    import torch

    torch.manual_seed(seed)
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
               for q in questions]
    flat = [p for p in prompts for _ in range(k)]
    out: list[str] = []
    for i in range(0, len(flat), batch):
        enc = tok(flat[i: i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        gen = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
        out += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return [out[j * k: (j + 1) * k] for j in range(len(questions))]


def pass_table(model, tok, problems, k: int = 8, max_new_tokens: int = 64, seed: int = 0) -> dict:
    """{"levels": {level: {prompts, never, some, always, pass_rate, direct, pass_worked,
    pass_direct}}, "all": {...}, "k": k}."""
    responses = sample(model, tok, [p.question for p in problems], k, max_new_tokens, seed)
    keys = ("prompts", "never", "some", "always", "solved", "direct", "direct_ok", "worked_ok")
    counts = defaultdict(lambda: dict.fromkeys(keys, 0))
    for p, rs in zip(problems, responses):
        ok = [correct(r, p.answer) for r in rs]
        styles = [is_direct(r) for r in rs]
        n_ok, n_direct = sum(ok), sum(styles)
        direct_ok = sum(o and d for o, d in zip(ok, styles))
        for key in (p.level, "all"):
            c = counts[key]
            c["prompts"] += 1
            c["solved"] += n_ok
            c["never" if n_ok == 0 else "always" if n_ok == k else "some"] += 1
            c["direct"] += n_direct
            c["direct_ok"] += direct_ok
            c["worked_ok"] += n_ok - direct_ok
    table = {}
    for key, c in counts.items():
        n, worked = c["prompts"], c["prompts"] * k - c["direct"]
        table[key] = {"prompts": n, "never": round(c["never"] / n, 3), "some": round(c["some"] / n, 3),
                      "always": round(c["always"] / n, 3), "pass_rate": round(c["solved"] / (n * k), 3),
                      "direct": round(c["direct"] / (n * k), 3),
                      "pass_worked": round(c["worked_ok"] / worked, 3) if worked else float("nan"),
                      "pass_direct": round(c["direct_ok"] / c["direct"], 3) if c["direct"] else float("nan")}
    levels = {p.level for p in problems}
    ordered = {lv: table[lv] for lv in sorted(levels, key=lambda lv: -table[lv]["pass_rate"])}
    return {"k": k, "levels": ordered, "all": table["all"],
            "example": {"question": problems[0].question, "response": responses[0][0]} if problems else None}


def format_table(t: dict) -> str:
    lines = [f"start model, {t['k']} samples per prompt at temperature 1.0 (direct: share of responses "
             "without working; p_work, p_dir: pass rate of each style):",
             f"{'level':<22}{'prompts':>8}{'never':>8}{'some':>8}{'always':>8}{'pass':>8}{'direct':>8}"
             f"{'p_work':>8}{'p_dir':>8}"]
    for name, r in [*t["levels"].items(), ("all", t["all"])]:
        lines.append(f"{name:<22}{r['prompts']:>8}{r['never']:>8.2f}{r['some']:>8.2f}{r['always']:>8.2f}"
                     f"{r['pass_rate']:>8.2f}{r.get('direct', float('nan')):>8.2f}"
                     f"{r.get('pass_worked', float('nan')):>8.2f}{r.get('pass_direct', float('nan')):>8.2f}")
    if t.get("example"):
        lines.append(f"example: {t['example']['question']!r} -> {t['example']['response']!r}")
    return "\n".join(lines)
