"""Each training prompt's tag for `--speed.prior_key` (speed_seq's per-tag prior), read from
the very rows OpenRLHF trains on.

OpenRLHF's PromptDataset keeps only the rendered prompts and labels, so the tag column is read
again with OpenRLHF's own `blending_datasets` and the same arguments as its prepare_datasets:
the same files, probabilities, seed, split and max_samples give the same rows in the same
order. Rows the driver skips as too long are dropped from the tags as from the prompts.
"""

from __future__ import annotations


def prompt_tags(args, strategy, key: str, count: int, skipped=()) -> list:
    """[P] tag indices (the sorted distinct values of `key`, as strings) of the training rows,
    less the `skipped` row indices; ValueError naming the flag when the rows lack the key."""
    from openrlhf.datasets.utils import blending_datasets

    data = blending_datasets(args.data.prompt_dataset, args.data.prompt_probs, strategy, args.train.seed,
                             max_count=args.data.max_samples, dataset_split=args.data.prompt_split)
    data = data.select(range(min(args.data.max_samples, len(data))))
    if key not in data.column_names:
        raise ValueError(f"--speed.prior_key {key!r}: the rows of --data.prompt_dataset have no such field (they have "
                         f"{', '.join(data.column_names)}); name one of those or leave the flag out")
    if len(data) != count:
        raise ValueError(f"--speed.prior_key {key!r}: read {len(data)} rows, but the training set has {count}")
    values = [str(v) for v in data[key]]
    index = {v: i for i, v in enumerate(sorted(set(values)))}
    drop = set(skipped)
    return [index[v] for i, v in enumerate(values) if i not in drop]
