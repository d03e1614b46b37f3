"""Model resolution: the embedded default model and user-supplied local folders."""

from .default_model import DEFAULT_MODEL_ALIASES, ModelNotFoundError, default_model_dir, resolve_model

__all__ = ["DEFAULT_MODEL_ALIASES", "ModelNotFoundError", "default_model_dir", "resolve_model"]
