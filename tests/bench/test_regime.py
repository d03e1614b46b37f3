"""The regime map's cell figures (bench/regime.py) and the map over cells (bench/regime_map.py),
on hand-computed runs: what a user reads off the map must be what the runs say."""

import json
import math
import os

import pytest

from _bench_fakes import _data, _fake_train
from _util import REPO

from openrlhf_speed.bench import regime as rg
from openrlhf_speed.bench import regime_map as rm
from openrlhf_speed.bench import run as bench_run
from openrlhf_speed.curriculum import payoff


def _run(accs, step_s, gen=100.0, discarded=0.0, useful=None, gen_s=1.0):
    """A run of len(accs) - 1 steps of step_s seconds, evaluated every step (accs[0] at step 0)."""
    steps = [{"event": "step", "step": i, "train_wall_s": i * step_s, "speed/tokens_generated": gen,
              "speed/tokens_discarded": discarded, "speed/tokens_trained": gen - discarded,
              "speed/tokens_useful": (gen - discarded) if useful is None else useful,
              "timing/generation": gen_s, "timing/ppo_train": 1.0} for i in range(1, len(accs))]
    evals = [{"event": "eval", "step": i, "train_wall_s": i * step_s, "eval_accuracy": a} for i, a in enumerate(accs)]
    return {"steps": steps, "evals": evals}


def test_steps_and_accuracy_are_read_between_evaluations():
    run = _run([0.3, 0.4, 0.6], 10.0)
    assert rg.steps_to(run, 0.5) == (1.5, True)
    assert rg.steps_to(run, 0.9) == (2.0, False)  # never reached: the whole horizon, flagged
    assert rg.accuracy_at(run["evals"], 15.0) == (pytest.approx(0.5), True)
    assert rg.accuracy_at(run["evals"], 99.0) == (0.6, False)  # ended sooner: its last evaluation


def test_the_ceiling_prices_discarded_generation_at_zero():
    run = _run([0.3, 0.4, 0.6], 10.0, gen=300.0, discarded=200.0, gen_s=3.0)
    # projected: each step 1 s/token x (100 trained + 2 x 300 generated) = 700; without discards 300
    assert rg.ceiling_clock(run["steps"], 2.0, 1.0) == [0.0, 300.0, 600.0]
    # measured: each step's 3 s of generation, two thirds of it on discarded tokens, comes off
    assert rg.measured_ceiling_clock(run["steps"]) == pytest.approx([0.0, 8.0, 16.0])


def test_informative_share_and_alpha():
    off = _run([0.3, 0.4, 0.5], 10.0, useful=50.0)  # half its trained tokens carry no gradient
    assert rg.informative_share(off["steps"]) == pytest.approx(0.5)
    # off takes 4 steps, ours 2, with twice the informative share: step ratio 2 = rho^1
    assert rg._alpha([4.0], [2.0], [0.5], [1.0]) == pytest.approx(1.0)
    assert rg._alpha([4.0], [4.0], [0.5], [1.0]) == pytest.approx(0.0)
    assert math.isnan(rg._alpha([4.0], [2.0], [1.0], [1.0]))  # no informative gain: alpha undefined
    # A curriculum at the target from step 0, or an off without one informative group (a
    # one-step CI bench): no alpha and no rho, and the report still writes.
    assert math.isnan(rg._alpha([4.0], [0.0], [0.5], [1.0])) and math.isnan(rg._alpha([4.0], [2.0], [0.0], [1.0]))


def test_a_one_step_benchmark_gets_its_report_without_alpha():
    runs = {"off-r1": _run([0.3, 0.35], 10.0, useful=0.0), "dapo-r1": _run([0.3, 0.3], 30.0),
            "speed-r1": _run([0.3, 0.4], 12.0)}
    groups = {k: k.split("-")[0] for k in runs}
    clocks = {k: rg.aggregate.projected_clock(r["steps"], 2.0, 1.0) for k, r in runs.items()}
    c = rg.cell(runs, groups, 0.3, {"batch": 4, "n": 4}, {"ratio": 2.0, "s_per_train_token": 1.0}, clocks)
    assert c["steps_to_target"]["speed"] == [0.0] and c["alpha"] is None and c["rho"] is None


