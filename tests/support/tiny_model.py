"""The trainer's tiny test model: a randomly initialised Llama (fp32, CPU) with a character-level tokenizer.

Built in-process (no files, no hub), deterministic for its seed, so trainer, store and replay tests run the
real LoRA and logprob code in seconds; ``model.save_pretrained(dir)`` gives a directory usable as
``base_model``. Its outputs are gibberish by design. Not covered: chat templates (tests/support/tiny_policy.py
builds the rollout side's tiny model), anything about answer quality.
"""

from __future__ import annotations

import string
from typing import Any

import torch


def char_tokenizer() -> Any:
    """A character-level ``PreTrainedTokenizerFast`` over printable ASCII (99 ids; 0 = pad, 1 = bos, 2 = eos)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + list(string.printable[:95]))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def tiny_model(seed: int = 0, hidden: int = 64, layers: int = 2) -> tuple[Any, Any]:
    """A tiny Llama (fp32, CPU) with :func:`char_tokenizer`, deterministic for ``seed``. For tests:
    ``model.save_pretrained(dir)`` gives a directory usable as ``base_model``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.float().eval(), tokenizer


def saved_tiny_model(path: Any, seed: int = 0) -> tuple[Any, Any]:
    """:func:`tiny_model` saved with its tokenizer at ``path`` (a ``base_model`` directory); (model, tokenizer)."""
    model, tokenizer = tiny_model(seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model, tokenizer
