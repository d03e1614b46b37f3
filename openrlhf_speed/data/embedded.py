"""The embedded default dataset on disk: built once per parameter set in the cache
directory (next to the embedded model), reused by every later run."""

import hashlib
import json
from pathlib import Path

from openrlhf_speed.data.build import DEFAULT_MIX, build_dataset
from openrlhf_speed.models.default_model import cache_root
from openrlhf_speed.storage.atomic import make_folder


def _complete(folder: Path) -> bool:
    return (folder / "test.jsonl").is_file()


def ensure_embedded_dataset(n_train=1000, n_test=200, seed=0, shots=2, mix=None) -> tuple[str, str]:
    """(train.jsonl, test.jsonl) of the embedded arithmetic data for these parameters."""
    params = {"n_train": n_train, "n_test": n_test, "seed": seed, "shots": shots, "mix": mix or DEFAULT_MIX}
    key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    out = cache_root() / "data" / f"arith-{n_train}-{n_test}-s{seed}-{key}"
    if not _complete(out):
        make_folder(out, lambda tmp: build_dataset(str(tmp), n_train=n_train, n_test=n_test, mix=mix, seed=seed,
                                                   shots=shots), _complete)
    return str(out / "train.jsonl"), str(out / "test.jsonl")
