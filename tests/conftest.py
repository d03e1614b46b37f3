"""Shared test setup. tests/ is a rootdir, not a package (see pytest.ini)."""

import os
import shutil
import tempfile

import pytest

# The largest end-to-end test (stop and resume) writes about 3.5 GB of DeepSpeed checkpoints,
# Ray's session logs come on top: below this much free space such a test would die half way
# with an I/O error that hides the cause.
E2E_FREE_GB = 5.0


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


def free_gb(path):
    return shutil.disk_usage(path).free / 1e9


def pytest_report_header(config):
    return f"free disk: {free_gb(tempfile.gettempdir()):.1f} GB in {tempfile.gettempdir()}"


def pytest_runtest_setup(item):
    if not any(m in item.keywords for m in ("slow", "e2e_extra", "e2e_long")):
        return
    where = tempfile.gettempdir()
    free = free_gb(where)
    if free < E2E_FREE_GB:
        pytest.fail(
            f"only {free:.1f} GB free in {where}; this end-to-end test needs about {E2E_FREE_GB:.0f} GB "
            f"(checkpoints, Ray logs). Free disk space (old pytest runs live in {where}/pytest-of-*) "
            "or point TMPDIR at a larger disk.",
            pytrace=False,
        )


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
