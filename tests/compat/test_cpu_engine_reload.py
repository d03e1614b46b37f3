"""vLLM's CPU weight reload against Hugging Face, on the embedded (tied-embedding) model.

Our CPU weight sync lands the actor's tensors through vLLM's `reload_weights`, then re-packs
the LM head (`compat.weight_sync.repack_cpu_embeddings`). This checks, on the pinned vLLM,
that after a reload the engine's log-probs are the new model's (HF in fp32 with the same
perturbed weights), and that the re-pack is what makes them so: without it the engine
computes logits with the initial LM head.
"""

import os

import pytest
import torch

pytestmark = pytest.mark.slow
TEXT = "Question: what is 17 + 25? Answer: 17 + 25 = 42, so the answer is 42."


@pytest.fixture(scope="module")
def model_path():
    from openrlhf_speed.models.default_model import ModelNotFoundError, resolve_model

    try:
        return resolve_model(None)
    except ModelNotFoundError as err:
        pytest.skip(str(err))


def test_reload_then_repack_gives_the_new_models_log_probs(model_path, tmp_path):
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc of a function
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM, SamplingParams

    from openrlhf_speed.compat.weight_sync import repack_cpu_embeddings

    ids = AutoTokenizer.from_pretrained(model_path)(TEXT)["input_ids"]
    x = torch.tensor([ids])
    hf = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()

    def hf_log_probs():
        with torch.no_grad():
            return torch.log_softmax(hf(x).logits[0, :-1], -1).gather(-1, x[0, 1:, None])[:, 0]

    llm = LLM(model=model_path, dtype="float32", enforce_eager=True, max_model_len=128, enable_prefix_caching=False)
    params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)

    def engine_log_probs():
        out = llm.generate({"prompt_token_ids": ids}, params, use_tqdm=False)[0]
        return torch.tensor([out.prompt_logprobs[t][ids[t]].logprob for t in range(1, len(ids))])

    assert (engine_log_probs() - hf_log_probs()).abs().max() < 1e-4
    torch.manual_seed(0)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 2e-3)
    hf.save_pretrained(tmp_path / "new")
    llm.collective_rpc("reload_weights", kwargs={"weights_path": str(tmp_path / "new"), "is_checkpoint_format": True})
    stale = (engine_log_probs() - hf_log_probs()).abs().max().item()
    assert llm.collective_rpc(lambda worker: repack_cpu_embeddings(worker.model_runner.model)) == [2]
    fresh = (engine_log_probs() - hf_log_probs()).abs().max().item()
    assert stale > 1e-2, f"vLLM's reload now re-packs the LM head itself ({stale}): the re-pack may be unneeded"
    assert fresh < 1e-4, fresh