def test_cell_on_hand_runs():
    runs = {"off-r1": _run([0.3, 0.35, 0.4, 0.45, 0.5], 10.0, useful=50.0),
            "off-r2": _run([0.3, 0.35, 0.4, 0.45, 0.5], 10.0, useful=50.0),
            "dapo-r1": _run([0.3, 0.4, 0.5, 0.5, 0.5], 30.0, gen=300.0, discarded=200.0, gen_s=3.0),
            "dapo-r2": _run([0.3, 0.4, 0.5, 0.5, 0.5], 30.0, gen=300.0, discarded=200.0, gen_s=3.0),
            "speed-r1": _run([0.3, 0.4, 0.5, 0.5, 0.5], 12.0, gen=150.0, discarded=50.0),
            "speed-r2": _run([0.3, 0.4, 0.5, 0.5, 0.5], 12.0, gen=150.0, discarded=50.0)}
    groups = {k: k.split("-")[0] for k in runs}
    model = {"ratio": 2.0, "s_per_train_token": 1.0}
    clocks = {k: rg.aggregate.projected_clock(r["steps"], 2.0, 1.0) for k, r in runs.items()}
    c = rg.cell(runs, groups, 0.5, {"batch": 4, "n": 24}, model, clocks)
    assert c["steps_to_target"] == {"off": [4.0, 4.0], "dapo": [2.0, 2.0], "speed": [2.0, 2.0]}
    assert c["step_ratio"]["point"] == pytest.approx(2.0) and c["rho"]["point"] == pytest.approx(2.0)
    assert c["alpha"]["point"] == pytest.approx(1.0) and not c["alpha"]["at_least"]
    # projected: off 4 x 300 = 1200; DAPO's 2 steps at 100 + 2 x 100 kept = 600: ceiling 2x
    assert c["ceiling"]["projected"]["point"] == pytest.approx(2.0)
    # SPEED's 2 steps at 100 + 2 x 100 kept (its screenings free) = 600: also 2x
    assert c["discards_free"]["projected"]["point"] == pytest.approx(2.0)
    # measured: off 40 s; DAPO 60 s less 2 x 2 s of discarded generation = 56 s
    assert c["ceiling"]["measured"]["point"] == pytest.approx(40 / 56)
    assert c["budget"]["clock_s"] == 40.0 and c["budget"]["accuracy"]["speed"] == pytest.approx(0.5)
    assert c["budget"]["accuracy"]["dapo"] == pytest.approx(0.4 + 0.1 * 10 / 30)
    assert rg.share_of_ceiling({"point": 1.5}, c["ceiling"]["projected"]) == pytest.approx(0.75)
    assert any("alpha" in line for line in rg.markdown(c, None))
    # without DAPO runs there is no cell
    assert rg.cell({k: v for k, v in runs.items() if "dapo" not in k}, groups, 0.5, {}, model, clocks) is None


def _row(name, step_ratio, rho, se=0.05, batch=16, speedup=1.0):
    w = 1.96 * se
    sr = {"point": step_ratio, "low": step_ratio * math.exp(-w), "high": step_ratio * math.exp(w)}
    return {"cell": name, "batch": batch, "step_ratio": sr, "rho": {"point": rho},
            "speed_over_off": {"projected": {"point": speedup}}}


def test_alpha_is_fitted_through_the_origin_with_the_cells_spread():
    rows = [_row("a", 2 ** 0.5, 2.0), _row("b", 3 ** 0.5, 3.0)]
    fit = rm.fit_alpha(rows)
    assert fit["point"] == pytest.approx(0.5) and fit["birge"] == 1.0
    assert fit["low"] < 0.5 < fit["high"]
    # two cells that disagree widen the interval by their dispersion
    wide = rm.fit_alpha([_row("a", 2 ** 0.2, 2.0), _row("b", 2 ** 0.8, 2.0)])
    assert wide["point"] == pytest.approx(0.5) and wide["birge"] > 1.0
    assert wide["high"] - wide["low"] > fit["high"] - fit["low"]
    one = rm.fit_alpha(rows[:1])  # one cell: its own alpha and interval
    assert one["point"] == pytest.approx(0.5) and one["low"] == pytest.approx(0.5 - 1.96 * 0.05 / math.log(2))
    assert rm.fit_alpha([]) is None


