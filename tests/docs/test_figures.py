"""Every figure the README and docs/ quote with a source marker is what its evidence gives, as
printed (openrlhf_speed/bench/figures.py); the regime-map table has its own test
(tests/bench/test_regime.py)."""

import json

import pytest
from _util import REPO

from openrlhf_speed.bench import figures

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
V5 = "benchmarks/proving-v5/avx512/results.json"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_marked_figure_is_its_evidence(doc):
    wrong = figures.check(doc.read_text(encoding="utf-8"), root=str(REPO))
    assert not wrong, "figures that their evidence does not give (source, key, printed, rebuilt):\n" + "\n".join(
        map(str, wrong))


def test_the_readme_headline_figures_carry_their_source():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    keys = {key for _, key, _ in figures.MARK.findall(text)}
    # The cells' speedups are in the regime-map table (generated whole, tested in tests/bench);
    # the prose quotes the hard mix's cells at both batches, the curriculum that beats SPEED there,
    # each batch's alpha, and the easy mix where SPEED and speed_thin, paced, lose (SPEED's ceiling,
    # paced speed_thin's share of the cell's, and SPEED's screen's rejections beside DAPO's).
    for key in ("rows[cell=high-avx512-amx].speed_over_off.projected|ci", "rows[cell=high-b4].speed_over_off.projected|ci",
                "rows[cell=high-avx512-amx].speed_over_dapo.projected|ci",
                "rows[cell=high-avx512-amx].successors.speed_thin+level.over_off.projected|ci",
                "rows[cell=high-avx512-amx].successors.speed_thin+level.over_off.measured|ci",
                "evidence.runs[*curriculum=speed].rejected_solved_by_quarter[3]|range:.2f",
                "evidence.runs[*curriculum=dapo].rejected_solved_by_quarter[3]|range:.2f",
                "rows[cell=low-avx512-amx].speed_over_off.projected|ci",
                "rows[cell=low-avx512-amx].successors.speed_thin+level+pace2.over_off.projected|ci",
                "rows[cell=low-avx512-amx].successors.speed_thin+level+pace2.share_of_ceiling.projected|.0%",
                "alpha_by_batch[batch=16]|ci:.2f:",
                "alpha_by_batch[batch=4]|ci:.2f:"):
        assert key in keys, key


def test_a_figure_copied_wrong_or_without_evidence_fails():
    marked = f"<!--fig {V5} final:speed|.4f-->{{}}<!--/fig-->"
    assert figures.check(marked.format("0.5615"), root=str(REPO)) == []
    # Rounded to three places SPEED's 0.5615 ties DAPO's 0.5619: the check wants it as printed.
    assert figures.check(marked.format("0.562"), root=str(REPO))[0][3] == "0.5615"
    for source, key in ((V5, "headline.ratios.no_such_ratio|ci"), ("benchmarks/none.json", "target_accuracy|.4f"),
                        (V5, "final:no_such_curriculum|.4f"), (V5, "target_accuracy|ci")):
        (wrong,) = figures.check(f"<!--fig {source} {key}-->0.5<!--/fig-->", root=str(REPO))
        assert wrong[3].startswith("error: "), wrong


def test_paths_pick_items_by_field_and_print_ranges(tmp_path):
    (tmp_path / "e.json").write_text(json.dumps({"rows": [{"cell": "a", "steps": [72.75, None, 78.04]},
                                                          {"cell": "b", "share": 0.4296, "ci": {"point": 1.19,
                                                           "low": 1.04, "high": 1.39}}]}))
    assert figures.rebuild("e.json", "rows[cell=a].steps|range", str(tmp_path)) == "73-78"
    assert figures.rebuild("e.json", "rows[1].share|.0%", str(tmp_path)) == "43%"
    assert figures.rebuild("e.json", "rows[cell=b].ci|ci", str(tmp_path)) == "1.19x [1.04-1.39]"
    with pytest.raises(figures.FigureError, match="0 items with cell=c"):
        figures.rebuild("e.json", "rows[cell=c].share|.2f", str(tmp_path))


