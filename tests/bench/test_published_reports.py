"""Every published benchmark's results.json is what `bench --report_only` makes today of the
evidence beside it. A user who rebuilds a figure from the commit must get the figure the docs
quote; a change to the report's arithmetic (a cost model, a new per-run field) therefore
republishes every benchmark in the same commit:

    cp -r benchmarks/<cell>/<kind> /tmp/x && openrlhf-speed bench --out /tmp/x --report_only \\
        [--engine_curve benchmarks/<cell>/<kind>/engine_curve.json] \\
        --publish benchmarks/<cell>/<kind> --publish_docs docs/<cell>/<kind>"""

import glob
import json
import os
import shutil

import pytest
from _util import REPO, json_differences

from openrlhf_speed.bench import run as bench_run

PUBLISHED = sorted(os.path.relpath(os.path.dirname(p), REPO)
                   for p in glob.glob(os.path.join(REPO, "benchmarks", "**", "bench.json"), recursive=True))


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
    differ = json_differences(rebuilt, published)
    assert not differ, (f"{folder}/results.json is not what today's report makes of its evidence; republish it "
                        f"(this file's docstring) and rewrite the docs' figures (first: rebuilt, second: published): "
                        + "; ".join(differ[:8]))
