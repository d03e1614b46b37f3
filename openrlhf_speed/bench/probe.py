"""A running `openrlhf-speed train`, measured from outside: resident memory by role, the Ray
object store, the run's step records, and a checkpoint's size with the curriculum state
inside it. Used by the soak (bench/soak.py) and the scale benchmark (bench/scale.py).

The run's processes are found by an environment variable the caller sets on its command
(RUN_ENV): Ray's workers and vLLM's engine processes inherit it, also where they are
re-parented away from the command's process tree. Memory is RSS (shared pages counted in
each process), in MiB: what a growth check compares, step against step.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from typing import Optional

import psutil

RUN_ENV = "OPENRLHF_SPEED_RUN_ID"
MIB = 2**20
# Role by the process title Ray (ray::Class) or vLLM (VLLM::EngineCore, VLLM::Worker) gives it.
ROLES = (("driver", "ray::SpeedPPOTrainer"), ("actor", "PolicyActor"), ("ref", "ReferenceModel"),
         ("engine", "ray::SpeedRolloutActor"), ("vllm_workers", "VLLM::"))


def run_processes(token: str) -> list:
    """Every live process whose environment carries RUN_ENV=token."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(RUN_ENV) == token:
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


def _cmdline(p) -> str:
    try:
        return " ".join(p.cmdline())
    except (psutil.Error, OSError):
        return ""


def role_of(cmdline: str) -> str:
    for role, mark in ROLES:
        if mark in cmdline:
            return role
    if " train" in cmdline and "openrlhf" in cmdline:
        return "cli"  # the command itself: Ray's driver script
    return "ray"  # raylet, GCS, agents, idle workers


def rss_by_role(procs: list) -> dict:
    """MiB per role; engines apart (engine0, engine1, ... in process id order)."""
    out: dict = {}
    engines = 0
    for p in sorted(procs, key=lambda q: q.pid):
        try:
            rss = p.memory_info().rss / MIB
        except (psutil.Error, OSError):
            continue
        role = role_of(_cmdline(p))
        if role == "engine":
            role, engines = f"engine{engines}", engines + 1
        out[role] = out.get(role, 0.0) + rss
    return {k: round(v, 1) for k, v in sorted(out.items())}


def gcs_address(procs: list) -> Optional[str]:
    for p in procs:
        m = re.search(r"--gcs-address=(\S+)", _cmdline(p))
        if m:
            return m.group(1)
    return None


def object_store_mib(address: Optional[str]) -> Optional[float]:
    """Plasma memory in use on the run's cluster (`ray memory --stats-only`), or None."""
    if not address:
        return None
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    try:
        out = subprocess.run([ray_cli, "memory", "--stats-only", "--address", address], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"Plasma memory usage (\d+(?:\.\d+)?) MiB", out)
    return float(m.group(1)) if m else None


class Records:
    """The step records of a run's --log.jsonl, read as they are appended."""

    def __init__(self, path: str):
        self.path, self._offset, self.steps = path, 0, []

    def poll(self) -> list:
        """The step records appended since the last call (complete lines only)."""
        if not os.path.isfile(self.path):
            return []
        with open(self.path) as f:
            f.seek(self._offset)
            text = f.read()
        text = text[: text.rfind("\n") + 1]
        self._offset += len(text.encode())
        new = [r for r in map(json.loads, text.splitlines()) if r.get("event") == "step"]
        for r in new:
            r["step"] = int(r["step"])  # --log.jsonl writes every number as a float
        self.steps += new
        return new


def files_bytes(*paths: str) -> int:
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))


def checkpoint_figures(ckpt_path: str, step: int) -> Optional[dict]:
    """The size of checkpoint global_step<step> (from its manifest) and of the curriculum
    state in it, with the state's parts; None until the checkpoint is complete."""
    from openrlhf_speed.rollout.checkpoint import curriculum_state_path
    from openrlhf_speed.rollout.ckpt_manifest import manifest_bytes

    total = manifest_bytes(ckpt_path, f"global_step{step}")
    state_path = curriculum_state_path(ckpt_path, step)
    if total is None or not os.path.isfile(state_path):
        return None
    import torch

    state = torch.load(state_path, weights_only=False)
    sched = state["scheduler"]
    parts = {k: round(len(pickle.dumps(v, protocol=4)) / MIB, 3) for k, v in sched.items()}
    return {"ckpt_mib": round(total / MIB, 2), "state_mib": round(os.path.getsize(state_path) / MIB, 3),
            "state_parts_mib": parts, "buffer": len(sched["ready"]), "inflight": len(sched["inflight"]),
            "epoch": sched["epoch"], "position": sched["position"], "scheduler_step": sched["step"]}


def machine() -> dict:
    """Where the figures come from: CPU model, cores this process may use, memory."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1)}
