"""The planner grammar as vLLM receives it (:func:`streamgrpo.inference.constraint.lark_grammar`) masks exactly
the tokens the local grammar masks.

Two llguidance matchers walk the same tokens: the local one (:class:`~streamgrpo.models.grammar.TokenGrammar`:
the JSON schema, the response prefix consumed from the prompt) and one on the Lark text vLLM is sent (nothing
consumed: vLLM's matcher starts at the first generated token). Before every token the two bitmasks must be
equal bit for bit. The walks pick allowed tokens at random (steered towards closing the object after a while,
so most end in the EOS-only state) and also follow real tokenisations of replies with escapes, non-ASCII and
emoji. On an in-process byte-level BPE whose decoder is a Sequence holding ByteLevel (the GGUF-converted
SmolLM2's layout) and, marked ``model``, on SmolLM2's own tokenizer.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from streamgrpo.inference.constraint import GrammarMask, lark_grammar
from streamgrpo.models.grammar import ActionGrammar, TokenGrammar, unpack

TOOLS = ("calculator", "knowledge_search", "python", "srv.lookup-v2")
REPLIES = ['{"tool": "calculator", "input": "6*7"}', '{"answer": "42"}',
           '{"answer": "caf\u00e9 \\n \\"q\\" \\\\ / \U0001f600 \\u00e9"}',
           '{"tool": "srv.lookup-v2", "input": "a\\tb"}', '{"tool": "python", "input": "print(1)"}',
           '{"tool": "calculator", "input": "1", "answer": "2"}']


def bits(matcher: Any, words: int) -> torch.Tensor:
    out = torch.empty(words, dtype=torch.int32)
    matcher.unsafe_compute_mask_ptr(out.data_ptr(), out.numel() * out.element_size())
    return out


def walk_and_compare(grammar: ActionGrammar, tokenizer: Any, vocab: int, turn: int | None, *, walks: int,
                     seed: int = 0) -> int:
    """Random walks + the tokenised :data:`REPLIES`; asserts equal masks before every token. Returns the steps."""
    import llguidance

    local = TokenGrammar(grammar, tokenizer, vocab)
    lark = lark_grammar(grammar, turn)
    rng = random.Random(seed)
    quote_ids = {i for i in range(vocab) if '"' in tokenizer.decode([i])}
    paths: list[list[int] | None] = [
        list(tokenizer.encode(r[len(grammar.prefix):], add_special_tokens=False))
        for r in REPLIES if r.startswith(grammar.prefix)]
    paths += [None] * walks
    steps = ended = 0
    for path in paths:
        a = local.matcher(turn)
        b = llguidance.LLMatcher(local._tokenizer, llguidance.grammar_from("lark", lark), log_level=0)
        assert not b.is_error(), b.get_error()
        for i in range(200):
            ma, mb = bits(a, local.words), bits(b, local.words)
            steps += 1
            assert torch.equal(ma, mb), (
                f"masks differ after {tokenizer.decode(path[:i] if path else [])!r}: local-only "
                f"{(unpack(ma, vocab) & ~unpack(mb, vocab)).nonzero().flatten()[:8].tolist()}, vLLM-only "
                f"{(unpack(mb, vocab) & ~unpack(ma, vocab)).nonzero().flatten()[:8].tolist()}")
            allowed = unpack(ma, vocab).nonzero().flatten().tolist()
            if set(allowed) <= set(grammar.eos):
                ended += 1
                break
            if path is not None:
                if i >= len(path):
                    break
                token = path[i]
            else:
                closing = [t for t in allowed if t in quote_ids] if i > 12 and rng.random() < 0.4 else []
                token = rng.choice(closing or allowed)
            taken_a, taken_b = a.consume_token(token), b.consume_token(token)
            assert taken_a == taken_b, f"token {token} accepted by one matcher only ({taken_a}, {taken_b})"
            if not taken_a:
                break
    assert ended >= walks // 2, f"only {ended} walks reached the end of the object"
    return steps


@pytest.fixture(scope="module")
def bpe() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("▁", " "),
                                      decoders.ByteLevel()])
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(REPLIES * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>")


@pytest.mark.parametrize(("prefix", "answer_in_call", "turn"), [
    ('{"', False, 1), ('{"', False, 4), ("", False, 1), ("{", False, 1), ('{"tool": "calc', False, 1),
    ('{"', True, 1), ('{"', True, 4)])
def test_the_lark_grammar_masks_what_the_local_grammar_masks(bpe: Any, prefix: str, answer_in_call: bool,
                                                             turn: int) -> None:
    grammar = ActionGrammar(TOOLS, prefix, (bpe.convert_tokens_to_ids("<|im_end|>"),), answer_in_call=answer_in_call,
                            answer_turn=4)
    assert walk_and_compare(grammar, bpe, len(bpe), turn, walks=25) > 300


def test_the_forms_and_the_prefix_cut() -> None:
    v2 = ActionGrammar(("calculator", "python"), '{"', (2,), answer_turn=3)
    text = lark_grammar(v2, turn=1)
    assert text.splitlines()[:3] == ['start: "tool\\": \\"calculator\\", \\"input\\": " string_0 "}"',
                                     '     | "tool\\": \\"python\\", \\"input\\": " string_0 "}"',
                                     '     | "answer\\": " string_0 "}"']
    assert '"minLength": 1' in text and '"whitespace_flexible": false' in text
    assert "tool" not in lark_grammar(v2, turn=3)  # the last allowed turn answers
    assert "python" not in lark_grammar(ActionGrammar(("calculator", "python"), '{"tool": "c', (2,)), turn=1)
    with pytest.raises(ValueError, match="does not start a planner reply"):
        lark_grammar(ActionGrammar(("calculator",), "[", (2,)), turn=1)
    with pytest.raises(ValueError, match="reaches into a string value"):
        lark_grammar(ActionGrammar(("calculator",), '{"answer": "4', (2,)), turn=1)


def test_a_grammar_mask_names_its_grammar_and_masks_like_the_local_hook(bpe: Any) -> None:
    grammar = TokenGrammar(ActionGrammar(TOOLS, '{"', (bpe.convert_tokens_to_ids("<|im_end|>"),), answer_turn=2),
                           bpe, len(bpe))
    mask = GrammarMask(grammar, rows=2, turn=2)
    assert mask.grammar is grammar and mask.turn == 2 and mask.descriptor == grammar.descriptor
    hook = grammar.logits_mask(2, 2)
    answer = bpe.encode('answer": "ok"}', add_special_tokens=False)
    for i in range(len(answer)):
        assert torch.equal(mask(1, answer[:i]), hook(1, answer[:i]))


@pytest.mark.model
def test_on_smollm2s_tokenizer(model_cache: Any) -> None:
    from transformers import AutoTokenizer

    from streamgrpo.models.base import resolve_base_model

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_base_model("smollm2-135m-instruct", model_cache)))
    grammar = ActionGrammar(TOOLS, '{"', (2,), answer_turn=3)
    assert walk_and_compare(grammar, tokenizer, 49152, 1, walks=20, seed=1) > 400
    assert walk_and_compare(grammar, tokenizer, 49152, 3, walks=10, seed=2) > 150
