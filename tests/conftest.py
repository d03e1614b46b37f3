"""Shared test setup. tests/ is a rootdir, not a package (see pytest.ini)."""

import os

import pytest


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
