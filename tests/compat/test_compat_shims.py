"""The CPU compat shims: each one against what it stands in for."""

import subprocess
import sys
import textwrap

import pytest
import torch

from openrlhf_speed import compat
from openrlhf_speed.compat import flash_attn_fallback, import_hooks


def run_py(code: str, timeout=300) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_unpad_pad_roundtrip_matches_reference():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 4)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]])
    flat, indices, cu, max_len, used = flash_attn_fallback.unpad_input(x, mask)
    ref = torch.cat([x[b][mask[b].bool()] for b in range(3)])
    assert torch.equal(flat, ref)
    assert cu.tolist() == [0, 3, 8, 10] and max_len == 5 and used.tolist() == [3, 5, 2]
    back = flash_attn_fallback.pad_input(flat, indices, 3, 5)
    assert torch.equal(back, x * mask.unsqueeze(-1))


def test_openrlhf_imports_without_flash_attn_and_transformers_does_not_see_it():
    out = run_py(
        """
        from openrlhf_speed import compat
        print(compat.install())
        import openrlhf.models.ring_attn_utils as r
        import flash_attn.bert_padding as bp
        import transformers.utils as tu
        print("fallback", getattr(bp, "__openrlhf_speed_fallback__", False), "fa2", tu.is_flash_attn_2_available())
        try:
            import flash_attn.ops.triton.cross_entropy
            print("ops importable")
        except ImportError:
            print("ops missing")
        """
    )
    assert "fallback True fa2 False" in out
    assert "ops missing" in out  # so OpenRLHF's log_probs_from_logits takes its pure-torch branch


def test_when_imported_runs_after_module_body_and_immediately_if_loaded(tmp_path, monkeypatch):
    (tmp_path / "hooked_mod_x.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    import_hooks.when_imported("hooked_mod_x", lambda m: seen.append(m.VALUE))
    assert seen == []
    import hooked_mod_x  # noqa: F401

    assert seen == [1]
    import_hooks.when_imported("hooked_mod_x", lambda m: seen.append(m.VALUE + 1))
    assert seen == [1, 2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU shims are off on CUDA machines")
def test_cuda_shims_give_openrlhf_cpu_devices():
    out = run_py(
        """
        from openrlhf_speed import compat
        compat.install()
        import torch
        print("dev", torch.cuda.current_device())
        torch.cuda.synchronize(); torch.cuda.empty_cache(); torch.cuda.set_device(0)
        from openrlhf.trainer.ppo_utils import NaiveReplayBuffer
        print("buf", NaiveReplayBuffer(2, cpu_offload=False).target_device)
        import openrlhf.utils.deepspeed.deepspeed as ds
        import openrlhf.utils.distributed_util as du
        print("mesh", getattr(ds.init_device_mesh, "_cpu_shim", False))
        print("sync", du.stateless_init_process_group.__module__)
        """
    )
    assert "dev cpu" in out and "buf cpu" in out and "mesh True" in out
    assert "sync openrlhf_speed.compat.weight_sync" in out


BROADCAST_RANK = """
import sys, torch
from openrlhf_speed.compat.weight_sync import GlooBroadcastGroup
rank, port = int(sys.argv[1]), int(sys.argv[2])
group = GlooBroadcastGroup("127.0.0.1", port, rank, 2)
for dtype in (torch.bfloat16, torch.float32):
    t = torch.arange(12, dtype=dtype).reshape(3, 4) * 0.37 if rank == 0 else torch.zeros(3, 4, dtype=dtype)
    group.broadcast(t, src=0)
    print(dtype, t.float().tolist(), flush=True)
# Skip interpreter teardown: destroying a gloo group while the peer tears down its own can
# abort ("terminate called without an active exception", seen once in CI after both ranks
# had printed); what is under test is the data above, not the exit.
import os
os._exit(0)
"""


def test_gloo_broadcast_group_delivers_exact_tensors():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen([sys.executable, "-c", BROADCAST_RANK, str(r), str(port)], stdout=subprocess.PIPE, text=True)
        for r in range(2)
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]
    expected = (torch.arange(12, dtype=torch.bfloat16).reshape(3, 4) * 0.37).float().tolist()
    assert f"torch.bfloat16 {expected}" in outs[1]


def test_ray_runtime_env_installs_hook_in_workers():
    env = compat.ray_runtime_env()
    assert env["worker_process_setup_hook"] == "openrlhf_speed.compat.setup_worker"
    if compat.cpu_mode():
        assert env["env_vars"]["DS_ACCELERATOR"] == "cpu"
