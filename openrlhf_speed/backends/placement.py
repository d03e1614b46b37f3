"""Where each role's processes run, and rank layouts that keep tensor parallelism on one node.

- `log_placement`: which Ray node each role landed on, and with how many compute threads: one
  line per role process, so a multi-node run shows in its log whether the engines and the
  actor are where the user expects, and a run shows whether training got the cores it should
  have (torch's intra-op threads, the OMP_NUM_THREADS it inherited, the cores it may run on).
  Used by both actor backends and by rollout's vLLM engines; here, below rollout, so a
  backend needs no import of the layer that drives it.
- `node_ordered_bundles` / `node_ordered_options`: OpenRLHF's `RayActorGroup` puts actor rank
  r on placement-group bundle r, and Ray does not promise that consecutive bundles of a PACK
  group share a node (ray-project/ray#51117). The Megatron backend needs its tensor-parallel
  ranks (consecutive, `model.REPLICA_CONTIGUOUS_ORDER`) on one node, so rank r gets the r-th
  bundle in node order instead: the same order OpenRLHF's own vLLM engines use for their
  bundles (`openrlhf.trainer.ray.utils.get_bundle_indices`).
- `cross_node_tp_groups` / `check_tp_groups`: what the ordering cannot fix (a node holding a
  number of bundles that is not a multiple of the TP size, actors without a placement group)
  is caught at start-up, before the first all-reduce would cross the network.
"""

import os
import socket

import ray

# Set to 1 to run with tensor-parallel groups that span nodes anyway (a warning instead of the error).
ALLOW_CROSS_NODE_TP_ENV = "OPENRLHF_SPEED_ALLOW_CROSS_NODE_TP"


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


def node_ordered_bundles(bundles_to_node: dict) -> list:
    """Bundle indices grouped by node, nodes in the order of their lowest bundle, bundles in
    index order within a node. bundles_to_node: `placement_group_table(pg)["bundles_to_node_id"]`."""
    by_node = {}
    for bundle in sorted(bundles_to_node):
        by_node.setdefault(bundles_to_node[bundle], []).append(bundle)
    return [bundle for bundles in by_node.values() for bundle in bundles]


def node_ordered_options(options: dict, table_of=None) -> dict:
    """Actor `.options(...)` with a placement-group bundle index r replaced by the r-th bundle in
    node order. Options without a placement group (or without a bundle index) are returned
    as they are. `table_of(pg)` stands in for `ray.util.placement_group_table` in tests."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = options.get("scheduling_strategy")
    if not isinstance(strategy, PlacementGroupSchedulingStrategy) or strategy.placement_group_bundle_index < 0:
        return options
    table = (table_of or ray.util.placement_group_table)(strategy.placement_group)
    order = node_ordered_bundles(table["bundles_to_node_id"])
    index = order[strategy.placement_group_bundle_index]
    return {**options, "scheduling_strategy": PlacementGroupSchedulingStrategy(
        placement_group=strategy.placement_group,
        placement_group_bundle_index=index,
        placement_group_capture_child_tasks=strategy.placement_group_capture_child_tasks,
    )}


def cross_node_tp_groups(hosts: list, tp: int) -> list:
    """TP groups whose ranks are on more than one host: [(ranks, {host: [ranks]}), ...].
    hosts[r] is rank r's host; TP groups are consecutive ranks (tp fastest in the rank order)."""
    bad = []
    for start in range(0, len(hosts), tp):
        ranks = list(range(start, min(start + tp, len(hosts))))
        by_host = {}
        for rank in ranks:
            by_host.setdefault(hosts[rank], []).append(rank)
        if len(by_host) > 1:
            bad.append((ranks, by_host))
    return bad


def cross_node_message(bad: list, tp: int, role: str = "Megatron actor") -> str:
    """The start-up error for `cross_node_tp_groups`' result: each group, its hosts, the fix."""
    groups = "; ".join(
        f"ranks {ranks[0]}-{ranks[-1]} on " + ", ".join(f"{host} (ranks {','.join(map(str, rs))})"
                                                       for host, rs in by_host.items())
        for ranks, by_host in bad
    )
    return (f"{role}: {len(bad)} tensor-parallel group(s) of size {tp} span nodes: {groups}. Their all-reduces "
            f"would cross the network every layer. Fix: give every node a multiple of --megatron.tp actor GPUs "
            f"(--actor.num_gpus_per_node a multiple of {tp}, at most the GPUs of one node), lower --megatron.tp "
            f"to the GPUs per node and raise --megatron.pp instead, or set {ALLOW_CROSS_NODE_TP_ENV}=1 to run "
            f"like this anyway")


def check_tp_groups(hosts: list, tp: int, environ=os.environ, role: str = "Megatron actor") -> str | None:
    """Raise RuntimeError when a TP group spans hosts; with ALLOW_CROSS_NODE_TP_ENV=1 return the
    message as a warning instead. None when every group is on one host."""
    bad = cross_node_tp_groups(hosts, tp)
    if not bad:
        return None
    message = cross_node_message(bad, tp, role)
    if environ.get(ALLOW_CROSS_NODE_TP_ENV) == "1":
        return f"warning: {message}"
    raise RuntimeError(message)