def test_alpha_is_fitted_per_batch_and_each_cell_is_predicted_from_the_nearest_batch():
    """Alpha rises as the batch falls (large-batch training): a cell at B = 4 is predicted from
    the other B = 4 cells, and from the B = 16 ones only when it is the only one of its batch."""
    rows = [_row("a", 2 ** 0.3, 2.0), _row("b", 3 ** 0.3, 3.0), _row("c", 2 ** 0.6, 2.0, batch=4, speedup=1.3),
            _row("d", 3 ** 0.6, 3.0, batch=4, speedup=1.5)]
    fits = rm.fit_by_batch(rows)
    assert [(f["batch"], f["cells"]) for f in fits] == [(16, ["a", "b"]), (4, ["c", "d"])]
    assert fits[0]["point"] == pytest.approx(0.3) and fits[1]["point"] == pytest.approx(0.6)
    loo = {x["cell"]: x for x in rm.leave_one_out(rows)}
    assert loo["c"]["alpha_others"]["batch"] == 4 and loo["c"]["alpha_others"]["point"] == pytest.approx(0.6)
    assert loo["c"]["predicted"]["point"] == pytest.approx(1.3)  # kappa = 2^0.6 / 1.3
    alone = {x["cell"]: x for x in rm.leave_one_out(rows[:3])}
    assert alone["c"]["alpha_others"]["batch"] == 16 and alone["c"]["error"] < 0  # B = 16's alpha under-predicts
    assert payoff.alpha_for(256, {16: {"point": 0.3}, 4: {"point": 0.6}})["batch"] == 16
    assert payoff.alpha_for(8, {16: {"point": 0.3}, 4: {"point": 0.6}})["batch"] == 16  # between: the cautious one
    assert payoff.alpha_for(5, {16: {"point": 0.3}, 4: {"point": 0.6}})["batch"] == 4


def test_leave_one_out_predicts_each_cell_from_the_others():
    rows = [_row("a", 2 ** 0.5, 2.0, speedup=1.0), _row("b", 3 ** 0.5, 3.0, speedup=1.2),
            _row("c", 4 ** 0.5, 4.0, speedup=1.1)]
    loo = rm.leave_one_out(rows)
    assert [x["cell"] for x in loo] == ["a", "b", "c"]
    # every cell sits on alpha = 0.5: the others predict its own step ratio, so speedup x kappa
    a = loo[0]
    assert a["alpha_others"]["point"] == pytest.approx(0.5)
    kappa = 2 ** 0.5 / 1.0
    assert a["predicted"]["point"] == pytest.approx(2 ** 0.5 / kappa) and a["error"] == pytest.approx(0.0)


def test_a_cell_is_left_out_with_its_copies_on_other_hosts():
    """Leave one cell out means every host's copy of it: with its twin in the fit, high-b4 on a
    second host would be predicted from its own mix and seeds, an in-sample check."""
    rows = [{**_row("a", 2 ** 0.3, 2.0), "folder": "proving/avx512"},
            {**_row("a-avx2", 2 ** 0.3, 2.0), "folder": "proving/avx2"},
            {**_row("b", 2 ** 0.6, 2.0, batch=4, speedup=1.3), "folder": "high-b4/avx2"},
            {**_row("b-amx", 2 ** 0.6, 2.0, batch=4, speedup=1.3), "folder": "high-b4/avx512-amx"},
            {**_row("c", 3 ** 0.2, 3.0), "folder": "v5/avx512"}]
    loo = {x["cell"]: x for x in rm.leave_one_out(rows)}
    # b's twin is out too: B = 16's alpha predicts it, not b-amx's 0.6
    assert loo["b"]["alpha_others"]["batch"] == 16 and loo["b-amx"]["alpha_others"]["batch"] == 16
    assert loo["b"]["alpha_others"]["cells"] == ["a", "a-avx2", "c"]
    assert loo["a"]["alpha_others"]["cells"] == ["c"] and loo["a"]["alpha_others"]["point"] == pytest.approx(0.2)
    assert loo["c"]["alpha_others"]["cells"] == ["a", "a-avx2"]
    # rows without a folder (a cell given by hand) are each their own experiment
    assert [x["alpha_others"]["cells"] for x in rm.leave_one_out([_row("x", 2 ** 0.5, 2.0), _row("y", 3 ** 0.5, 3.0)])] == [
        ["y"], ["x"]]


def test_published_alpha_is_the_fit_of_the_published_cells():
    """advise's alpha (payoff.ALPHA) is what `openrlhf-speed regime-map` fits, batch by batch,
    on the cells it publishes."""
    published = json.load(open(REPO / "benchmarks" / "regime" / "regime.json"))
    fits = rm.fit_by_batch(published["rows"])
    assert [f["batch"] for f in fits] == list(payoff.ALPHA)
    for f in fits:
        mine = payoff.ALPHA[f["batch"]]
        assert tuple(round(f[k], 2) for k in ("point", "low", "high")) == tuple(mine[k] for k in ("point", "low", "high"))
        assert tuple(mine["cells"]) == tuple(f["cells"])


