"""The planner-action grammar: descriptors, and masks that only admit valid planner actions.

Random walks over the grammar's masks (any allowed token, uniformly) on two real tokenizers: the tiny
character-level one and a byte-level BPE built in-process whose decoder is a Sequence holding
ByteLevel (the layout of the GGUF-converted SmolLM2 tokenizer, which llguidance needs unwrapped).
Every finished walk must parse strictly into a registered tool call or an answer, and the replay of
its tokens must give exactly the masks the walk saw.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from support.tiny_policy import build_tiny_tokenizer

from streamgrpo.models.grammar import ActionGrammar, TokenGrammar, unpack
from streamgrpo.rollout.roles import planner

TOOLS = ("calculator", "knowledge_search")
CORPUS = ['{"tool": "calculator", "input": "6*7"}', '{"answer": "42"}', '{"tool": "knowledge_search", '
          '"input": "capital of France"}', '{"answer": "Paris is the capital"}', "plain words and numbers 12 34"]


def byte_level_bpe() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("▁", " "),
                                      decoders.ByteLevel()])
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(CORPUS * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>")


def test_descriptor_round_trips_and_refuses_other_grammars() -> None:
    grammar = ActionGrammar(TOOLS, '{"', (2,), answer_turn=4)
    assert ActionGrammar.from_descriptor(grammar.descriptor) == grammar
    assert grammar.descriptor.startswith("next-step/v2?tools=calculator,knowledge_search&")
    assert "answer_turn=4" in grammar.descriptor
    assert ActionGrammar(TOOLS, "", (2,), answer_turn=4).digest != grammar.digest  # the prefix is part of it
    assert ActionGrammar(TOOLS, '{"', (2,), answer_turn=3).digest != grammar.digest  # so is the answer turn
    body, _, digest = grammar.descriptor.rpartition("@")
    with pytest.raises(ValueError, match="hash"):
        ActionGrammar.from_descriptor(f"{body}@{'0' * 12}")
    with pytest.raises(ValueError, match="unknown grammar"):
        ActionGrammar.from_descriptor("planner-json@ab12")
    with pytest.raises(ValueError, match="malformed"):
        ActionGrammar.from_descriptor(body.replace("eos=2", "eos=x") + "@" + digest)


def test_a_v1_descriptor_recorded_before_v2_still_rebuilds_the_same_grammar() -> None:
    """Archived runs replay: the descriptor (and hash) the v1 code wrote for SmolLM2's three tools."""
    recorded = "next-step/v1?tools=calculator,python,knowledge_search&prefix=%7B%22&eos=2@5fc4aad5504f"
    grammar = ActionGrammar.from_descriptor(recorded)
    assert grammar.answer_in_call and grammar.answer_turn == 0 and grammar.descriptor == recorded


def walk(grammar: TokenGrammar, eos: int, rng: random.Random, budget: int = 60) -> tuple[list[int], list[torch.Tensor]]:
    mask = grammar.logits_mask(1)
    tokens: list[int] = []
    seen: list[torch.Tensor] = []
    for _ in range(budget):
        allowed = mask(0, tokens)
        seen.append(allowed)
        choices = allowed.nonzero().squeeze(-1).tolist()
        tokens.append(rng.choice(choices))
        if tokens[-1] == eos:
            break
    return tokens, seen


@pytest.mark.parametrize("which", ["char", "byte_bpe"])
@pytest.mark.parametrize("prefix", ['{"', ""])
def test_every_finished_walk_is_a_valid_action_and_replays_to_the_same_masks(which: str, prefix: str) -> None:
    tokenizer = build_tiny_tokenizer() if which == "char" else byte_level_bpe()
    vocab = len(tokenizer) + 5  # a model's vocabulary may be wider than its tokenizer: never allowed
    eos = tokenizer.eos_token_id
    compiled = TokenGrammar(ActionGrammar(TOOLS, prefix, (eos,)), tokenizer, vocab)
    rng = random.Random(7)
    finished = 0
    for _ in range(60):
        tokens, seen = walk(compiled, eos, rng)
        assert all(not m[len(tokenizer):].any() for m in seen)
        bits = compiled.replay(tokens)
        assert torch.equal(unpack(bits, vocab), torch.stack(seen))
        if tokens[-1] != eos:
            continue
        finished += 1
        parsed = planner.parse(prefix + tokenizer.decode(tokens, skip_special_tokens=True))
        assert parsed.status.value == "STRICT" and parsed.value is not None, tokenizer.decode(tokens)
        assert parsed.value.is_final or parsed.value.tool in TOOLS
    assert finished >= 10


