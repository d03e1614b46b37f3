"""Which Ray node each role landed on, and with how many compute threads: one line per role
process, so a multi-node run shows in its log whether the engines and the actor are where
the user expects, and a CPU run shows whether training got the cores it should have (torch's
intra-op threads, the OMP_NUM_THREADS it inherited, the cores it may run on). Used by both
actor backends and by rollout's vLLM engines; here, below rollout, so a backend needs no
import of the layer that drives it."""

import os
import socket

import ray


def log_placement(role: str) -> str:
    node_id = ray.get_runtime_context().get_node_id()
    import torch

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    line = (f"[openrlhf-speed] placement: {role} on node {node_id[:12]} "
            f"(ip {ray.util.get_node_ip_address()}, host {socket.gethostname()}, pid {os.getpid()}; "
            f"torch threads {torch.get_num_threads()}, OMP_NUM_THREADS {os.environ.get('OMP_NUM_THREADS', 'unset')}, "
            f"cores {','.join(map(str, cores))})")
    print(line, flush=True)
    return node_id