def test_lists_of_items_give_ranges_and_means(tmp_path):
    (tmp_path / "e.json").write_text(json.dumps({
        "runs": {"a-r1": {"curriculum": "a", "q": 0.30}, "a-r2": {"curriculum": "a", "q": 0.32},
                 "b-r1": {"curriculum": "b", "q": float("nan")}},
        "levels": [{"f": 0.5, "r": {"point": 0.91, "low": 0.8, "high": 1.0}}, {"f": 1.1, "r": {"verdict": "not measured"}},
                   {"f": 1.0, "r": {"point": 1.12, "low": 1.0, "high": 1.3}}],
        "shares": [0.43, 0.48, 0.47]}))
    rebuild = lambda key: figures.rebuild("e.json", key, str(tmp_path))  # noqa: E731
    assert rebuild("runs[*curriculum=a].q|mean:.2f") == "0.31"
    assert rebuild("runs[*].q|range:.2f") == "0.30-0.32"  # the NaN left out
    assert rebuild("levels[*].r|range:.2f") == "0.91-1.12"  # points of the measured levels only
    assert rebuild("shares|range:.0%") == "43-48%"
    with pytest.raises(figures.FigureError, match="empty"):
        rebuild("runs[*curriculum=b].q|mean:.2f")


def test_a_marked_table_is_rebuilt_whole_and_a_changed_cell_fails():
    source, name = "benchmarks/proving-v4/avx512/results.json", "intervals"
    table = figures.rebuild_table(source, name, str(REPO))
    # What a reader of docs/benchmarks.md checks: SPEED against stock OpenRLHF on that benchmark.
    assert "| speed | 0.90x [0.85-0.96], slower |" in table
    block = f"<!--table {source} {name}-->\n{{}}<!--/table-->"
    assert figures.check(block.format(table), root=str(REPO)) == []
    (wrong,) = figures.check(block.format(table.replace("0.90x", "0.95x", 1)), root=str(REPO))
    assert wrong[3] == table
    (wrong,) = figures.check(f"<!--table {source} no_such_table-->\n<!--/table-->", root=str(REPO))
    assert wrong[3].startswith("error: no table 'no_such_table'")
    # --write fills an empty block, and leaves figures and tables that hold as they are.
    assert figures.write(block.format(""), root=str(REPO)) == block.format(table)


def test_the_benchmark_tables_are_generated_not_copied():
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    tables = {(source, name) for _, source, name, _, _ in figures.TABLE.findall(text)}
    for cell in ("proving-v5/avx512", "proving-v4/avx2", "proving-v4/avx512"):
        assert (f"benchmarks/{cell}/results.json", "curricula") in tables, cell
    assert (f"benchmarks/proving-v5/avx512/results.json", "headline") in tables
    long_runs = (REPO / "docs" / "long_runs.md").read_text(encoding="utf-8")
    assert {name for _, _, name, _, _ in figures.TABLE.findall(long_runs)} == {"soak", "scale"}


