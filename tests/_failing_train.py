"""`openrlhf-speed train` in a child process whose trainer actor fails with a known error, as
`ray.get(ppo_trainer.fit.remote())` raises it (a RayTaskError whose cause is the error), without
starting Ray or OpenRLHF: what the command prints last and its exit status."""

import subprocess
import sys

_DRIVER = """
import runpy, sys, ray
from openrlhf_speed.cli import train
from {module} import {name}

def fit_failed(*args, **kwargs):
    raise ray.exceptions.RayTaskError("SpeedPPOTrainer.fit", "Traceback ...", {name}({message!r})).as_instanceof_cause()

runpy.run_module = fit_failed
sys.exit(train.main([]))
"""


def train_failing_with(module: str, name: str, message: str) -> subprocess.CompletedProcess:
    """Run the command with its trainer failing with `module`.`name`(`message`)."""
    code = _DRIVER.format(module=module, name=name, message=message)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
