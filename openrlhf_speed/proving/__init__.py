"""The proving ground: a small model of our own that learns arithmetic from RL in minutes on
CPU, with its RL train/test prompts, so SPEED's time to accuracy can be shown with real
learning. `openrlhf-speed proving-ground build` makes it; the model names
`proving` and `proving-ci` resolve to it (built on first use) wherever a model is taken."""

from openrlhf_speed.proving.recipe import ALIASES, VARIANTS, get_variant


def is_proving(name) -> bool:
    return name in ALIASES


def resolve_model_or_proving(name) -> str:
    """A local HF folder for `name`: a proving-ground alias (built on first use), else
    models.resolve_model's rules (the embedded default or a local folder)."""
    if is_proving(name):
        from openrlhf_speed.proving.build import ensure_built

        return str(ensure_built(name))
    from openrlhf_speed.models import resolve_model

    return resolve_model(name)


def data_paths(name) -> tuple[str, str]:
    """(train.jsonl, test.jsonl) of a proving-ground alias's RL prompts, building it if needed."""
    from openrlhf_speed.proving.build import ensure_built

    folder = ensure_built(name) / "data"
    return str(folder / "train.jsonl"), str(folder / "test.jsonl")


__all__ = ["ALIASES", "VARIANTS", "data_paths", "get_variant", "is_proving", "resolve_model_or_proving"]
