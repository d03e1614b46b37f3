"""The shipped proving ground: every machine benchmarks the same pinned start model.

These tests read the copy in the package (no build): its manifest, the resolution of the
model names to it, the description a bench report prints, and the comparison a rebuild
prints.
"""

import hashlib
import json
import shutil

import pytest

from openrlhf_speed.proving import recipe, shipped


# The benchmark's model is shipped once its build is done (proving-ground build, then ship);
# until then its own checks are skipped with this reason, and the names fall back to a build.
needs_full = pytest.mark.skipif(not shipped.is_shipped("full"), reason="the 'full' variant is not shipped in this checkout")
FULL = pytest.param("proving", marks=needs_full)


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy(tmp_path):
    """A copy of the shipped folder without its code, as verify(root=...) reads it."""
    root = tmp_path / "shipped"
    shutil.copytree(shipped.ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return root


@pytest.mark.parametrize("variant", ["ci", pytest.param("full", marks=needs_full), pytest.param("full-v4", marks=needs_full)])
def test_every_shipped_file_is_pinned_and_matches(variant):
    base = shipped.verify(variant)
    pins = {rel: d for rel, d in shipped.read_manifest().items() if rel.startswith(base.name + "/")}
    assert sorted(pins) == shipped.files_under(base)
    for rel, digest in pins.items():
        assert _sha(shipped.ROOT / rel) == digest, rel
    for f in ("config.json", "model.safetensors", "tokenizer.json", "build.json", "data/train.jsonl", "data/test.jsonl"):
        assert f"{base.name}/{f}" in pins
    info = json.loads((base / "build.json").read_text())
    made = info["made"]  # how it was made travels with it
    assert made["command"].startswith("openrlhf-speed proving-ground build") and made["cpu"]
    # v4 was built as "full" while it was the benchmark's variant
    assert made["recipe_version"] == recipe.VARIANTS[variant].version and info["variant"] == variant.split("-v")[0]
    assert info["recipe"]["sft_steps"] == recipe.VARIANTS[variant].sft_steps


def test_a_changed_shipped_file_is_refused_and_named(tmp_path):
    root = _copy(tmp_path)
    weights = root / recipe.get_variant("ci").folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(shipped.ShippedModelError, match=r"model\.safetensors has sha256 .* restore it from git"):
        shipped.verify("proving-ci", root=root)
    weights.write_bytes((shipped.ROOT / weights.relative_to(root)).read_bytes())
    assert shipped.verify("proving-ci", root=root) == weights.parent  # restored: accepted


def test_a_missing_or_unpinned_shipped_file_is_refused_and_named(tmp_path):
    root = _copy(tmp_path)
    (root / recipe.get_variant("ci").folder / "tokenizer.json").unlink()
    with pytest.raises(shipped.ShippedModelError, match=r"tokenizer\.json is missing"):
        shipped.verify("ci", root=root)
    shutil.copyfile(shipped.ROOT / recipe.get_variant("ci").folder / "tokenizer.json",
                    root / recipe.get_variant("ci").folder / "tokenizer.json")
    (root / recipe.get_variant("ci").folder / "data" / "notes.txt").write_text("x")
    with pytest.raises(shipped.ShippedModelError, match=r"does not pin: .*data/notes\.txt"):
        shipped.verify("ci", root=root)
    (root / shipped.MANIFEST.name).unlink()
    with pytest.raises(shipped.ShippedModelError, match="MANIFEST.sha256 is missing"):
        shipped.verify("ci", root=root)


def test_proving_names_resolve_to_the_shipped_copy_without_building(monkeypatch, tmp_path):
    from openrlhf_speed import proving
    from openrlhf_speed.proving import build

    monkeypatch.setenv("OPENRLHF_SPEED_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(build, "build", lambda *a, **k: pytest.fail("a proving name started a build"))
    names = (("proving", "full"), ("proving-full", "full"), ("proving-ci", "ci"))
    for name, variant in names if shipped.is_shipped("full") else names[2:]:
        folder = shipped.ROOT / recipe.get_variant(variant).folder
        assert proving.resolve_model_or_proving(name) == str(folder)
        assert proving.data_paths(name) == (str(folder / "data" / "train.jsonl"), str(folder / "data" / "test.jsonl"))
    assert not (tmp_path / "empty-cache").exists()


@pytest.mark.parametrize("name", [FULL, "proving-ci"])
def test_the_shipped_model_loads_and_answers(name):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = shipped.path(name)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(base)
    assert sum(p.numel() for p in model.parameters()) == shipped.build_info(name)["parameters"]
    enc = tok(["Q: What is 3 + 4?\nA: "], return_tensors="pt", add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
    assert "7" in tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


@pytest.mark.parametrize("name", [FULL, "proving-ci"])
def test_describe_gives_the_weights_sha256_and_the_pass_table(name):
    v = recipe.get_variant(name)
    d = shipped.describe(name)
    assert d["shipped"] and d["variant"] == v.name
    assert d["weights_sha256"] == _sha(shipped.ROOT / v.folder / "model.safetensors")
    assert d["pass_table"]["all"]["prompts"] == v.table_prompts
    assert d["pass_table_text"].startswith("RL train prompts, start model, 8 samples per prompt")
    text = d["text"].splitlines()
    assert d["weights_sha256"] in text[0] and f"shipped {v.folder}" in text[0]
    assert "made by `openrlhf-speed proving-ground build" in text[1]
    assert d["pass_table_text"] in d["text"] and d["held_out_pass_table_text"] in d["text"]


@needs_full
def test_the_benchmark_model_states_its_prompt_set_difficulty():
    # Fig. 2's measure, stored beside the shipped model before any curriculum ran on it.
    d = shipped.describe("proving")
    diff = d["difficulty"]
    assert diff["samples"] == 50 and diff["split"] == "train" and diff["all"]["prompts"] >= 200
    assert diff["model_weights_sha256"] == d["weights_sha256"]
    assert sum(c for _, c in diff["histogram"]) == diff["all"]["prompts"]
    assert "never solved" in d["difficulty_text"] and d["difficulty_text"] in d["text"]
    assert shipped.describe("proving-ci")["weights_sha256"] != d["weights_sha256"]


def test_compare_prints_both_tables_and_both_sha256s(tmp_path):
    from openrlhf_speed.proving.ship import compare

    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(shipped.path("ci"), rebuilt)
    text, match = compare("ci", rebuilt)
    sha = shipped.describe("ci")["weights_sha256"]
    assert match and text.count("RL train prompts, start model") == 2
    assert f"model.safetensors   {sha}" in text and text.count(sha) == 2
    assert "bit for bit" in text and "DIFFERENT" not in text
    weights = rebuilt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    text, match = compare("ci", rebuilt)
    line = next(ln for ln in text.splitlines() if ln.startswith("model.safetensors"))
    assert not match and line.endswith("DIFFERENT") and _sha(weights) in line and sha in line
    assert "data/train.jsonl" in text and "DIFFERENT" not in text.split("data/train.jsonl")[1].splitlines()[0]
    assert f"--model {rebuilt}" in text  # how to benchmark the rebuild instead


def test_show_prints_the_shipped_description(capsys):
    from openrlhf_speed.cli import proving_ground

    assert proving_ground.main(["show", "--variant", "ci"]) == 0
    out = capsys.readouterr().out
    assert shipped.describe("proving-ci")["weights_sha256"] in out
    assert "RL train prompts, start model" in out and "held-out prompts, start model" in out


def test_ship_copies_a_build_and_pins_every_file(tmp_path):
    from openrlhf_speed.proving.ship import ship

    root = tmp_path / "pkg"
    root.mkdir()
    info = json.loads((shipped.path("ci") / "build.json").read_text())
    dest = ship("ci", shipped.path("ci"), made={"command": "x"}, root=root)
    assert shipped.verify("ci", root=root) == dest
    pins = shipped.read_manifest(root / shipped.MANIFEST.name)
    assert sorted(pins) == sorted(p.relative_to(root).as_posix() for p in dest.rglob("*") if p.is_file())
    assert json.loads((dest / "build.json").read_text())["made"] == info["made"]  # kept, not replaced


def test_difficulty_command_measures_the_shipped_model(tmp_path, capsys):
    from openrlhf_speed.cli import proving_ground

    out = tmp_path / "d"
    assert proving_ground.main(["difficulty", "--variant", "ci", "--samples", "3", "--prompts", "5",
                                "--out", str(out)]) == 0
    d = json.loads((out / "difficulty.json").read_text())
    assert d["all"]["prompts"] == 5 and d["samples"] == 3 and len(d["solved_per_prompt"]) == 5
    assert sum(c for _, c in d["histogram"]) == 5
    assert d["model_weights_sha256"] == shipped.describe("ci")["weights_sha256"]
    assert abs(d["all"]["never"] + d["all"]["some"] + d["all"]["always"] - 1) < 0.01
    assert "never solved" in (out / "difficulty.md").read_text() and "never solved" in capsys.readouterr().out


def test_difficulty_histogram_keeps_the_ends_apart():
    from openrlhf_speed.proving.difficulty import histogram, summarize

    h = dict(histogram([0, 0, 0.02, 0.1, 0.5, 0.98, 1]))
    assert (h["0"], h["(0.0,0.1]"], h["(0.4,0.5]"], h["(0.9,1.0)"], h["1"]) == (2, 2, 1, 1, 1)
    s = summarize(["a", "a", "b"], [0, 50, 25], 50)
    assert s["all"] == {"prompts": 3, "never": 0.333, "some": 0.333, "always": 0.333, "pass_rate": 0.5}


def test_difficulty_command_measures_a_checkpoint_folder(tmp_path):
    """--model: the frontier of a run's checkpoint, on the variant's prompts; the record names
    the checkpoint's own weights, not the shipped ones."""
    from openrlhf_speed.cli import proving_ground

    ckpt = tmp_path / "ckpt"
    shutil.copytree(shipped.path("ci"), ckpt)
    weights = ckpt / "model.safetensors"
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(weights))
    save_file({k: v * 0.5 for k, v in tensors.items()}, str(weights), metadata={"format": "pt"})
    out = tmp_path / "d"
    assert proving_ground.main(["difficulty", "--variant", "ci", "--samples", "2", "--prompts", "4",
                                "--model", str(ckpt), "--out", str(out)]) == 0
    d = json.loads((out / "difficulty.json").read_text())
    assert d["model_weights_sha256"] == _sha(weights) != shipped.describe("ci")["weights_sha256"]
    assert d["all"]["prompts"] == 4 and f"--model {ckpt}" in d["command"]
    with pytest.raises(SystemExit, match="config.json"):
        proving_ground.main(["difficulty", "--variant", "ci", "--model", str(tmp_path / "nothing")])
    with pytest.raises(SystemExit, match="--ship"):
        proving_ground.main(["difficulty", "--variant", "ci", "--model", str(ckpt), "--ship"])


def test_v5_starts_from_v4_weights_with_a_larger_rl_split():
    """The benchmark's v5 is v4's start model bit for bit with 20,000 RL prompts, so no
    curriculum wraps around within its horizon; v4 stays shipped for its published tables."""
    v5, v4 = shipped.describe("proving"), shipped.describe("proving-v4")
    assert v5["weights_sha256"] == v4["weights_sha256"]
    assert recipe.get_variant("proving").version == 5 and recipe.get_variant("proving-v4").version == 4
    rows = (shipped.path("proving") / "data" / "train.jsonl").read_text().splitlines()
    assert len(rows) == 20000
    held = (shipped.path("proving") / "data" / "test.jsonl").read_bytes()
    assert held == (shipped.path("proving-v4") / "data" / "test.jsonl").read_bytes()
    train_q = {json.loads(r)["question"] for r in rows}
    assert not train_q & {json.loads(r)["question"] for r in held.decode().splitlines()}
