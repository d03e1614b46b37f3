"""A run's curves.png (rollout/curves.py) and `openrlhf-speed curves RUN` (cli/curves.py), on
hand-written metrics records."""

import json
import math
import os

import pytest

from openrlhf_speed.cli import curves as curves_cli
from openrlhf_speed.cli.main import usage
from openrlhf_speed.rollout import curves
from openrlhf_speed.rollout.ckpt_manifest import DiskFullError
from openrlhf_speed.storage import atomic

PNG = b"\x89PNG\r\n\x1a\n"


def records():
    out = [{"event": "eval", "step": 0, "eval_accuracy": 0.3, "eval_num_samples": 100}]
    for k in range(1, 5):
        out.append({"event": "step", "step": k, "rollout/reward_mean": 0.2 + 0.1 * k,
                    "speed/qualification_rate": 0.4, "speed/tokens_generated": 1000.0 * k,
                    "speed/tokens_trained": 600.0, "speed/tokens_discarded": float("nan")})
    out.append({"event": "eval", "step": 4, "eval_accuracy": 0.5, "eval_num_samples": 100})
    return out


def test_series_keeps_finite_points_and_the_accuracys_two_standard_errors():
    assert curves.series(records(), "rollout/reward_mean")[:2] == ([1, 2, 3, 4], pytest.approx([0.3, 0.4, 0.5, 0.6]))
    assert curves.series(records(), "speed/tokens_discarded") == ([], [], [])
    xs, ys, err = curves.series(records(), "eval_accuracy")
    assert (xs, ys) == ([0, 4], [0.3, 0.5])
    assert err == pytest.approx([2 * math.sqrt(0.3 * 0.7 / 100), 2 * math.sqrt(0.25 / 100)])


def test_the_plot_is_a_png(tmp_path):
    path = curves.write_curves(records(), str(tmp_path / "curves.png"), "run")
    assert open(path, "rb").read(8) == PNG and os.path.getsize(path) > 10_000


def test_a_run_without_evaluations_or_a_band_still_plots(tmp_path):
    bare = [{"event": "step", "step": 1, "rollout/reward_mean": 0.5, "speed/qualification_rate": float("nan")}]
    path = curves.write_curves(bare, str(tmp_path / "curves.png"), "run")
    assert open(path, "rb").read(8) == PNG


def test_a_failing_plot_is_a_warning_but_a_full_disk_stops_the_run(tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "curves.png")
    monkeypatch.setattr(curves, "render_png", lambda *a: (_ for _ in ()).throw(RuntimeError("no backend")))
    curves.redraw(records(), path, "run")
    assert "[openrlhf-speed] WARNING could not draw" in capsys.readouterr().out and not os.path.exists(path)
    monkeypatch.setattr(curves, "render_png", lambda *a: (_ for _ in ()).throw(DiskFullError("disk full")))
    with pytest.raises(DiskFullError):
        curves.redraw(records(), path, "run")


def write_log(folder, name="metrics.jsonl"):
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records()))
    return path


def test_the_command_redraws_a_runs_curves(tmp_path, capsys):
    write_log(tmp_path)
    assert curves_cli.main([str(tmp_path)]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == PNG
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'curves.png'}: 4 steps, 2 evaluations")


def test_the_command_reads_a_log_elsewhere_and_writes_where_told(tmp_path):
    log = write_log(tmp_path, "elsewhere.jsonl")
    out = tmp_path / "plots" / "run.png"
    assert curves_cli.main([str(tmp_path), "--metrics", str(log), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG


def test_the_command_without_a_log_says_what_to_pass(tmp_path, capsys):
    assert curves_cli.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"openrlhf-speed curves: error: no metrics log at {tmp_path / 'metrics.jsonl'}")
    assert "--metrics" in err and err.count("\n") == 1
    (tmp_path / "metrics.jsonl").write_text("")
    assert curves_cli.main([str(tmp_path)]) == 2
    assert "holds no step or evaluation record yet" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_the_command_on_a_full_disk_is_one_line(tmp_path, monkeypatch, capsys):
    write_log(tmp_path)
    real_open = open
    monkeypatch.setattr(atomic, "open", lambda p, mode="r", *a, **k: real_open(
        "/dev/full" if "w" in mode else p, mode, *a, **k), raising=False)
    assert curves_cli.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("openrlhf-speed curves: ERROR disk full while writing the run's curves ")
    assert err.count("\n") == 1 and not (tmp_path / "curves.png").exists()


def test_the_command_is_listed():
    assert "  curves " in usage()
