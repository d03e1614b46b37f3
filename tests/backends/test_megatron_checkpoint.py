"""Megatron checkpoints (`checkpoint.py`) on CPU with gloo: resume, HF export, layouts.

One `torch.distributed.run` launch of `megatron_ckpt_worker.py` with 2 ranks runs TP=2 and
PP=2 on tiny random Llama (tied) and Qwen2 (a module-scoped fixture); the tests read its
per-rank results:
- resuming from a checkpoint into a model with other weights and a fresh optimizer gives
  the same next step bit for bit (loss, every parameter, LR, RNG): model, optimizer,
  scheduler and RNG state all round-trip; client states and `latest` too;
- `max_num` pruning, re-saving a tag, and a save that fails midway (`latest` unchanged);
- the model part of a TP=2 checkpoint loads at PP=2; its optimizer part is refused;
- `export_hf` folders load with `from_pretrained` and equal the source model exactly (fp32,
  one shard and 64 KiB shards with an index; bf16);
- a missing `latest` gives a clear error (in-process, no ranks needed).
"""

import json
import re
from pathlib import Path

import pytest
from _util import torchrun_ranks

pytest.importorskip("megatron.core")

WORKER = Path(__file__).with_name("megatron_ckpt_worker.py")
ARCHS = ("llama", "qwen2")
LAYOUTS = ("tp2", "pp2")
NPROC = 2



@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("megatron_ckpt")
    return torchrun_ranks(WORKER, NPROC, out)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_resume_is_bit_identical(ranks, arch, layout):
    losses = []
    for rank in ranks:
        res = rank[arch][layout]["resume"]
        assert res["differs_before_load"]  # the fresh model really had other weights
        assert res["not_equal_after_load"] == [], res["not_equal_after_load"]
        assert res["not_equal_after_step"] == [], res["not_equal_after_step"]
        assert res["loss_resumed"] == res["loss"]
        assert res["lr_resumed"] == res["lr"] and res["lr"][0] < 1e-2  # still warming up
        assert res["rng_resumed"] == res["rng"]
        losses.append(res["loss"])
    assert any(loss is not None for loss in losses)  # the last stage reported a loss


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_client_states_latest_and_files(ranks, arch, layout):
    res = ranks[0][arch][layout]["resume"]
    assert res["client_loaded"] == res["client_saved"]
    assert res["latest"] == "global_step1"
    # Exactly these files: no partial folder left behind, one optimizer file per (tp, pp) rank.
    other_rank = "mp_rank_01_000.pt" if layout == "tp2" else "mp_rank_00_001.pt"
    # (How many .distcp shard files each rank writes is Megatron's business.)
    files = [f for f in res["files"] if not f.endswith(".distcp")]
    assert len(files) < len(res["files"])
    assert sorted(files) == sorted([
        "latest", "global_step1/trainer_state.pt",
        "global_step1/model/.metadata", "global_step1/model/metadata.json", "global_step1/model/common.pt",
        "global_step1/optim/mp_rank_00_000.pt", f"global_step1/optim/{other_rank}",
    ])


def test_pruning_resave_and_failed_save(ranks):
    life = ranks[0]["llama"]["tp2"]["lifecycle"]
    assert life["after_four_saves"] == ["global_step3", "global_step4", "latest"]
    assert life["resaved_client"] == {"global_step": 40}
    assert life["after_resave"] == ["global_step3", "global_step4", "latest"]
    # The failed save left only its hidden partial folder; `latest` still names step 4.
    assert life["failed_save_raised"]
    assert life["after_failed_save"] == [".global_step5.partial", "global_step3", "global_step4", "latest"]
    assert life["client_after_failed_save"] == {"global_step": 40}
    assert life["after_retry"] == ["global_step4", "global_step5", "latest"]
    assert life["latest_after_retry"] == "global_step5"


@pytest.mark.parametrize("arch", ARCHS)
def test_model_loads_at_another_layout_optimizer_does_not(ranks, arch):
    for rank in ranks:
        res = rank[arch]["reshard"]
        assert res["not_equal"] == [] and res["n_compared"] == res["n_reference"] > 0, res
        assert res["client"]["global_step"] == 1
        assert "saved at TP=2 PP=1, this run is TP=1 PP=2" in res["refusal"]
        assert "optimizer=None" in res["refusal"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_export_hf_loads_and_matches_source(ranks, arch, layout):
    export = ranks[0][arch][layout]["export"]
    for variant, res in export.items():
        assert res["not_equal"] == [], (variant, res)
        assert res["n_tensors"] == res["n_reference"]
        folder = Path(res["folder"])
        config = json.loads((folder / "config.json").read_text())
        assert config["dtype"] == ("bfloat16" if variant == "bf16" else "float32")
        assert res["dtypes"] == ["torch.bfloat16" if variant == "bf16" else "torch.float32"]
        shards = sorted(p.name for p in folder.glob("*.safetensors"))
        if variant == "sharded":
            assert len(shards) >= 3 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
            index = json.loads((folder / "model.safetensors.index.json").read_text())
            assert sorted(set(index["weight_map"].values())) == shards
            with_head = arch == "qwen2"  # llama is tied: no lm_head.weight in the files
            assert ("lm_head.weight" in index["weight_map"]) == with_head
        else:
            assert shards == ["model.safetensors"]
            assert not (folder / "model.safetensors.index.json").exists()
        assert not list(folder.glob("*.part"))


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    from openrlhf_speed.backends.megatron.checkpoint import load_checkpoint

    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path}/latest does not exist")):
        load_checkpoint(str(tmp_path), model=None)
    (tmp_path / "latest").write_text("global_step7")
    with pytest.raises(FileNotFoundError, match="names the checkpoint 'global_step7'"):
        load_checkpoint(str(tmp_path), model=None)
