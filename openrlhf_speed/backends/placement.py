"""Which Ray node each role landed on: one line per role process, so a multi-node run
shows in its log whether the engines and the actor are where the user expects. Used by both
actor backends and by rollout's vLLM engines; here, below rollout, so a backend needs no
import of the layer that drives it."""

import os
import socket

import ray


def log_placement(role: str) -> str:
    node_id = ray.get_runtime_context().get_node_id()
    line = (f"[openrlhf-speed] placement: {role} on node {node_id[:12]} "
            f"(ip {ray.util.get_node_ip_address()}, host {socket.gethostname()}, pid {os.getpid()})")
    print(line, flush=True)
    return node_id
