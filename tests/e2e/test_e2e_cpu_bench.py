"""`openrlhf-speed bench` end to end at its smallest size, on the shipped proving-ground CI
model (used as shipped, never built): four real training runs (stock OpenRLHF `off`, uniform
RLOO, DAPO filtering, SPEED-RLOO) with held-out evaluations, the engine's own throughput, and
the report a user reads (table, CSV, JSON, plot). It asserts no learning and no speedup: two
steps of a model that was taught for seconds prove the pipeline, not the curriculum."""

import json
import os
import subprocess

import pytest
from _util import openrlhf_speed_cmd

from openrlhf_speed.bench import report as rep
from openrlhf_speed.proving import recipe

pytestmark = pytest.mark.e2e_extra


def test_proving_ci_bench_builds_the_model_and_reports_every_curriculum(tmp_path):
    out = tmp_path / "bench"
    # A cache of its own, as on a fresh machine: the shipped model is used, nothing is built.
    env = dict(os.environ, OPENRLHF_SPEED_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([*openrlhf_speed_cmd(), "bench", "--mode", "proving-ci", "--steps", "1", "--out", str(out),
                           "--curricula", "off,uniform,dapo,speed"],
                          capture_output=True, text=True, timeout=2400, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert "[proving] building" not in log
    assert not (tmp_path / "cache" / "models" / recipe.get_variant("ci").folder).exists()
    # One progress line per evaluation and step, per curriculum.
    for name in ("off", "uniform", "dapo", "speed"):
        assert f"[bench {name}] eval step 0 | accuracy" in log and f"[bench {name}] step 1 |" in log, log[-3000:]

    results = json.load(open(out / "results.json"))
    # The CI variant's held-out split is small (its easy levels have few problems); every row is used.
    n_eval = len((out / "eval_prompts.jsonl").read_text().splitlines())
    assert 16 <= n_eval <= 32
    assert set(results["summary"]) == {"off", "uniform", "dapo", "speed"}
    for name, s in results["summary"].items():
        run = rep.load_run(str(out / name / "metrics.jsonl"))
        assert [e["step"] for e in run["evals"]] == [0, 1]
        assert all(0.0 <= e["eval_accuracy"] <= 1.0 and e["eval_num_samples"] == n_eval * 1 for e in run["evals"])
        assert s["steps"] == 1 and s["train_wall_s"] > 0
        # `off` is OpenRLHF's own generation: no driver token counts, its tokens come from the response length.
        assert s["tokens_generated"] > 0 or name == "off"
        assert results["evidence"]["runs"][name]["tokens_per_step_trained"] > 0
        # The training clock excludes the evaluations.
        assert s["train_wall_s"] < run["steps"][0]["timing/step_total"] + 60
        assert 0.0 <= s["curriculum_overhead_share"] < 0.5
    # Strategies account tokens by phase: SPEED screens then continues, the others generate groups whole.
    assert results["summary"]["speed"]["tokens_screen"] > 0 and results["summary"]["speed"]["tokens_full"] == 0
    assert results["summary"]["uniform"]["tokens_full"] > 0 and results["summary"]["uniform"]["tokens_discarded"] == 0
    assert results["engine"]["tokens_per_s"] > 0
    assert (out / "accuracy.png").read_bytes()[:4] == b"\x89PNG"
    summary_md = (out / "summary.md").read_text()
    # Every evaluation sends all held-out prompts at once; its time is logged.
    runs = rep.load_runs(str(out), results["runs_summary"])
    print("eval seconds:", {n: [round(e["eval_time_s"], 2) for e in r["evals"]] for n, r in runs.items()})
    assert "speed_over_off: measured" in summary_md and "GPU projection (a model, not a measurement)" in summary_md
    assert "speed_over_uniform" in summary_md and "the paper's claims, checked" in summary_md
    claims = {c["claim"]: c for c in results["claims"]}
    share = claims["speed useful-token share"]
    assert share["measured"] == results["summary"]["speed"]["useful_token_share"]
    assert share["status"] in ("met", "missed") and (share["status"] == "met" or "screened prompt" in share["why"])
    assert results["versions"]["openrlhf"] == "0.11.2"
    # Which kind of CPU the timings came from, in the results and the summary.
    from openrlhf_speed.compat.precision import cpu_precision

    assert results["versions"]["cpu_native_bf16"] == cpu_precision().native_bf16
    assert f"machine: {results['versions']['cpus']} CPUs, " in summary_md
