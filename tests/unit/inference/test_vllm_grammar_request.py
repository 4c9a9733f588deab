"""What VLLMPolicy sends and checks when the planner grammar applies (no server: an httpx mock transport answers
with token ids chosen here). That the server APPLIES what is sent, and that its logprobs are the masked ones, is
shown on the real server in tests/integration/test_vllm_policy.py; this file pins the request and the client's
own refusals: the Lark text of the grammar at the right turn under ``structured_outputs.grammar``, nothing
without a mask, an arbitrary mask callable refused, a reply the grammar refuses refused, the cut at the end of
the object even without ``stop``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from streamgrpo.avro import records as R
from streamgrpo.inference.constraint import GrammarMask, lark_grammar
from streamgrpo.inference.errors import PolicyError
from streamgrpo.inference.vllm import VLLMPolicy
from streamgrpo.models.grammar import ActionGrammar, TokenGrammar

TOOLS = ("calculator", "python")
SAMPLING = R.SamplingParams(temperature=0.7, top_p=1.0, max_new_tokens=32, seed=3)


@pytest.fixture(scope="module")
def bpe() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = ['{"tool": "calculator", "input": "6*7"}', '{"answer": "42"}', '{"tool": "python", "input": "1"}']
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(corpus * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>")


class Server:
    """Answers /v1/completions with ``replies`` (texts, tokenised with the test's tokenizer, EOS appended)."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.bodies = tokenizer, replies, []  # type: ignore[var-annotated]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        choices = []
        for i, text in enumerate(self.replies[:body["n"]]):
            ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + [eos]
            choices.append({"index": i, "text": text, "finish_reason": "stop",
                            "logprobs": {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": [-0.5] * len(ids)}})
        return httpx.Response(200, json={"choices": choices})


def make(bpe: Any, replies: list[str], **kw: Any) -> tuple[VLLMPolicy, Server]:
    server = Server(bpe, replies)
    kw.setdefault("tokenizer", bpe)
    policy = VLLMPolicy("http://vllm.test/v1", "base", transport=httpx.MockTransport(server), max_retries=0,
                        eos_token_ids=[bpe.convert_tokens_to_ids("<|im_end|>")], vocab_size=len(bpe), **kw)
    return policy, server


def grammar(bpe: Any) -> TokenGrammar:
    return TokenGrammar(ActionGrammar(TOOLS, '{"', (bpe.convert_tokens_to_ids("<|im_end|>"),), answer_turn=2),
                        bpe, len(bpe))


def test_the_grammar_of_the_turn_goes_out_as_structured_outputs(bpe: Any) -> None:
    policy, server = make(bpe, ['tool": "calculator", "input": "6*7"}', 'answer": "42"}'])
    g = grammar(bpe)
    assert policy.applies_logits_mask
    gens = policy.generate([[5, 6]] * 2, SAMPLING, adapter_name="planner", adapter_version=0,
                           logits_mask=GrammarMask(g, 2, turn=1))
    assert server.bodies[-1]["structured_outputs"] == {"grammar": lark_grammar(g.grammar, 1)}
    eos = bpe.convert_tokens_to_ids("<|im_end|>")
    assert [gen.text for gen in gens] == server.replies and all(eos not in gen.token_ids for gen in gens)  # cut
    server.replies = ['answer": "42"}']
    policy.generate([[5, 6]], SAMPLING, adapter_name="planner", adapter_version=0, logits_mask=GrammarMask(g, 1, 2))
    assert server.bodies[-1]["structured_outputs"] == {"grammar": lark_grammar(g.grammar, 2)}
    assert "tool" not in server.bodies[-1]["structured_outputs"]["grammar"]  # the answer turn
    policy.generate([[5, 6]], SAMPLING, adapter_name="planner", adapter_version=0)
    assert "structured_outputs" not in server.bodies[-1]


def test_a_reply_the_grammar_refuses_is_an_error(bpe: Any) -> None:
    """As a server that ignores the field (vLLM >= 0.12 and the old guided_* fields) would answer."""
    policy, _ = make(bpe, ['tool": "rm", "input": "-rf"}'])
    with pytest.raises(PolicyError, match="the planner grammar refuses"):
        policy.generate([[5]], SAMPLING, adapter_name="planner", adapter_version=0,
                        logits_mask=GrammarMask(grammar(bpe), 1, turn=1))
    policy, _ = make(bpe, ['tool": "calculator", "input": "1"}'])  # a call at the turn that must answer
    with pytest.raises(PolicyError, match="the planner grammar refuses"):
        policy.generate([[5]], SAMPLING, adapter_name="planner", adapter_version=0,
                        logits_mask=GrammarMask(grammar(bpe), 1, turn=2))


def test_what_the_policy_cannot_apply_is_refused(bpe: Any) -> None:
    policy, server = make(bpe, ['answer": "42"}'])
    with pytest.raises(PolicyError, match="arbitrary logits mask"):
        policy.generate([[5]], SAMPLING, adapter_name="planner", adapter_version=0, logits_mask=lambda row, s: None)
    bare = VLLMPolicy("http://vllm.test/v1", "base", transport=httpx.MockTransport(server), max_retries=0)
    assert not bare.applies_logits_mask  # no local tokenizer: build_constraint samples it freely ('auto')
    with pytest.raises(PolicyError, match="needs a local tokenizer"):
        bare.generate([[5]], SAMPLING, adapter_name="planner", adapter_version=0,
                      logits_mask=GrammarMask(grammar(bpe), 1, turn=1))
    assert server.bodies == []


def test_a_prefix_the_grammar_cannot_start_from_is_a_clear_error(bpe: Any) -> None:
    policy, server = make(bpe, ['answer": "42"}'])
    g = TokenGrammar(ActionGrammar(TOOLS, "", (bpe.convert_tokens_to_ids("<|im_end|>"),)), bpe, len(bpe))
    inside = object.__new__(TokenGrammar)
    inside.__dict__.update(g.__dict__)
    inside.grammar = ActionGrammar(TOOLS, '{"answer": "4', g.grammar.eos)
    with pytest.raises(PolicyError, match="cannot be sent to vLLM.*reaches into a string value"):
        policy.generate([[5]], SAMPLING, adapter_name="planner", adapter_version=0,
                        logits_mask=GrammarMask(inside, 1, turn=1))
    assert server.bodies == []
