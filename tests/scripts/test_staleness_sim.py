"""scripts/staleness_sim.py, the evidence of docs/design.md's staleness table: what each bound
lets train and what it throws away, on the simulated engine."""

import json

from _util import load_script

from openrlhf_speed.bench import figures


def test_each_bound_trains_no_older_screening_and_only_a_bound_rescreens(tmp_path, monkeypatch):
    sim = load_script("staleness_sim")
    monkeypatch.setattr(sim, "SETTINGS", {**sim.SETTINGS, "prompts": 300, "batch_prompts": 8})
    assert sim.main([str(tmp_path)]) == 0
    rows = {r["bound"]: r for r in json.loads((tmp_path / "staleness.json").read_text())["rows"]}
    assert rows[0]["trained_groups_by_age"].keys() == {"0"} and rows[0]["stale_token_share"] > 0
    assert rows[2]["max_age"] <= 2 and rows[1]["max_age"] <= 1
    assert rows[None]["rescreened"] == 0 and rows[None]["stale_token_share"] == 0
    assert rows[None]["max_age"] > 2  # what the bound removes
    assert rows[0]["rescreened"] >= rows[2]["rescreened"]
    lines = figures.rebuild_table("staleness.json", "staleness", str(tmp_path)).splitlines()
    assert lines[0] == "| bound | trained groups by screening age | re-screened | stale tokens |"
    assert lines[2].startswith("| 0 | {0: ") and lines[4].startswith("| 2 (default) | {0: ")
    assert lines[5].startswith("| none | ") and lines[5].endswith("| 0 | 0.0% |")
