"""scripts/pacing_sim.py, the evidence of docs/design.md's pacing table: what each
--speed.pace_batches saves on the serial schedule's simulated engine, and what it costs in
the trained screenings' age."""

import json

from _util import load_script

from openrlhf_speed.bench import figures


def test_a_pace_within_the_bound_loses_no_group_and_generates_less(tmp_path, monkeypatch):
    sim = load_script("pacing_sim")
    monkeypatch.setattr(sim, "SETTINGS", {**sim.SETTINGS, "prompts": 400, "batch_prompts": 8, "n": 8,
                                          "max_inflight_prompts": 32, "steps": 20, "completions_per_tick": 8})
    monkeypatch.setattr(sim, "MIXES", {"easy": sim.MIXES["easy"]})
    assert sim.main([str(tmp_path)]) == 0
    rows = {(r["strategy"], r["pace"]): r for r in json.loads((tmp_path / "pacing.json").read_text())["rows"]}
    for strategy in ("speed", "dapo"):
        loose, paced = rows[(strategy, None)], rows[(strategy, 2)]
        assert loose["stale_groups_per_step"] >= 1 and paced["stale_groups_per_step"] <= 0.2
        assert paced["tokens_generated_per_step"] < 0.9 * loose["tokens_generated_per_step"]
        assert rows[(strategy, 1)]["screening_age_mean"] < paced["screening_age_mean"]
    lines = figures.rebuild_table("pacing.json", "pacing", str(tmp_path)).splitlines()
    assert lines[0].startswith("| mix | curriculum | pace | stale groups a step |")
    assert lines[2].startswith("| easy | speed | unpaced | ") and lines[4].startswith("| easy | speed | 2 | ")
    assert "%)" in lines[4] and "%)" not in lines[2]  # tokens against the unpaced run
    assert lines[6].startswith("| easy | DAPO | unpaced | ")
