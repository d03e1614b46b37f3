"""Helpers shared by test files (tests/ is on sys.path via pytest.ini's `pythonpath`)."""

import math
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


def json_differences(now, then, rel: float = 1e-9, abs_tol: float = 1e-12, path: str = "", out=None) -> list:
    """Paths where two JSON trees differ: floats to `rel` (numpy's sums take another order on
    another SIMD width, so a figure rebuilt on another CPU moves in its last bits), NaN equal to
    NaN, everything else exactly."""
    out = [] if out is None else out
    if isinstance(now, dict) and isinstance(then, dict):
        for key in sorted(set(now) | set(then), key=str):
            if key not in now or key not in then:
                out.append(f"{path}/{key}: {'only in the second' if key in then else 'only in the first'}")
            else:
                json_differences(now[key], then[key], rel, abs_tol, f"{path}/{key}", out)
    elif isinstance(now, list) and isinstance(then, list) and len(now) == len(then):
        for i, (a, b) in enumerate(zip(now, then)):
            json_differences(a, b, rel, abs_tol, f"{path}[{i}]", out)
    elif isinstance(now, float) and isinstance(then, (int, float)) and not isinstance(then, bool):
        if not (math.isnan(now) and math.isnan(then)) and not math.isclose(now, then, rel_tol=rel, abs_tol=abs_tol):
            out.append(f"{path}: {now!r} against {then!r}")
    elif now != then:
        out.append(f"{path}: {str(now)[:80]} against {str(then)[:80]}")
    return out
