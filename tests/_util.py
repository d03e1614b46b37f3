"""Helpers shared by test files (tests/ is on sys.path via pytest.ini's `pythonpath`)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def load_script(name: str, module_name: str | None = None):
    """scripts/<name>.py imported as a module (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name or name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def openrlhf_speed_cmd() -> list:
    """The console script of the venv running the tests."""
    exe = VENV_BIN / "openrlhf-speed"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "openrlhf_speed.cli.main"]


def torchrun_ranks(worker, nproc: int, out: Path, *args, timeout: int = 600) -> list:
    """Run `worker` as `nproc` local ranks (`torch.distributed.run` on a free port) with
    `--out out` and the extra args; returns each rank's `<out>/rank<r>.json`."""
    import json
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
        "--master_addr", "127.0.0.1", "--master_port", str(port), str(worker), "--out", str(out), *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
