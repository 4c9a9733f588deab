"""A tiny randomly initialised Llama + character-level tokenizer, built in-process (no files, no hub).

For fast unit tests and offline demos of the policy code paths (left padding, KV cache, peft
adapters, logprob bookkeeping). Its outputs are gibberish by design.

What is covered: the same code paths as SmolLM2 (LlamaForCausalLM, chat template, EOS handling).
What is not: anything about answer quality.
"""

from __future__ import annotations

import string
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>", "<unk>"]


def build_tiny_tokenizer() -> Any:
    """Character-level ``PreTrainedTokenizerFast``: ids 0..3 are specials (2 = ``<|im_end|>`` = EOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\r\x0b\x0c"]
    vocab = {tok: i for i, tok in enumerate(SPECIALS + chars)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<|im_end|>",
                                  bos_token="<|im_start|>", unk_token="<unk>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_model(seed: int = 0, vocab_size: int = 128, layers: int = 2) -> Any:
    """A ``LlamaForCausalLM`` with 2 layers, hidden 32, GQA (4 heads / 2 kv heads), float32, eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=True)
    model = LlamaForCausalLM(config).eval()
    # random init gives near-uniform logits; scale the head so sampling is not trivially uniform
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model