def test_cell_modes_train_on_their_mix_with_the_papers_ratios(tmp_path):
    from openrlhf_speed.proving import mixes

    args = bench_run.build_parser().parse_args(["--mode", "proving-high-b4", "--out", str(tmp_path)])
    s = bench_run._settings(args)
    assert (args.model, args.runs, args.target_rule) == ("proving", 3, "off_final")
    assert args.curricula == "off,dapo,speed,speed_seq+level,speed_thin+level"
    assert (s["batch"], s["n"], s["n_init"], s["steps"], s["warmup"]) == (4, 24, 4, 200, 20)
    train, _ = bench_run._data(args, s, str(tmp_path))
    assert train == mixes.mix_path("high")
    cmd = bench_run.train_command("speed", s, args, train, train, str(tmp_path / "speed-r1"))
    assert cmd[cmd.index("--speed.max_inflight_prompts") + 1] == "16"  # SPEED's generation batch 4 x B
    seq = bench_run.train_command("speed_seq+level", s, args, train, train, str(tmp_path / "x"))
    assert seq[seq.index("--speed.strategy") + 1] == "speed_seq" and seq[seq.index("--speed.prior_key") + 1] == "level"
    thin = bench_run.train_command("speed_thin+level", s, args, train, train, str(tmp_path / "y"))
    assert thin[thin.index("--speed.strategy") + 1] == "speed_thin" and thin[thin.index("--speed.prior_key") + 1] == "level"
    assert "--speed.prior_key" not in cmd
    paced = bench_run.train_command("speed_keep+level+pace2", s, args, train, train, str(tmp_path / "z"))
    assert paced[paced.index("--speed.prior_key") + 1] == "level"
    assert paced[paced.index("--speed.pace_batches") + 1] == "2" and "--speed.pace_batches" not in cmd
    with pytest.raises(SystemExit, match="at most one prior key and one pace"):
        bench_run.train_command("speed+level+source", s, args, train, train, str(tmp_path / "w"))
    low = bench_run.build_parser().parse_args(["--mode", "proving-low", "--out", str(tmp_path)])
    assert bench_run._data(low, bench_run._settings(low), str(tmp_path))[0] == mixes.mix_path("low")


def test_max_runs_stops_a_sitting_and_resume_goes_on(tmp_path, monkeypatch, capsys):
    trained = []
    monkeypatch.setattr(bench_run, "_run_logged", _fake_train(trained))
    argv = ["--mode", "tiny", "--curricula", "uniform,dapo,speed", "--target", "0.4", "--out", str(tmp_path / "out"),
            *_data(tmp_path), "--max_runs", "2"]
    monkeypatch.setattr(bench_run, "_engine_throughput", lambda *a: pytest.fail("measured before the last run"))
    assert bench_run.main(argv) == 0
    assert trained == ["uniform", "dapo"]
    assert "--max_runs 2: stopped before speed; go on with --resume" in capsys.readouterr().out
    monkeypatch.setattr(bench_run, "_engine_throughput", lambda *a: {"tokens_per_s": 1.0, "tokens": 1,
                                                                     "generation_s": 1.0})
    assert bench_run.main(argv + ["--resume"]) == 0
    assert trained == ["uniform", "dapo", "speed"]
    with pytest.raises(SystemExit, match="--max_runs 0"):
        bench_run.main(argv[:-1] + ["0"])


def test_the_published_map_is_what_its_cells_rebuild():
    """benchmarks/regime/regime.json, docs/regime/regime.md and the README's table are what
    `openrlhf-speed regime-map` makes of the published cells' runs: no figure copied by hand."""
    published = json.load(open(os.path.join(REPO, "benchmarks", "regime", "regime.json")))
    rebuilt = json.loads(json.dumps(rm.build(), default=float))
    assert [r["cell"] for r in rebuilt["rows"]] == [r["cell"] for r in published["rows"]]
    assert rm.markdown(rebuilt) == rm.markdown(published)
    assert open(os.path.join(REPO, "docs", "regime", "regime.md")).read() == rm.markdown(published) + "\n"
    readme = open(os.path.join(REPO, "README.md")).read()
    assert rm.with_readme_table(readme, published) == readme


