"""The server's grammar-ready tokenizer (:func:`streamgrpo.inference.vllm_server.grammar_tokenizer`) and the
structured-output flags of its command.

vLLM builds llguidance's view of the vocabulary with ``llguidance.hf.from_tokenizer`` on the SERVER's tokenizer
and ends a grammar with that tokenizer's EOS. The local grammar reads the model's tokenizer through
``models.grammar.llguidance_tokenizer`` (which unwraps a Sequence decoder) and ends on the model's EOS ids. The
copy the server gets must make the two views equal, token for token, without changing the tokens, their text or
the chat template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamgrpo.inference.vllm_server import (
    STRUCTURED_OUTPUTS_BACKEND,
    grammar_tokenizer,
    grammar_tokenizer_fixes,
    model_eos_ids,
    server_command,
)
from streamgrpo.models.grammar import llguidance_tokenizer
from streamgrpo.rollout.config import RolloutConfig


def write_model(root: Path, *, sequence_decoder: bool, eos_label: str) -> Path:
    """A model directory with a byte-level BPE tokenizer (the GGUF-converted SmolLM2's layout when
    ``sequence_decoder``), tokenizer EOS ``eos_label`` and generation_config EOS 2 (``<|im_end|>``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = (decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("▁", " "),
                                       decoders.ByteLevel()]) if sequence_decoder else decoders.ByteLevel())
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(['{"tool": "calculator", "input": "6*7"}', '{"answer": "café 42"}'] * 20, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=eos_label, bos_token="<|im_start|>")
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"
    root.mkdir(parents=True)
    tok.save_pretrained(str(root))
    (root / "generation_config.json").write_text(json.dumps({"eos_token_id": 2, "bos_token_id": 1}))
    (root / "config.json").write_text(json.dumps({"eos_token_id": 2, "vocab_size": len(tok)}))
    return root


def server_view(directory: Path) -> Any:
    """What vLLM's guidance backend builds from ``--tokenizer directory``."""
    import llguidance.hf
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(directory))
    return llguidance.hf.from_tokenizer(tok, len(tok)), tok


def local_view(directory: Path) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(directory))
    return llguidance_tokenizer(tok, len(tok), model_eos_ids(directory)), tok


def byte_diffs(a: Any, b: Any, vocab: int) -> int:
    return sum(a.decode_bytes([i]) != b.decode_bytes([i]) for i in range(vocab))


def test_the_copy_makes_the_servers_view_the_local_one(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m", sequence_decoder=True, eos_label="<|im_start|>")
    assert set(grammar_tokenizer_fixes(model)) == {"decoder", "eos_token"}
    (before, _), (local, local_tok) = server_view(model), local_view(model)
    vocab = len(local_tok)
    assert byte_diffs(before, local, vocab) > 50 and before.eos_token == 1  # what vLLM would read unfixed

    fixed = grammar_tokenizer(model, tmp_path / "cache")
    assert fixed is not None and fixed.parent == tmp_path / "cache" / "vllm-tokenizers"
    after, fixed_tok = server_view(fixed)
    assert byte_diffs(after, local, vocab) == 0 and after.eos_token == local.eos_token == 2
    ids = list(range(vocab))
    assert fixed_tok.decode(ids) == local_tok.decode(ids)  # same text
    messages = [{"role": "user", "content": "hi"}]
    assert fixed_tok.apply_chat_template(messages, tokenize=True) == local_tok.apply_chat_template(messages,
                                                                                                 tokenize=True)
    assert grammar_tokenizer(model, tmp_path / "cache") == fixed  # written once
    assert grammar_tokenizer_fixes(fixed) == {}


def test_a_tokenizer_that_is_right_gets_no_copy(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m", sequence_decoder=False, eos_label="<|im_end|>")
    assert grammar_tokenizer_fixes(model) == {} and grammar_tokenizer(model, tmp_path / "cache") is None
    assert not (tmp_path / "cache").exists()


def test_the_command_selects_llguidance_and_the_tokenizer() -> None:
    cfg = RolloutConfig(vllm_url="http://127.0.0.1:8123/v1")
    argv = server_command(cfg, "py", "/models/smol", "/cache/vllm-tokenizers/smol-abc")
    i = argv.index("--structured-outputs-config.backend")
    assert argv[i + 1] == STRUCTURED_OUTPUTS_BACKEND == "guidance"
    assert argv[argv.index("--tokenizer") + 1] == "/cache/vllm-tokenizers/smol-abc"
    assert "--tokenizer" not in server_command(cfg, "py", "/models/smol")


@pytest.mark.model
def test_on_the_converted_smollm2(model_cache: Path, tmp_path: Path) -> None:
    from streamgrpo.models.base import resolve_base_model

    model = Path(resolve_base_model("smollm2-135m-instruct", model_cache))
    fixes = grammar_tokenizer_fixes(model)
    assert fixes["decoder"]["type"] == "ByteLevel" and fixes["eos_token"] == "<|im_end|>"
    fixed = grammar_tokenizer(model, tmp_path)
    assert fixed is not None
    (after, _), (local, _) = server_view(fixed), local_view(model)
    assert byte_diffs(after, local, 49152) == 0 and after.eos_token == local.eos_token == 2
