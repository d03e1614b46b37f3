"""The proving ground: a small model of our own that learns arithmetic from RL in minutes on
CPU, with its RL train/test prompts, so SPEED's time to accuracy can be shown with real
learning. The package ships one build of each variant (proving/shipped, pinned by sha256);
the model names `proving`, `proving-full` and `proving-ci` resolve to that verified copy
wherever a model is taken (train, evaluate, bench), so every machine benchmarks the same
start model. `openrlhf-speed proving-ground build` rebuilds one into the cache and compares it
with the shipped copy."""

from openrlhf_speed.proving.recipe import ALIASES, VARIANTS, get_variant


def is_proving(name) -> bool:
    return name in ALIASES


def resolve_model_or_proving(name) -> str:
    """A local HF folder for `name`: a proving-ground alias (the shipped copy, verified
    against its manifest; shipped.path says what happens for a variant not shipped), else models.resolve_model's rules (the embedded default or a local
    folder)."""
    if is_proving(name):
        from openrlhf_speed.proving import shipped

        return str(shipped.path(name))
    from openrlhf_speed.models import resolve_model

    return resolve_model(name)


def data_paths(name) -> tuple[str, str]:
    """(train.jsonl, test.jsonl) of a proving-ground alias's shipped RL prompts (verified)."""
    from openrlhf_speed.proving import shipped

    return shipped.data_paths(name)


__all__ = ["ALIASES", "VARIANTS", "data_paths", "get_variant", "is_proving", "resolve_model_or_proving"]
