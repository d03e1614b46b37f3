"""Exact fingerprints of model tensors, to prove that a weight sync landed.

A fingerprint is the SHA-1 of the tensor's bytes, so two sides agree only if every bit
agrees. vLLM's CPU backend repacks linear weights into oneDNN handles after loading, so
the engine side fingerprints the tensors it still holds as plain parameters (embeddings,
which SmolLM2 ties to the LM head, and every norm); they are trained like the rest.
Both actor backends fingerprint their side, rollout's engines theirs, and rollout's trainer
compares them (`--check.weight_sync`).
"""

import hashlib

import torch


def fingerprint(tensor: torch.Tensor) -> str:
    t = tensor.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return hashlib.sha1(t.numpy().tobytes()).hexdigest()


def fingerprints(named_tensors) -> dict:
    """{name: (shape, sha1)} of every non-empty tensor."""
    return {name: (tuple(t.shape), fingerprint(t)) for name, t in named_tensors if t.numel() > 0}


def compare(actor: dict, engine: dict, previous: dict | None = None) -> dict:
    """Counts for the tensors both sides hold with the same shape."""
    # tuple(): vLLM's RPC serializer returns the shapes as lists.
    common = [n for n in actor if n in engine and tuple(actor[n][0]) == tuple(engine[n][0])]
    mismatched = [n for n in common if actor[n][1] != engine[n][1]]
    changed = [n for n in common if previous is not None and n in previous and previous[n][1] != actor[n][1]]
    return {"compared": len(common), "mismatched": mismatched, "changed": len(changed)}
