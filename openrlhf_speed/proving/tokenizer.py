"""The proving-ground model's tokenizer: one token per printable ASCII character.

Why characters: a model of a few million parameters cannot afford SmolLM2's 49,152-token
output layer (it would outweigh the rest of the network), and arithmetic read digit by digit
is what a small model learns fastest. The tokenizer is a plain HF `tokenizer.json`
(`tokenizers` WordLevel over single characters), so OpenRLHF, vLLM and the Megatron backend
load it like any other through `AutoTokenizer`.

- Ids 0-3 are `<pad>`, `<s>`, `</s>`, `<unk>`; then "\\n" and the 95 printable ASCII
  characters. Anything else (a non-ASCII letter in a user's data) becomes `<unk>` rather than
  failing. The embedding is padded to VOCAB_SIZE (a multiple of 64) for the matmul kernels.
- No BOS is added on encode: prompts are short, and a missing BOS is one less way for the
  actor's and the engine's token ids to differ.
- The chat template is the smallest one that keeps turns apart: "Q: {user}\\n" and
  "A: {assistant}</s>\\n", ending in "A: " for generation. The model learns to end its answer
  with `</s>`, the eos both vLLM and OpenRLHF stop on.
"""

from __future__ import annotations

import string

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))
VOCAB_SIZE = 128  # 4 specials + 96 characters, padded

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}Q: {{ m['content'] }}\n"
    "{% elif m['role'] == 'assistant' %}A: {{ m['content'] }}</s>\n"
    "{% else %}{{ m['content'] }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}A: {% endif %}"
)

assert set(string.printable) - set(CHARS) <= set("\t\r\x0b\x0c"), "printable ASCII must be covered"


def vocab() -> dict[str, int]:
    return {tok: i for i, tok in enumerate(SPECIALS + tuple(CHARS))}


def build_tokenizer():
    """A `PreTrainedTokenizerFast` with the vocabulary, chat template and special tokens set."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=vocab(), unk_token="<unk>"))
    # Every character is its own piece, spaces and newlines included; Fuse joins them back
    # without the spaces WordLevel's default decoding would insert.
    core.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(list(SPECIALS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=1024,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def special_ids() -> dict[str, int]:
    v = vocab()
    return {"pad_token_id": v["<pad>"], "bos_token_id": v["<s>"], "eos_token_id": v["</s>"]}