def test_each_cell_names_its_data_mix():
    """The README quotes the cells of one mix at a batch (`rows[*mix=full]`): a cell of the
    hard mix joining B = 16 must not move a figure about the proving ground's whole set."""
    assert rm.mix_of({"train_data": "/root/.cache/openrlhf_speed/mixes/high-a2450401e4e8/train.jsonl"}) == "high"
    assert rm.mix_of({"train_data": "/x/proving/shipped/proving-full-v5/data/train.jsonl"}) == "full"
    published = json.load(open(os.path.join(REPO, "benchmarks", "regime", "regime.json")))
    mixes = {r["cell"]: r["mix"] for r in published["rows"]}
    assert (mixes["v4"], mixes["v5"], mixes["high-b4"], mixes["high-b4-avx512-amx"]) == ("full", "full", "high", "high")


def test_a_readme_without_the_block_is_refused():
    with pytest.raises(ValueError, match="no block between"):
        rm.with_readme_table("# no table here\n", {"rows": []})


def _successor_report():
    """A cell's report with speed_seq beside off, DAPO and SPEED, one hand-computed run each."""
    runs = {"off-r1": _run([0.3, 0.35, 0.4, 0.45, 0.5], 10.0, useful=50.0),
            "dapo-r1": _run([0.3, 0.4, 0.5, 0.5, 0.5], 30.0, gen=300.0, discarded=200.0, gen_s=3.0),
            "speed-r1": _run([0.3, 0.4, 0.5, 0.5, 0.5], 12.0, gen=150.0, discarded=50.0),
            "speed_seq-r1": _run([0.3, 0.4, 0.5, 0.5, 0.5], 11.0, gen=125.0, discarded=25.0),
            "dapo+pace2-r1": _run([0.3, 0.4, 0.5, 0.5, 0.5], 25.0, gen=250.0, discarded=150.0, gen_s=2.5)}
    groups = {k: k.split("-")[0] for k in runs}
    clocks = {k: rg.aggregate.projected_clock(r["steps"], 2.0, 1.0) for k, r in runs.items()}
    c = rg.cell(runs, groups, 0.5, {"batch": 4, "n": 24}, {"ratio": 2.0, "s_per_train_token": 1.0}, clocks)

    def ratios(name, off, dapo):
        return {"ratios": {f"{name}_over_off": {"measured": {"point": off, "low": off - 0.1, "high": off + 0.1},
                                                 "projected_linear": {"point": off, "low": off - 0.1, "high": off + 0.1}},
                           f"{name}_over_dapo": {"measured": {"point": dapo, "low": dapo - 0.1, "high": dapo + 0.1},
                                                  "projected_linear": {"point": dapo, "low": dapo - 0.1, "high": dapo + 0.1}}}}

    return {"regime": c, "headline": ratios("speed", 1.5, 1.2),
            "headlines": {"speed": ratios("speed", 1.5, 1.2), "speed_seq": ratios("speed_seq", 1.8, 1.44)}}


def test_a_curriculum_beyond_speed_gets_its_row_in_the_map(tmp_path):
    """speed_seq beside SPEED in a cell: the map gives its speedups, its discarded share, its
    share of the ceiling and its projected speedup over SPEED's, and draws it."""
    report = _successor_report()
    c = report["regime"]
    r = rm.row("cell", "avx512-nobf16", report)
    seq = r["successors"]["speed_seq"]
    # off, DAPO and SPEED are the map's own columns; DAPO paced is a baseline run another way
    assert list(r["successors"]) == ["speed_seq"] and "dapo+pace2" in c["curricula"]
    assert seq["over_speed_projected"] == pytest.approx(1.8 / 1.5)
    assert seq["discarded_share"] == pytest.approx(25 / 125) and c["curricula"]["speed"]["discarded_share"] == pytest.approx(1 / 3)
    assert seq["share_of_ceiling"]["projected"] == pytest.approx(1.8 / c["ceiling"]["projected"]["point"])
    text = rm.markdown({"rows": [r]})
    assert "| cell | speed_seq | 1.80x [1.70-1.90] / 1.80x [1.70-1.90] | 1.44x [1.34-1.54] / 1.44x [1.34-1.54] | 1.20x | 0.20 (0.33) |" in text
    assert rm.plot({"rows": [r]}, str(tmp_path / "map.png")) and (tmp_path / "map.png").stat().st_size > 0


