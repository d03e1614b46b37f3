"""The GPU memory plan of a run: per GPU for the actor, the reference model and the vLLM
engines, per host for the RAM, from the train flags and the model's config.json (no weights).

- arithmetic.py: a model's dimensions, parameter counts and the bytes each role holds, each
  figure with its formula; the plain records the plan reads (Layout, Hardware).
- parts.py: the actor, reference, engine and host parts, and the fixes (flag changes) for a
  part that does not fit.
- plan.py: the plan of parsed train flags, as `--dry_run` and `openrlhf-speed doctor --plan`
  print it.

Rule: the plan never guesses silently (plan.py says how). The GPU measurements behind it:
docs/gpu.md#the-memory-plan-against-a-gpu.
"""
