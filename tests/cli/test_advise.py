"""`openrlhf-speed advise` without an engine: its refusals (one line, exit 2, before anything
starts), its flags meaning what training's mean, the cost ratio from a run, and the report
built from a screening's counts. The command with its engine: tests/e2e/test_e2e_cpu_advise.py."""

import json
import os

import numpy as np
import pytest
from _util import REPO, json_differences

from openrlhf_speed.cli import advise
from openrlhf_speed.cli.advise_report import render_report
from openrlhf_speed.curriculum import advice, payoff

SMALL = ["--model", "proving-ci", "--samples", "4", "--rollout.n_samples_per_prompt", "4",
         "--rollout.batch_size", "4", "--rollout.max_new_tokens", "32"]


def _refusal(capsys, argv) -> str:
    assert advise.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("openrlhf-speed advise: error: ") and "\n" not in err, err
    return err


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_fewer_prompts_than_asked_is_refused_naming_the_count_and_the_flag(tmp_path, capsys):
    data = _jsonl(tmp_path / "few.jsonl", [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(3)])
    err = _refusal(capsys, [*SMALL, "--data", data, "--prompts", "5"])
    assert "has 3 usable prompts" in err and "fewer than --prompts 5" in err and "at most 3" in err


def test_rows_without_labels_are_refused(tmp_path, capsys):
    data = _jsonl(tmp_path / "nolabel.jsonl", [{"prompt": "What is 1 + 1?"}, {"prompt": "What is 2 + 2?"}])
    err = _refusal(capsys, [*SMALL, "--data", data, "--prompts", "2"])
    assert "line 1: missing_answer" in err and "--data.label_key" in err


def test_a_flag_combination_training_refuses_is_refused_naming_the_flag(capsys):
    err = _refusal(capsys, [*SMALL, "--speed.n_init", "4"])
    assert "--speed.n_init" in err
    err = _refusal(capsys, [*SMALL, "--speed.pass_rate_low", "0.6", "--speed.pass_rate_high", "0.4"])
    assert "--speed.pass_rate_low (0.6) < --speed.pass_rate_high (0.4)" in err
    err = _refusal(capsys, [*SMALL, "--samples", "1"])
    assert "--samples >= 2" in err


def test_speed_strategy_names_the_baseline_only(capsys):
    with pytest.raises(SystemExit):
        advise.build_parser().parse_args(["--speed.strategy", "speed"])
    assert "invalid choice: 'speed'" in capsys.readouterr().err


def test_training_defaults_for_n_init_and_the_generation_batch():
    args = advise.build_parser().parse_args([])
    s = advise.speed_settings(args, 2.0)
    assert (s.n, s.n_init, s.batch, s.gen_batch, s.baseline) == (24, 4, 16, 32, "off")  # min(4, N // 2), 2 x B
    args = advise.build_parser().parse_args(["--rollout.n_samples_per_prompt", "4", "--speed.max_inflight_prompts", "64",
                                             "--speed.strategy", "dapo"])
    s = advise.speed_settings(args, 2.0)
    assert (s.n_init, s.gen_batch, s.baseline) == (2, 64, "dapo")


def _metrics(tmp_path, steps):
    run = tmp_path / "run"
    run.mkdir()
    records = [{"event": "eval", "step": 0}] + [{"event": "step", **s} for s in steps]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return run


def test_cost_ratio_from_a_run_folder(tmp_path, capsys):
    step = {"timing/generation": 3.0, "timing/make_experience": 1.0, "timing/ppo_train": 4.5, "timing/broadcast": 0.5,
            "speed/tokens_generated": 1000, "speed/tokens_trained": 1000}
    run = _metrics(tmp_path, [step, step])
    ratio, source = advise.cost_ratio(advise.build_parser().parse_args(["--from_run", str(run)]))
    assert ratio == pytest.approx(0.5) and source["steps"] == 2 and source["source"].endswith("metrics.jsonl")
    assert advise.cost_ratio(advise.build_parser().parse_args([]))[0] == 2.0
    err = _refusal(capsys, ["--from_run", str(run), "--cost_ratio", "1"])
    assert "--cost_ratio or --from_run" in err
    err = _refusal(capsys, ["--from_run", str(tmp_path / "missing")])
    assert "--from_run" in err and "metrics.jsonl" in err


def test_the_report_from_a_screening(tmp_path):
    # 8 prompts x S = 8: half never solved, two mixed, two always solved.
    screening = {"correct": [0, 0, 0, 0, 3, 5, 8, 8], "lengths": [40.0] * 4 + [30.0] * 2 + [20.0] * 2,
                 "seconds": 1.0, "tokens": 1000, "reward_statuses": {"correct": 32}}
    levels = ["hard"] * 4 + ["mid"] * 2 + ["easy"] * 2
    s = payoff.Settings(n=16, n_init=4, low=0.0, high=1.0, batch=4, gen_batch=8)
    result = advice.analyse(screening, levels, s, samples=8)
    table = result["difficulty"]
    assert list(table) == ["easy", "mid", "hard", "all"]  # by pass rate, 'all' last
    assert table["all"]["at_S"] == {"never": 0.5, "some": 0.25, "always": 0.25}
    at_n = table["all"]["at_N"]
    # Sixteen samples find more mixed prompts than eight: 'some' can only grow.
    assert at_n["some"]["share"] > 0.25 and sum(v["share"] for v in at_n.values()) == pytest.approx(1.0)
    assert sum(r["observed"] for r in result["histogram"]) == 8
    report = render_report({"model": "m", "data": "d.jsonl", "prompts": 8, "samples": 8, "settings": s.__dict__,
                            "sampling": {"temperature": 1.0}, "screening": screening,
                            "cost_ratio": {"source": "the paper's"}, **result})
    lines = report.splitlines()
    assert lines[-1] == result["verdict"]["line"] and lines[-1].startswith("SPEED ")
    for text in ("Difficulty, 8 samples per prompt", "The same at the training N = 16", "zero-variance share (groups)",
                 "break-even", "step saving", "Assumptions of the model"):
        assert text in report
    json.dumps(result)  # --json prints this very dict
    assert np.isfinite(result["comparison"]["speedup"]["high"])