def test_a_cell_published_run_by_run_joins_the_map_when_off_dapo_and_speed_have_3_runs(tmp_path, monkeypatch):
    """Each sitting publishes its run (the evidence must outlive the machine); the map takes the
    cell once it plans off, DAPO and SPEED and each has 3 finished runs (all of them where it
    plans fewer). A curriculum beyond them joins the cell's row only with its own 3 runs."""
    def plan(*keys):
        return {"plan": [{"key": k, "curriculum": k.split("-")[0], "run": int(k[-1]), "seed": 41 + int(k[-1])}
                         for k in keys]}

    def done(*keys):
        return {"runs_summary": {k: {} for k in keys}}

    assert rm.cell_missing(plan("off-r1", "off-r2", "off-r3"), done("off-r1")) == [
        "curriculum dapo", "curriculum speed", "2 off run(s)"]
    four = plan(*[f"{c}-r{i}" for c in ("off", "dapo", "speed", "speed_seq") for i in (1, 2, 3, 4)])
    three = [f"{c}-r{i}" for c in ("off", "dapo", "speed") for i in (1, 2, 3)]
    assert rm.cell_missing(four, done(*three[:-1])) == ["1 speed run(s)"]
    assert rm.runs_short(four, done(*three[:-1])) == {"speed": 1, "speed_seq": 3}
    assert rm.cell_missing(four, done(*three)) == []
    assert rm.cell_missing(plan("off-r1", "dapo-r1", "speed-r1"), done("off-r1", "dapo-r1", "speed-r1")) == []
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "bench.json").write_text(json.dumps(four))
    (cell / "results.json").write_text(json.dumps(done(*three[:-1])))
    assert rm.load_cell(str(cell)) is None
    assert rm.pending([("c", "cell", "kind")], tmp_path) == [("c", ["1 speed run(s)"])]
    assert rm.build([("c", "cell", "kind")], tmp_path)["rows"] == []

    # SPEED's third run lands, speed_seq has 2: the cell is mapped, speed_seq waits for its third
    monkeypatch.setattr(rm, "cell_report", lambda meta, d, folder: _successor_report())
    (cell / "results.json").write_text(json.dumps(done(*three, "speed_seq-r1", "speed_seq-r2")))
    m = rm.build([("c", "cell", "kind")], tmp_path)
    assert [r["cell"] for r in m["rows"]] == ["c"] and m["pending"] == []
    assert m["rows"][0]["successors"] == {} and m["later"] == [("c", {"speed_seq": 1})]
    assert "beyond SPEED" not in rm.markdown(m)
    (cell / "results.json").write_text(json.dumps(done(*three, "speed_seq-r1", "speed_seq-r2", "speed_seq-r3")))
    m = rm.build([("c", "cell", "kind")], tmp_path)
    assert list(m["rows"][0]["successors"]) == ["speed_seq"] and m["later"] == []


def test_a_cell_is_read_from_every_cpu_kind_it_was_published_for(tmp_path):
    """The sessions that run a cell do not choose their machine: each kind's runs go to their
    own folder, and the map reads every one."""
    for kind in ("avx512-nobf16", "avx2"):
        (tmp_path / "regime" / "high-b4" / kind).mkdir(parents=True)
    (tmp_path / "regime" / "low" / "avx2").mkdir(parents=True)
    for sub in ("avx512-amx", "advise"):  # advise's predictions are published beside v5's kinds
        (tmp_path / "proving-v5" / sub).mkdir(parents=True)
    cells = [("v5", "proving-v5/avx512", "avx512"), ("v5", "proving-v5", None), ("high-b4", "regime/high-b4", None),
             ("low", "regime/low", None), ("high", "regime/high", None)]
    # a copy on a second kind is named for its kind, so that no figure quoted as high-b4's can
    # come from the other copy; a cell on one kind keeps its name, one not published is absent
    assert rm.expand(cells, tmp_path) == [("v5", "proving-v5/avx512", "avx512"),
                                          ("v5-avx512-amx", "proving-v5/avx512-amx", "avx512-amx"),
                                          ("high-b4-avx2", "regime/high-b4/avx2", "avx2"),
                                          ("high-b4-avx512-nobf16", "regime/high-b4/avx512-nobf16", "avx512-nobf16"),
                                          ("low", "regime/low/avx2", "avx2")]
    # the first copy keeps the bare name by an entry of its own
    assert rm.expand([("high-b4", "regime/high-b4/avx2", "avx2"), *cells[2:3]], tmp_path) == [
        ("high-b4", "regime/high-b4/avx2", "avx2"),
        ("high-b4-avx512-nobf16", "regime/high-b4/avx512-nobf16", "avx512-nobf16")]


