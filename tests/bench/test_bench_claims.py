"""The paper's claims as the benchmark report checks them: a user reads 'met' or 'missed'
off summary.md, so each verdict and each explanation must follow from the logged figures."""

import json
import math

import pytest

from openrlhf_speed.bench import claims as cl
from openrlhf_speed.bench import report as rep


def test_useful_share_ceiling_is_the_screening_arithmetic():
    # 1 of 4 screened prompts qualifies: 1 x N useful responses against 3 x N_init wasted ones.
    assert cl.useful_share_ceiling(0.25, n=4, n_init=2) == pytest.approx(4 / (4 + 3 * 2))
    assert cl.useful_share_ceiling(1.0, n=4, n_init=2) == 1.0
    q = cl.qualification_needed(0.9, n=4, n_init=2)
    assert q == pytest.approx(0.9 / 1.1) and cl.useful_share_ceiling(q, 4, 2) == pytest.approx(0.9)
    r = cl.n_ratio_needed(0.9, q=0.25)
    assert r == pytest.approx(27.0) and cl.useful_share_ceiling(0.25, n=r, n_init=1) == pytest.approx(0.9)
    assert math.isnan(cl.useful_share_ceiling(float("nan"), 4, 2))
    assert cl.binomial_se(0.5, 100) == pytest.approx(0.05) and math.isnan(cl.binomial_se(0.5, 0))


def _run(accs, step_s, samples, screened, qualified, useful, overhead):
    steps = [{"event": "step", "step": i, "train_wall_s": i * step_s, "speed/useful_token_share_cum": useful,
              "speed/prompts_screened": screened, "speed/prompts_qualified": qualified,
              "timing_parts/curriculum_overhead": overhead * step_s} for i in range(1, len(accs))]
    evals = [{"event": "eval", "step": i, "train_wall_s": i * step_s, "eval_accuracy": a,
              "eval_num_samples": samples} for i, a in enumerate(accs)]
    return {"steps": steps, "evals": evals}


def _verdicts(report):
    return {c["claim"]: c for c in report["claims"]}


def test_claims_met_and_missed_with_reasons():
    runs = {"uniform": _run([0.3, 0.4, 0.5, 0.6], 30, 400, 0, 0, 0.4, 0.001),
            "dapo": _run([0.3, 0.5, 0.55, 0.6], 40, 400, 0, 0, 0.5, 0.004),
            "speed": _run([0.3, 0.5, 0.6, 0.62], 20, 400, 8, 2, 0.35, 0.03)}
    report = rep.build_report(runs, target=0.5, settings={"n": 4, "n_init": 2})
    v = _verdicts(report)
    # time to 0.5: uniform 60 s, dapo 40 s, speed 20 s.
    assert v["speed reaches the target accuracy sooner than uniform"]["status"] == "met"
    assert v["speed reaches the target accuracy sooner than uniform"]["measured"] == pytest.approx(3.0)
    assert v["speed reaches the target accuracy sooner than dapo"]["status"] == "met"
    # 0.62 vs 0.60 over 400 samples each: 2 s.e. is about 0.068.
    assert v["speed final accuracy within noise of uniform"]["status"] == "met"
    share = v["speed useful-token share"]
    assert share["status"] == "missed" and "25% of screened prompts qualified" in share["why"]
    assert "ceiling 0.40" in share["why"] and "82% qualifying" in share["why"] and ">= 27" in share["why"]
    assert v["speed curriculum overhead (share of the training clock)"]["status"] == "missed"
    table = rep.table_markdown(report)
    assert "the paper's claims, checked" in table and "| missed |" in table and "| met |" in table


def test_stock_openrlhf_is_the_first_baseline_in_speedups_and_claims():
    """`off` is what a user runs instead of SPEED: its speedup and the 2x bar come first."""
    runs = {"off": _run([0.3, 0.45, 0.5, 0.6], 15, 400, 0, 0, 0.4, 0.0),
            "uniform": _run([0.3, 0.4, 0.5, 0.6], 30, 400, 0, 0, 0.4, 0.001),
            "speed": _run([0.3, 0.5, 0.6, 0.62], 20, 400, 8, 2, 0.35, 0.0)}
    report = rep.build_report(runs, target=0.5, settings={"n": 4, "n_init": 2})
    # time to 0.5: off 30 s, uniform 60 s, speed 20 s.
    assert list(report["speedups"]) == ["speed_over_off", "speed_over_uniform"]
    assert report["speedups"]["speed_over_off"] == pytest.approx(1.5)
    off = _verdicts(report)["speed reaches the target accuracy sooner than off"]
    assert (off["status"], off["target"]) == ("missed", ">= 2x")
    assert "speedups (time to target): speed_over_off 1.50x, speed_over_uniform 3.00x" in rep.table_markdown(report)


def test_unreached_target_and_unknown_noise_are_not_verdicts():
    runs = {"uniform": _run([0.3, 0.3], 30, 0, 0, 0, 0.3, 0.0), "speed": _run([0.3, 0.6], 20, 0, 4, 4, 0.95, 0.0)}
    report = rep.build_report(runs, target=0.5, settings={"n": 4, "n_init": 2})
    v = _verdicts(report)
    sooner = v["speed reaches the target accuracy sooner than uniform"]
    assert sooner["status"] == "n/a" and sooner["measured"] is None and sooner["why"]
    assert v["speed final accuracy within noise of uniform"]["status"] == "n/a"  # no sample counts logged
    assert v["speed useful-token share"]["status"] == "met"
    assert json.dumps(report["claims"])  # results.json carries them


def test_no_speed_run_means_no_claims():
    runs = {"uniform": _run([0.3, 0.4], 30, 100, 0, 0, 0.3, 0.0)}
    assert rep.build_report(runs, target=0.4)["claims"] == []


def test_target_within_noise_of_the_start_is_not_a_speedup():
    # 64 samples: 2 s.e. at 0.27 is about 0.11, so 0.30 can be reached by noise alone.
    runs = {"uniform": _run([0.27, 0.25, 0.30], 30, 64, 0, 0, 0.4, 0.0),
            "speed": _run([0.27, 0.30, 0.28], 40, 64, 8, 2, 0.4, 0.0)}
    report = rep.build_report(runs, target=None, settings={"n": 4, "n_init": 2})
    assert report["target_accuracy"] == 0.30 and report["target_within_noise"]
    assert "within two standard errors" in report["note"]
    assert report["speedups"]["speed_over_uniform"] == pytest.approx(1.5)  # still logged, but
    sooner = _verdicts(report)["speed reaches the target accuracy sooner than uniform"]
    assert sooner["status"] == "n/a" and "see the note" in sooner["why"]  # not a verdict
    # The same curves over 4000 samples are evidence.
    runs = {n: _run(accs, st, 4000, 8, 2, 0.4, 0.0) for n, accs, st in
            (("uniform", [0.27, 0.25, 0.30], 30), ("speed", [0.27, 0.30, 0.28], 40))}
    report = rep.build_report(runs, target=None, settings={"n": 4, "n_init": 2})
    assert not report["target_within_noise"] and report["note"] is None
    assert _verdicts(report)["speed reaches the target accuracy sooner than uniform"]["status"] == "missed"