def test_the_byte_level_tokens_of_the_prompt_example_are_allowed() -> None:
    """Tokens holding a space are bytes to the grammar (a ``Ġ`` taken literally would forbid them)."""
    tokenizer = byte_level_bpe()
    compiled = TokenGrammar(ActionGrammar(TOOLS, '{"', (tokenizer.eos_token_id,)), tokenizer, len(tokenizer))
    reply = tokenizer.encode('tool": "calculator", "input": "6*7"}', add_special_tokens=False)
    assert any(" " in tokenizer.decode([t]) for t in reply)
    assert compiled.replay(reply).shape[0] == len(reply)


def test_without_tools_only_an_answer_is_allowed() -> None:
    tokenizer = build_tiny_tokenizer()
    compiled = TokenGrammar(ActionGrammar((), '{"', (2,)), tokenizer, 128)
    allowed = compiled.logits_mask(1)(0, [])
    assert [tokenizer.decode([t]) for t in allowed.nonzero().squeeze(-1).tolist()] == ["a"]


def test_v1_a_tool_call_may_carry_an_answer_which_the_v1_parser_reads_as_final() -> None:
    """next-step/v1 (answer_in_call 'accept'): the base model's usual way of answering under v1."""
    tokenizer = build_tiny_tokenizer()
    compiled = TokenGrammar(ActionGrammar(TOOLS, '{"', (2,), answer_in_call=True), tokenizer, 128)
    reply = 'tool": "calculator", "input": "6*7", "answer": "42"}'
    compiled.replay(tokenizer.encode(reply, add_special_tokens=False) + [2])
    parsed = planner.parse('{"' + reply, answer_in_call=True)
    assert parsed.value is not None and parsed.value.answer == "42"
    ignored = planner.parse('{"' + reply)  # 'ignore' / free replies: the tool runs, the early answer is dropped
    assert ignored.value is not None and ignored.value.tool == "calculator" and not ignored.value.is_final
    with pytest.raises(ValueError, match="not allowed"):  # other keys, or another order, are not
        compiled.replay(tokenizer.encode('tool": "calculator", "answer": "42"}', add_special_tokens=False))


def test_v2_a_tool_call_cannot_carry_an_answer() -> None:
    tokenizer = build_tiny_tokenizer()
    compiled = TokenGrammar(ActionGrammar(TOOLS, '{"', (2,)), tokenizer, 128)
    call = tokenizer.encode('tool": "calculator", "input": "6*7"}', add_special_tokens=False) + [2]
    compiled.replay(call)
    with pytest.raises(ValueError, match="not allowed"):
        compiled.replay(tokenizer.encode('tool": "calculator", "input": "6*7", "answer": "42"}',
                                         add_special_tokens=False))


def test_from_the_answer_turn_on_only_an_answer_is_allowed_and_replays_by_turn() -> None:
    tokenizer = build_tiny_tokenizer()
    compiled = TokenGrammar(ActionGrammar(TOOLS, '{"', (2,)), tokenizer, 128).with_answer_turn(3)
    assert compiled.grammar.answer_turn == 3 and "answer_turn=3" in compiled.descriptor
    first = [tokenizer.decode([t]) for t in compiled.logits_mask(1, turn=2)(0, []).nonzero().squeeze(-1).tolist()]
    last = [tokenizer.decode([t]) for t in compiled.logits_mask(1, turn=3)(0, []).nonzero().squeeze(-1).tolist()]
    assert sorted(first) == ["a", "t"] and last == ["a"]
    call = tokenizer.encode('tool": "calculator", "input": "6*7"}', add_special_tokens=False) + [2]
    compiled.replay(call, turn=2)
    with pytest.raises(ValueError, match="not allowed"):
        compiled.replay(call, turn=3)
    answer = tokenizer.encode('answer": "42"}', add_special_tokens=False) + [2]
    assert torch.equal(compiled.replay(answer, turn=3)[0], compiled.replay(answer, turn=4)[0])
    assert not torch.equal(compiled.replay(answer, turn=3)[0], compiled.replay(answer, turn=2)[0])