def test_a_cell_short_of_runs_on_a_second_kind_is_named_with_its_kind(tmp_path):
    """high-b4 published whole on AVX2 and begun on an AMX host: what the second lacks must
    not read as the first's."""
    for kind in ("avx2", "avx512-amx"):
        folder = tmp_path / "regime" / "high-b4" / kind
        folder.mkdir(parents=True)
        (folder / "bench.json").write_text(json.dumps({"curricula": ["off", "dapo", "speed"], "plan": [
            {"key": f"{c}-r1", "curriculum": c, "run": 1, "runs": 1, "seed": 42} for c in ("off", "dapo", "speed")]}))
        (folder / "results.json").write_text(json.dumps({"runs_summary": {"off-r1": {}}}))
    assert rm.pending([("high-b4", "regime/high-b4", None)], tmp_path) == [
        ("high-b4-avx2", ["1 dapo run(s)", "1 speed run(s)"]), ("high-b4-avx512-amx", ["1 dapo run(s)", "1 speed run(s)"])]


def test_a_cell_with_one_run_of_a_curriculum_reports_its_point_without_an_interval():
    """The sitting after SPEED's first run: its speedups are a point with a verdict and no
    interval yet, and the cell's report prints them (a KeyError there once failed a sitting
    after the run had finished)."""
    runs = {"off-r1": _run([0.3, 0.35, 0.4, 0.45, 0.5], 10.0, useful=50.0),
            "off-r2": _run([0.3, 0.35, 0.4, 0.45, 0.5], 11.0, useful=50.0),
            "dapo-r1": _run([0.3, 0.4, 0.5, 0.5, 0.5], 30.0, gen=300.0, discarded=200.0, gen_s=3.0),
            "speed-r1": _run([0.3, 0.4, 0.5, 0.5, 0.5], 12.0, gen=150.0, discarded=50.0)}
    groups = {k: k.split("-")[0] for k in runs}
    clocks = {k: rg.aggregate.projected_clock(r["steps"], 2.0, 1.0) for k, r in runs.items()}
    c = rg.cell(runs, groups, 0.5, {"batch": 4, "n": 24}, {"ratio": 2.0, "s_per_train_token": 1.0}, clocks)
    one = {"verdict": "not resolved (one run of a curriculum)"}
    headline = {"ratios": {"speed_over_off": {"measured": {"point": 1.05, **one}, "projected_linear": {"point": 1.17, **one}}}}
    text = "\n".join(rg.markdown(c, {"speed": headline}))
    assert "SPEED 1.05x, not resolved (one run of a curriculum)" in text
    assert "SPEED 1.17x, not resolved (one run of a curriculum)" in text
    assert rg.format_ci({"point": 1.19, "low": 1.04, "high": 1.39}) == "1.19x [1.04-1.39]"
    unreached = {"verdict": "not measured (a run of ours did not reach the level)"}
    assert rg.table_ci(unreached) == "not reached" and rg.format_ci(unreached) == unreached["verdict"]
    assert rg.table_ci({"point": 1.19, "low": 1.04, "high": 1.39}) == "1.19x [1.04-1.39]"


def test_a_curriculum_whose_engines_decode_slower_is_told_what_the_projection_leaves_out():
    """speed_seq's second half-screen is a smaller batch and another round trip: its engines
    decode fewer tokens a second than SPEED's on the same host, which the projection (tokens
    alone) does not charge. The rate is over each run's own evaluation speed, so a host that
    slowed down between runs does not read as a slower curriculum."""
    def timed(run, host_tok_s):
        for e in run["evals"]:
            e.update(eval_num_samples=10, eval_response_length_mean=10.0, eval_time_s=100.0 / host_tok_s)
        return run

    runs = {"off-r1": timed(_run([0.3, 0.35, 0.4, 0.45, 0.5], 10.0, useful=50.0), 100.0),
            "dapo-r1": timed(_run([0.3, 0.4, 0.5, 0.5, 0.5], 30.0, gen=300.0, discarded=200.0, gen_s=3.0), 100.0),
            # SPEED: 150 tokens in 1 s of generation on a 100 tok/s host; speed_seq: 150 in 2 s on a
            # host that ran at half the speed (50 tok/s): the same rate, 1.5x its host
            "speed-r1": timed(_run([0.3, 0.4, 0.5, 0.5, 0.5], 12.0, gen=150.0, discarded=50.0), 100.0),
            "speed_seq-r1": timed(_run([0.3, 0.4, 0.5, 0.5, 0.5], 11.0, gen=150.0, discarded=25.0, gen_s=2.0), 50.0),
            "speed_seq-r2": timed(_run([0.3, 0.4, 0.5, 0.5, 0.5], 11.0, gen=150.0, discarded=25.0, gen_s=2.0), 100.0)}
    groups = {k: k.split("-")[0] for k in runs}
    clocks = {k: rg.aggregate.projected_clock(r["steps"], 2.0, 1.0) for k, r in runs.items()}
    c = rg.cell(runs, groups, 0.5, {"batch": 4, "n": 24}, {"ratio": 2.0, "s_per_train_token": 1.0}, clocks)
    assert rg.engine_rate(runs["speed-r1"]) == pytest.approx(1.5)
    assert rg.engine_rate(runs["speed_seq-r1"]) == pytest.approx(1.5)
    assert c["curricula"]["speed_seq"]["engine_rate"] == pytest.approx((1.5 + 0.75) / 2)
    text = "\n".join(rg.markdown(c, None))
    assert "its engines decode 0.75x SPEED's tokens a second of the same host" in text
    assert rm.row("cell", "avx2", {"regime": c})["successors"]["speed_seq"]["engine_rate_vs_speed"] == pytest.approx(0.75)
    # a run whose evaluations carry no timings: no host speed, so no rate and no claim
    assert rg.engine_rate(_run([0.3, 0.5], 10.0)) is None