def test_a_refusal_under_json_leaves_stdout_empty_and_gives_it_back(tmp_path, capfd):
    data = _jsonl(tmp_path / "few.jsonl", [{"prompt": "What is 1 + 1?", "answer": "2"}])
    assert advise.main([*SMALL, "--data", data, "--prompts", "5", "--json"]) == 2
    os.write(1, b"after\n")
    out, err = capfd.readouterr()
    assert out == "after\n"
    assert err.strip().startswith("openrlhf-speed advise: error: ") and "fewer than --prompts 5" in err


V5_START = os.path.join(REPO, "benchmarks", "proving-v5", "advise", "start.json")
V5_SETTINGS = ["--rollout.n_samples_per_prompt", "24", "--speed.n_init", "4", "--speed.max_inflight_prompts", "64"]


def _json_run(capfd, argv) -> dict:
    assert advise.main([*argv, "--json"]) == 0
    return json.loads(capfd.readouterr().out)


def test_a_saved_screening_is_judged_again_at_another_batch_with_the_current_alpha(capfd):
    """No engine: v5's saved screening, judged at B = 4 with SPEED's generation batch 4 x B,
    keeps its counts and gets the calibrated alpha and a verdict of its own."""
    saved = json.load(open(V5_START))
    out = _json_run(capfd, ["--from_screening", V5_START, "--rollout.batch_size", "4",
                            *V5_SETTINGS[:-1], "16", "--samples", "16"])
    assert out["screening"] == saved["screening"] and out["levels"] == saved["levels"]
    assert (out["settings"]["batch"], out["settings"]["gen_batch"]) == (4, 16)
    fit = payoff.alpha_for(4)
    assert out["comparison"]["alpha"] == {k: fit[k] for k in ("low", "point", "high")}
    first = saved.get("screened") or saved  # the published file is itself judged again
    assert out["screened"] == {"from": V5_START, "command": first["command"], "machine": first["machine"]}
    assert first["machine"].startswith("2 Intel Xeon AVX512 cores")
    assert out["verdict"]["pays"] in ("likely", "even", "unlikely") and out["verdict"]["line"].startswith("SPEED ")
    assert advise.main(["--from_screening", V5_START, *V5_SETTINGS]) == 0
    assert "judged again with these settings (screened on 2 Intel Xeon AVX512" in capfd.readouterr().out


def test_a_saved_screening_cannot_be_redrawn_or_resampled(tmp_path, capsys):
    err = _refusal(capsys, ["--from_screening", V5_START, "--samples", "8"])
    assert "--samples with --from_screening" in err and "(16)" in err and "screen again" in err
    err = _refusal(capsys, ["--from_screening", V5_START, "--rollout.temperature", "0.6"])
    assert "--rollout.temperature with --from_screening" in err and "(1.0)" in err
    err = _refusal(capsys, ["--from_screening", V5_START, "--data", "other.jsonl"])
    assert "--data with --from_screening" in err
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"model": "m", "screening": {}}))
    err = _refusal(capsys, ["--from_screening", str(partial)])
    assert "lacks data, prompts" in err and "advise --json" in err
    err = _refusal(capsys, ["--from_screening", str(tmp_path / "missing.json")])
    assert "cannot read it" in err


@pytest.mark.parametrize("path", [V5_START, *(os.path.join(REPO, "benchmarks", "regime", "advise", f"{c}.json")
                                               for c in ("high-b4", "high", "low"))],
                         ids=["v5-start", "high-b4", "high", "low"])
def test_the_published_verdicts_are_the_current_calibrations(path):
    """docs/advise.md and the README quote these verdicts (v5's start model at B = 16, the high
    mix at B = 4 and 16, the low mix at B = 16): each must be what advise says today of its screening (re-read it with
    --from_screening after each refit of alpha)."""
    saved = json.load(open(path))
    s = payoff.Settings(**saved["settings"])
    again = advice.analyse(saved["screening"], saved["levels"], s, saved["samples"], saved["prior"]["name"])
    # To the last few bits, not bit for bit: numpy's sums take another order on another SIMD width
    # (an AMX host moved step_cost from ...977 to ...974), which no figure that is read can show.
    assert json_differences(json.loads(json.dumps(again["comparison"])), saved["comparison"], rel=1e-12, abs_tol=0.0) == []
    assert saved["verdict"] == again["verdict"]


def test_the_high_mix_predictions_bracket_what_its_cells_measured():
    """docs/advise.md says advise's range on the high mix's saved screening holds the projected
    speedup its cells measured (in-sample: these cells are in the alpha fit; the map's
    leave-one-cell-out table is the out-of-sample check)."""
    rows = {r["cell"]: r for r in json.load(open(os.path.join(REPO, "benchmarks", "regime", "regime.json")))["rows"]}
    for name, cells in (("high-b4", ("high-b4", "high-b4-avx512-amx")), ("high", ("high-avx512-amx",))):
        speedup = json.load(open(os.path.join(REPO, "benchmarks", "regime", "advise", f"{name}.json")))["comparison"]["speedup"]
        for cell in cells:
            measured = rows[cell]["speed_over_off"]["projected"]
            assert speedup["low"] <= measured["point"] <= speedup["high"], (name, cell)
