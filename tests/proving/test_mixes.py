"""The regime map's data mixes: a level-weighted subset of the shipped v5 split, rebuilt bit for
bit from its recipe, with the zero-variance share the map needs at step 0."""

import json

import pytest

from openrlhf_speed.proving import mixes, shipped


def test_select_takes_each_levels_first_rows_at_the_largest_size_the_split_allows():
    rows = [{"level": "a", "i": i} for i in range(10)] + [{"level": "b", "i": i} for i in range(4)]
    chosen = mixes.select(rows, {"a": 0.5, "b": 0.5})
    # b has 4 rows at weight 0.5: size 8, so 4 of each, a's first four
    assert sorted((r["level"], r["i"]) for r in chosen) == [("a", 0), ("a", 1), ("a", 2), ("a", 3),
                                                            ("b", 0), ("b", 1), ("b", 2), ("b", 3)]
    assert chosen == mixes.select(rows, {"a": 0.5, "b": 0.5})  # seeded: the same order every time
    with pytest.raises(ValueError, match="sum to 1"):
        mixes.select(rows, {"a": 0.5})
    with pytest.raises(ValueError, match="no rows of level"):
        mixes.select(rows, {"a": 0.5, "c": 0.5})


@pytest.mark.parametrize("name", sorted(mixes.MIXES))
def test_shipped_mix_is_its_recipe_rebuilt(name, tmp_path):
    rows, recipe = mixes.build(name, shipped.data_paths("full")[0])
    rebuilt = mixes.write(rows, recipe, tmp_path)
    assert shipped.sha256_file(rebuilt) == shipped.sha256_file(mixes.mix_path(name))
    assert mixes.mix_of(mixes.mix_path(name)) == name and mixes.mix_of(str(rebuilt)) is None  # the cache's file only
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == recipe["rows"]  # no prompt repeats


def test_shipped_mixes_sit_on_either_side_of_v5():
    """off's zero-variance share at N = 24 at step 0, by `advise` on the shipped start model."""
    share = {}
    for name in mixes.MIXES:
        d = json.loads((mixes.mix_folder(name) / "difficulty.json").read_text())
        share[name] = d["predicted"]["uniform"]["zero_variance_share"]
    assert share["low"] <= 0.3 and share["high"] >= 0.6