def test_a_cell_where_a_speed_run_never_reached_stays_on_the_map(tmp_path):
    """A SPEED run under the target leaves the cell without SPEED's speedups: the tables say
    'not reached' (not the verdict's whole sentence), and the plot still draws the cell's ceiling."""
    report = _successor_report()
    r = rm.row("cell", "avx512-amx", report)
    unreached = {"verdict": "not measured (a run of ours did not reach the level)"}
    r["speed_over_off"] = {"measured": unreached, "projected": unreached}
    r["speed_over_dapo"] = {"measured": unreached, "projected": unreached}
    assert "| cell | avx512-amx | 4 | " in rm.readme_table({"rows": [r]})
    assert "not reached / not reached | not reached / not reached |" in rm.readme_table({"rows": [r]})
    assert rm.plot({"rows": [r]}, str(tmp_path / "map.png")) and (tmp_path / "map.png").stat().st_size > 0
    r["ceiling"] = {"measured": unreached, "projected": unreached}
    assert rm.plot({"rows": [r]}, str(tmp_path / "none.png")) is None  # nothing to draw: no figure at all


def test_a_ceiling_reads_as_one_in_every_table_and_stays_out_of_the_fit(tmp_path):
    """A SPEED run under the target and `off`'s all over it: SPEED's speedup is an upper bound.
    Every table prints it and the share of the ceiling computed from it with '<=', the plot
    marks it, and neither the leave-one-out check nor the ratio to a successor uses it as a
    measured point."""
    report = _successor_report()
    r = rm.row("cell", "avx512-amx", report)
    top = {"point": 0.82, "low": 0.74, "high": 0.90, "at_most": True, "verdict": "slower, a ceiling (1/3 runs ...)"}
    r["speed_over_off"] = {"measured": top, "projected": top}
    r["share_of_ceiling"] = {"measured": 0.8, "projected": 0.8}
    assert rg.format_ci(top) == "<=0.82x [0.74-0.90]" and rg.table_ci(top) == "<=0.82x [0.74-0.90]"
    assert "<=0.82x [0.74-0.90] / <=0.82x [0.74-0.90]" in rm.readme_table({"rows": [r]})
    assert rm.readme_table({"rows": [r]}).endswith("| <=80% |")
    assert rg.share_text(0.8, top) == "<=80%" and rg.share_text(0.8, {"point": 0.82}) == "80%"
    assert rg.share_text(None, top) == "-"
    assert rm.step_cost(r) is None  # so leave_one_out skips the cell
    assert rm.plot({"rows": [r]}, str(tmp_path / "map.png")) and (tmp_path / "map.png").stat().st_size > 0
    name = next(iter(r["successors"]))
    mine = r["successors"][name]["over_off"]["projected"]
    assert mine and "point" in mine
    # the successor against a SPEED ceiling: its over-SPEED ratio has no direction, so none is given
    again = rm.successors(report, report["regime"], {"projected": top})
    assert again[name]["over_speed_projected"] is None
    # a successor under the target: its own share is printed as a bound in the successors' table
    report["headlines"][name]["ratios"][f"{name}_over_off"]["projected_linear"]["at_most"] = True
    r = rm.row("cell", "avx512-amx", report)
    share = r["successors"][name]["share_of_ceiling"]["projected"]
    assert f"| <={share:.0%} (" in rm.markdown({"rows": [r]})
