"""Tensor-parallel groups on one node (backends/placement.py): ranks take placement-group
bundles in node order, and a layout whose TP group still spans hosts stops at start-up with a
message that names the group, its hosts and the fix. Fed the tables Ray would report."""

import pytest
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from openrlhf_speed.backends import placement

# Ray placed a PACK group of 8 bundles on two nodes, interleaved (ray-project/ray#51117).
INTERLEAVED = {0: "nodeA", 1: "nodeB", 2: "nodeA", 3: "nodeB", 4: "nodeA", 5: "nodeB", 6: "nodeA", 7: "nodeB"}


def test_bundles_are_ordered_by_node():
    assert placement.node_ordered_bundles(INTERLEAVED) == [0, 2, 4, 6, 1, 3, 5, 7]
    assert placement.node_ordered_bundles({0: "a", 1: "a", 2: "b"}) == [0, 1, 2]  # already in order


def test_rank_options_take_the_node_ordered_bundle():
    pg = object()
    table_of = lambda group: {"bundles_to_node_id": INTERLEAVED}  # noqa: E731
    hosts = []
    for rank in range(8):
        opts = {"num_gpus": 1, "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, rank)}
        out = placement.node_ordered_options(opts, table_of=table_of)
        assert out["num_gpus"] == 1 and out["scheduling_strategy"].placement_group is pg
        hosts.append(INTERLEAVED[out["scheduling_strategy"].placement_group_bundle_index])
    # As OpenRLHF's RayActorGroup numbers them, ranks 0-3 and 4-7 (TP=4 groups) now share a node.
    assert hosts == ["nodeA"] * 4 + ["nodeB"] * 4
    assert placement.cross_node_tp_groups(hosts, 4) == []


def test_options_without_a_placement_group_are_unchanged():
    opts = {"num_gpus": 1, "num_cpus": 1}
    assert placement.node_ordered_options(opts, table_of=lambda pg: pytest.fail("no table needed")) is opts


def test_good_layout_passes_the_start_up_check():
    hosts = ["gpu-01"] * 8 + ["gpu-02"] * 8
    assert placement.check_tp_groups(hosts, 8, environ={}) is None
    assert placement.check_tp_groups(hosts, 4, environ={}) is None


def test_spanning_layout_stops_with_the_group_its_hosts_and_the_fix():
    # 6 GPUs on one node and 2 on another with TP=4: ranks 4-7 cross the network.
    hosts = ["gpu-01"] * 6 + ["gpu-02"] * 2
    assert placement.cross_node_tp_groups(hosts, 4) == [([4, 5, 6, 7], {"gpu-01": [4, 5], "gpu-02": [6, 7]})]
    with pytest.raises(RuntimeError) as err:
        placement.check_tp_groups(hosts, 4, environ={})
    msg = str(err.value)
    assert "ranks 4-7 on gpu-01 (ranks 4,5), gpu-02 (ranks 6,7)" in msg
    assert "--actor.num_gpus_per_node a multiple of 4" in msg and "--megatron.pp" in msg
    assert placement.ALLOW_CROSS_NODE_TP_ENV in msg


def test_spanning_layout_can_be_allowed_with_a_warning():
    hosts = ["a", "b"]
    warning = placement.check_tp_groups(hosts, 2, environ={placement.ALLOW_CROSS_NODE_TP_ENV: "1"})
    assert warning.startswith("warning: ") and "ranks 0-1 on a (ranks 0), b (ranks 1)" in warning


def test_megatron_backend_actor_class_hands_out_node_ordered_bundles(monkeypatch):
    """rollout/actor.py's class selector (what OpenRLHF's RayActorGroup calls .options on)."""
    import ray

    from openrlhf_speed import compat

    compat.install()  # OpenRLHF imports flash_attn at load time (the fallback on CPU)
    from openrlhf_speed.rollout import actor

    class Fake:
        @staticmethod
        def options(**kwargs):
            return kwargs

    monkeypatch.setattr(ray.util, "placement_group_table", lambda pg: {"bundles_to_node_id": INTERLEAVED})
    selector = actor._BackendActorClass("Policy", Fake)
    monkeypatch.setattr(selector, "resolve", lambda: Fake)
    pg = object()
    for backend, want in (("deepspeed", 1), ("megatron", 2)):  # rank 1 -> bundle 1, or the 2nd bundle on nodeA
        monkeypatch.setitem(actor._backend, "name", backend)
        opts = selector.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 1))
        assert opts["scheduling_strategy"].placement_group_bundle_index == want
