"""Every published benchmark's results.json is what `bench --report_only` makes today of the
evidence beside it. A user who rebuilds a figure from the commit must get the figure the docs
quote; a change to the report's arithmetic (a cost model, a new per-run field) therefore
republishes every benchmark in the same commit:

    cp -r benchmarks/<cell>/<kind> /tmp/x && openrlhf-speed bench --out /tmp/x --report_only \\
        [--engine_curve benchmarks/<cell>/<kind>/engine_curve.json] \\
        --publish benchmarks/<cell>/<kind> --publish_docs docs/<cell>/<kind>"""

import glob
import json
import math
import os
import shutil

import pytest

from openrlhf_speed.bench import run as bench_run

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
PUBLISHED = sorted(os.path.relpath(os.path.dirname(p), REPO)
                   for p in glob.glob(os.path.join(REPO, "benchmarks", "**", "bench.json"), recursive=True))


def _differences(now, then, path="", out=None):
    """Paths where two reports differ; floats to 1e-9 relative (sums take another order on
    another SIMD width), NaN equal to NaN."""
    out = [] if out is None else out
    if isinstance(now, dict) and isinstance(then, dict):
        for key in sorted(set(now) | set(then), key=str):
            if key not in now or key not in then:
                out.append(f"{path}/{key}: {'only published' if key in then else 'only rebuilt'}")
            else:
                _differences(now[key], then[key], f"{path}/{key}", out)
    elif isinstance(now, list) and isinstance(then, list) and len(now) == len(then):
        for i, (a, b) in enumerate(zip(now, then)):
            _differences(a, b, f"{path}[{i}]", out)
    elif isinstance(now, float) and isinstance(then, (int, float)) and not isinstance(then, bool):
        if not (math.isnan(now) and math.isnan(then)) and not math.isclose(now, then, rel_tol=1e-9, abs_tol=1e-12):
            out.append(f"{path}: rebuilt {now!r}, published {then!r}")
    elif now != then:
        out.append(f"{path}: rebuilt {str(now)[:80]}, published {str(then)[:80]}")
    return out


def test_every_published_benchmark_is_found():
    assert {"benchmarks/proving-v5/avx512", "benchmarks/regime/high-b4/avx2"} <= set(PUBLISHED)


@pytest.mark.parametrize("folder", PUBLISHED)
def test_a_published_report_is_what_its_evidence_rebuilds(folder, tmp_path):
    copy = tmp_path / "evidence"
    shutil.copytree(os.path.join(REPO, folder), copy)
    curve = os.path.join(REPO, folder, "engine_curve.json")
    argv = ["--report_only", "--out", str(copy)] + (["--engine_curve", curve] if os.path.isfile(curve) else [])
    assert bench_run.main(argv) == 0
    rebuilt = json.load(open(copy / "results.json"))
    published = json.load(open(os.path.join(REPO, folder, "results.json")))
    differ = _differences(rebuilt, published)
    assert not differ, (f"{folder}/results.json is not what today's report makes of its evidence; republish it "
                        f"(this file's docstring) and rewrite the docs' figures: " + "; ".join(differ[:8]))