def test_the_command_rewrites_a_stale_file_and_then_checks_it_clean(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text(f"SPEED <!--fig {V5} final:speed|.4f-->0.562<!--/fig-->.\n")
    assert figures.main([str(doc), "--root", str(REPO)]) == 1
    assert "printed '0.562', evidence gives '0.5615'" in capsys.readouterr().out
    assert figures.main([str(doc), "--root", str(REPO), "--write"]) == 0
    assert figures.main([str(doc), "--root", str(REPO)]) == 0
    assert "0.5615" in doc.read_text()


def test_a_published_quickstart_run_gives_back_its_summary_lines(tmp_path):
    """scripts/publish_quickstart.py keeps what the README's quickstart block is rebuilt from:
    the records and the wall clock the run's own summary printed."""
    import importlib.util

    from openrlhf_speed.rollout.run_summary import RunFiles, build_summary, run_records

    records = [{"event": "eval", "step": 0, "eval_accuracy": 0.326, "eval_num_samples": 1200},
               {"event": "step", "step": 1, "train_wall_s": 17.0, "rollout/reward_mean": 0.435},
               {"event": "step", "step": 2, "train_wall_s": 35.5, "rollout/reward_mean": 0.51},
               {"event": "eval", "step": 2, "eval_accuracy": 0.401, "eval_num_samples": 1200}]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = build_summary(run_records(records), RunFiles(str(run_dir), None, None, None, None), "make train",
                            "openrlhf-speed curves run", wall_s=472.4)
    (run_dir / "summary.md").write_text(summary)
    spec = importlib.util.spec_from_file_location("publish_quickstart", REPO / "scripts" / "publish_quickstart.py")
    publish = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(publish)
    run = publish.publish(str(run_dir), str(tmp_path / "out"), 732.0)
    assert (run["wall_s"], run["setup_s"]) == (472, 732)
    block = figures.rebuild_table("out/run.json", "quickstart", str(tmp_path))
    lines = block.splitlines()
    assert lines[0] == lines[-1] == "```"
    assert lines[1:-1] == summary.split("\n\n")[1].splitlines()  # the figures, before "Files:"
    assert "wall clock of the run 7m 52s" in lines[1] and "0.326 at step 0 -> 0.401 at step 2" in lines[2]
    assert figures.rebuild("out/run.json", "setup_s|duration", str(tmp_path)) == "12m 12s"
    step = figures.rebuild_table("out/run.json", "quickstart_step", str(tmp_path)).splitlines()
    assert step[1] == "[openrlhf-speed] step 2 | reward 0.510"  # the last step's console line
    (run_dir / "summary.md").write_text(summary.replace("; wall clock of the run 7m 52s", ""))
    with pytest.raises(SystemExit, match="no 'wall clock of the run'"):
        publish.publish(str(run_dir), str(tmp_path / "out"), 732.0)


def test_the_quickstart_phase_table_is_each_step_by_phase_then_the_median(tmp_path):
    """docs/cpu.md's step figures: each step's phases as the trainer timed them; a phase a step
    did not time prints '-' and stays out of the median."""
    def step(n, total, gen, share):
        r = {"event": "step", "step": n, "timing/step_total": total, "timing/make_experience": 4.0,
             "timing/ppo_train": 7.5, "timing/broadcast": 0.5, "speed/useful_token_share": share}
        return {**r, "timing/generation": gen} if gen is not None else r

    run = {"records": [{"event": "eval", "step": 0, "eval_accuracy": 0.3}, step(1, 20.0, 8.0, 0.5),
                       step(2, 30.0, 18.0, 0.7), step(3, 26.0, None, 0.6)]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    lines = figures.rebuild_table("run.json", "quickstart_phases", str(tmp_path)).splitlines()
    assert lines[0] == "| step | s/step | generation | experience | train | weight sync | useful-token share |"
    assert lines[2] == "| 1 | 20.0 | 8.0 | 4.0 | 7.5 | 0.5 | 0.50 |"
    assert lines[4] == "| 3 | 26.0 | - | 4.0 | 7.5 | 0.5 | 0.60 |"
    assert lines[5] == "| median | 26.0 | 13.0 | 4.0 | 7.5 | 0.5 | 0.60 |"


def test_write_names_a_marker_without_evidence_and_leaves_the_file(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    text = f"SPEED <!--fig {V5} final:speed|.4f-->0.5<!--/fig--> and <!--fig {V5} nothing.at_all|.2f-->1<!--/fig-->.\n"
    doc.write_text(text)
    assert figures.main([str(doc), "--root", str(REPO), "--write"]) == 1
    out = capsys.readouterr().out
    assert f"<!--fig {V5} nothing.at_all|.2f-->: no key 'nothing'" in out and "left as it was" in out
    assert doc.read_text() == text
    table = f"<!--table {V5} no_such_table-->\n| stale |\n<!--/table-->\n"
    doc.write_text(table)
    assert figures.main([str(doc), "--root", str(REPO), "--write"]) == 1
    assert f"<!--table {V5} no_such_table-->: no table 'no_such_table'" in capsys.readouterr().out
    assert doc.read_text() == table
