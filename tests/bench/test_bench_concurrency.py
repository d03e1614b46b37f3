"""The concurrency-priced projection: a step's generation priced by the engine's throughput at
the sequences it kept in flight, anchored so uniform costs what the per-token bound says."""

import json
import math

import pytest

from openrlhf_speed.bench import aggregate
from openrlhf_speed.bench import concurrency as cc
from openrlhf_speed.bench import evidence

CURVE = {"source": "test", "points": [(1, 10.0), (10, 100.0), (100, 200.0)]}


def test_throughput_is_log_linear_between_points_and_flat_beyond():
    assert cc.throughput(CURVE["points"], 10) == pytest.approx(100.0)
    # halfway in log between 10 and 100 is sqrt(1000) ~ 31.6: halfway between 100 and 200
    assert cc.throughput(CURVE["points"], math.sqrt(1000)) == pytest.approx(150.0)
    assert cc.throughput(CURVE["points"], 5000) == pytest.approx(200.0)
    assert cc.throughput(CURVE["points"], 0.5) == pytest.approx(5.0)


def test_published_gpu_curve_saturates_near_200_sequences():
    pts = cc.GPU_7B_H100["points"]
    assert cc.throughput(pts, 256) / cc.throughput(pts, 64) == pytest.approx(3895.7 / 2623.2)
    assert cc.throughput(pts, 4096) == cc.throughput(pts, 512)
    assert "2503.08311" in cc.GPU_7B_H100["source"]


def test_off_is_priced_at_the_whole_batch_and_the_driver_at_its_outstanding():
    assert cc.step_concurrency({}, 384) == 384.0
    assert cc.step_concurrency({"driver/outstanding_mean": 50.0}, 384) == 50.0
    assert cc.step_concurrency({"driver/outstanding_mean": float("nan")}, 384) == 384.0


def _steps(n, tokens, conc):
    return [{"speed/tokens_generated": tokens, "speed/tokens_trained": 100.0, "timing/ppo_train": 1.0,
             "driver/outstanding_mean": conc} for _ in range(n)]


def test_more_sequences_in_flight_make_tokens_cheaper_below_saturation():
    runs = {"uniform": {"steps": _steps(4, 100.0, 10.0), "evals": []},
            "speed": {"steps": _steps(4, 100.0, 100.0), "evals": []}}
    groups = {k: k for k in runs}
    clocks, model = cc.projected_clocks(runs, groups, responses=0, batch=1, curve=CURVE, scale=1.0)
    base = evidence.cost_model(runs, groups, 0)
    # uniform: priced exactly as the linear bound (the anchor)
    linear = aggregate.projected_clock(runs["uniform"]["steps"], base["ratio"], base["s_per_train_token"])
    assert clocks["uniform"] == pytest.approx(linear)
    # speed generates the same tokens at 10x the concurrency: its generation costs 100/200 as much
    train = base["s_per_train_token"] * 100.0
    gen_uniform = linear[1] - train
    assert clocks["speed"][1] - train == pytest.approx(gen_uniform * 100.0 / 200.0)
    assert model["scale"] == 1.0


def test_engine_curve_file_is_read_and_a_bad_one_refused(tmp_path):
    good = tmp_path / "curve.json"
    good.write_text(json.dumps({"source": "cpu", "levels": [{"concurrency": 1, "tokens_per_s": 5},
                                                             {"concurrency": 8, "tokens_per_s": 30}]}))
    assert cc.load_curve(str(good))["points"] == [(1.0, 5.0), (8.0, 30.0)]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="engine-curve"):
        cc.load_curve(str(bad))


@pytest.mark.e2e_extra  # starts vLLM: outside the default tier
def test_engine_curve_measures_the_real_engine(tmp_path):
    """The CPU curve comes from the project's own vLLM engine: more sequences at once, more tokens/s."""
    import subprocess
    import sys

    out = tmp_path / "curve.json"
    proc = subprocess.run([sys.executable, "-m", "openrlhf_speed.cli.main", "engine-curve", "--model", "proving-ci",
                           "--levels", "1,16", "--max_new_tokens", "16", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    curve = cc.load_curve(str(out))
    (c1, t1), (c16, t16) = curve["points"]
    assert (c1, c16) == (1.0, 16.0)
    assert t16 > t1 > 0
    assert "16 sequences" in proc.stdout
