"""Helpers shared by test files (tests/ is on sys.path via pytest.ini's `pythonpath`)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def openrlhf_speed_cmd() -> list:
    """The console script of the venv running the tests."""
    exe = VENV_BIN / "openrlhf-speed"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "openrlhf_speed.cli.main"]
