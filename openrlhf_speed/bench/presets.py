"""The bench's size presets (`--mode`) and what each mode chooses besides sizes.

Kept apart from run.py so every number that shapes a benchmark is read in one place. A published
table names its mode; a preset's numbers never change under a published table: a new regime is
a new mode (`proving` is proving ground v5; the v4 tables stay reproducible as `proving-v4`).
"""

# B prompts x N responses, response limit, steps, eval period, held-out prompts x samples;
# the training sizes (train_batch, micro, train_micro: None means B x N, min(B x N, 16),
# min(micro, 8)) and warm-up optimizer steps live in TRAIN_DEFAULTS unless a preset sets them.
PRESETS = {
    # CI: proves the whole path (3 runs, evals, report, plot) in a few minutes.
    "tiny": dict(batch=4, n=4, n_init=2, max_new_tokens=32, steps=1, eval_every=1, eval_prompts=8, eval_k=2,
                 n_train=64, lr=1e-5),
    # About 10-15 minutes on 2 CPU cores: the token accounting and the report, not accuracy.
    "quick": dict(batch=4, n=4, n_init=2, max_new_tokens=32, steps=2, eval_every=1, eval_prompts=16, eval_k=2,
                  n_train=200, lr=1e-5),
    # The README figures, sized to finish in about 90 minutes on 2 CPU cores (a start-up of
    # 1.5 min, 16 steps of 60-90 s and 5 evaluations per curriculum); on a GPU, raise
    # --steps, --batch and --n towards the paper's (B=256 x N=24 on DAPO-17k).
    "full": dict(batch=4, n=4, n_init=2, max_new_tokens=32, steps=16, eval_every=4, eval_prompts=64, eval_k=2,
                 n_train=1000, lr=1e-5),
    # The paper's §5.1 where the proving ground allows, in the paper's regime (proving ground v5):
    # N = 24 responses, N_init 4 (speed@8 is the N_init 8 row), 16 prompts a step, SPEED's
    # generation batch 64 prompts (commands.GEN_PROMPTS), a linear lr warm-up of 10 steps (10% of
    # the horizon), held-out accuracy with evaluation and checkpoints off the clock. Departures:
    # - 100 steps of 16 prompts, not the paper's hundreds of steps of 256: about 20 minutes a run
    #   on 2 cores; the RL split (20,000 prompts) is not wrapped around within it by any curriculum;
    # - lr 2e-5 (the paper: 1e-6 on 7B), calibrated on `off` runs alone so that stock OpenRLHF is
    #   still learning over the horizon's last quarter (docs/benchmarks.md, "Proving ground v5");
    #   v4's 1e-4 reached its plateau by step 30;
    # - max_new_tokens 64: the proving ground's answers are a few tokens (the paper: 8k);
    # - evaluation every 5 steps on the whole held-out split (1200 prompts x 1 sample), not the
    #   paper's AIME/MATH500: the proving ground has its own held-out arithmetic;
    # - target: stock OpenRLHF's final accuracy (off_final: the mean over the off runs of their
    #   last two evaluations), fixed by the off runs before any SPEED run is looked at, as the
    #   paper's Table 1 asks how long each method takes to reach what the baseline reaches late.
    "proving": dict(batch=16, n=24, n_init=4, max_new_tokens=64, steps=100, eval_every=5, eval_prompts=1200,
                    eval_k=1, n_train=0, lr=2e-5, warmup=10),
    # The published v4 tables (benchmarks/proving-v4): 30 steps at lr 1e-4 (set on uniform runs
    # before any SPEED run; 1e-3 collapsed the model, 3e-4 degraded it), evaluation every 2 steps,
    # target uniform_gain:0.75; the target fell at step 14-16, 10 of them the warm-up.
    "proving-v4": dict(batch=16, n=24, n_init=4, max_new_tokens=64, steps=30, eval_every=2, eval_prompts=1200,
                       eval_k=1, n_train=0, lr=1e-4, warmup=10),
    # The regime map's cells (docs/benchmarks.md, "The regime map"): v5's start model, sizes and
    # evaluation, on a data mix that moves `off`'s zero-variance share at N = 24 (proving/mixes.py:
    # 0.24 low, 0.66 high by `advise`; v5's split 0.43), and B = 4 beside B = 16 with the paper's
    # ratios kept (SPEED's generation batch 4 x B, commands.GEN_PROMPTS; warm-up 10% of the horizon).
    # lr and horizon are calibrated on `off` runs alone, as v5's were.
    "proving-low": dict(batch=16, n=24, n_init=4, max_new_tokens=64, steps=100, eval_every=5, eval_prompts=1200,
                        eval_k=1, n_train=0, lr=2e-5, warmup=10),
    "proving-high": dict(batch=16, n=24, n_init=4, max_new_tokens=64, steps=100, eval_every=5, eval_prompts=1200,
                         eval_k=1, n_train=0, lr=2e-5, warmup=10),
    "proving-high-b4": dict(batch=4, n=24, n_init=4, max_new_tokens=64, steps=200, eval_every=10, eval_prompts=1200,
                            eval_k=1, n_train=0, lr=2e-5, warmup=20),
    # CI for the proving-ground path: its small variant, one seed, two steps.
    "proving-ci": dict(batch=4, n=4, n_init=2, max_new_tokens=32, steps=2, eval_every=1, eval_prompts=32, eval_k=1,
                       n_train=0, lr=1e-4),
}

TRAIN_DEFAULTS = dict(train_batch=None, micro=None, train_micro=None, warmup=0)

# Steps of the driver measurement: enough for the stream to pass its start-up and fill the
# engines (128 prompts at the proving mode's B = 8), few enough to cost a few minutes.
DRIVER_STEPS = 16
# What a mode chooses besides sizes; explicit flags (--model, --runs, --target, --target_rule) win.
MODE_DEFAULTS = {
    # The driver measurement's replay is the raw engine on the very requests, so the older
    # engine measurement (B x steps prompts x N, about 6 minutes here) is skipped.
    "proving": dict(model="proving", runs=4, target_rule="off_final", driver_steps=0, skip_engine=True,
                    curricula="off,uniform,dapo,speed"),
    "proving-v4": dict(model="proving-v4", runs=4, target_rule="uniform_gain:0.75", driver_steps=DRIVER_STEPS,
                       skip_engine=True, curricula="off,uniform,dapo,speed,speed@8,greso,speed_bayes"),
    "proving-ci": dict(model="proving-ci", runs=1),
}
# The regime map's cells: v5's model and target rule, `off`, DAPO, SPEED, speed_seq and speed_thin (their prior per
# the rows' `level`, the proving data's own difficulty tag), on their data mix.
for _mode, _mix in (("proving-low", "low"), ("proving-high", "high"), ("proving-high-b4", "high")):
    MODE_DEFAULTS[_mode] = dict(model="proving", runs=3, target_rule="off_final", driver_steps=0, skip_engine=True,
                                curricula="off,dapo,speed,speed_seq+level,speed_thin+level", mix=_mix)
DEFAULTS = dict(model="default", runs=1, target_rule=None, driver_steps=0, skip_engine=False,
                curricula="uniform,dapo,speed")
