"""`openrlhf-speed advise` end to end on the shipped proving-ground CI model: a real vLLM engine
screens 16 of its RL prompts with 4 responses each, the training reward scores them, and
`--json` prints every figure on stdout alone (the engine's logs and the progress bar go to
stderr). It asserts the pipeline and the bookkeeping, not the forecast: 16 prompts of a
model taught for seconds predict nothing about SPEED (docs/advise.md has the validation)."""

import json
import subprocess

import pytest
from _util import openrlhf_speed_cmd

from openrlhf_speed.cli.advise_report import render_report

pytestmark = pytest.mark.e2e_extra  # about a minute: outside the default tier

K, S, N = 16, 4, 4


def test_advise_screens_the_ci_model_and_prints_a_verdict(tmp_path):
    proc = subprocess.run([*openrlhf_speed_cmd(), "advise", "--model", "proving-ci", "--prompts", str(K),
                           "--samples", str(S), "--rollout.n_samples_per_prompt", str(N), "--speed.n_init", "2",
                           "--rollout.batch_size", "4", "--rollout.max_new_tokens", "32", "--json"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = json.loads(proc.stdout)  # nothing but the JSON on stdout
    assert "[advise] screened in" in proc.stderr and "Processed prompts" in proc.stderr  # time and progress bar

    sc = result["screening"]
    assert result["prompts"] == K == len(sc["correct"]) == len(sc["lengths"])
    assert all(0 <= c <= S for c in sc["correct"]) and all(1 <= n <= 32 for n in sc["lengths"])
    # Every response went through the training reward, and got a status there.
    assert sum(sc["reward_statuses"].values()) >= K * S
    assert sc["tokens"] == pytest.approx(sum(sc["lengths"]) * S)
    assert result["difficulty"]["all"]["prompts"] == K
    assert result["difficulty"]["all"]["pass"] == pytest.approx(sum(sc["correct"]) / (K * S))

    speed, uniform = result["predicted"]["speed"], result["predicted"]["uniform"]
    assert 0 < speed["qualification_rate"] < 1 and 0 <= uniform["zero_variance_share"] < 1
    assert speed["tokens"]["generated"] == pytest.approx(speed["tokens"]["screen"] + speed["tokens"]["continue"])
    assert result["settings"] == {"n": N, "n_init": 2, "low": 0.0, "high": 1.0, "batch": 4, "gen_batch": 8,
                                  "cost_ratio": 2.0, "baseline": "off"}
    assert result["verdict"]["line"].startswith("SPEED ") and "over stock OpenRLHF" in result["verdict"]["line"]
    # The text report is rendered from the same dict, verdict last.
    assert render_report(result).splitlines()[-1] == result["verdict"]["line"]
