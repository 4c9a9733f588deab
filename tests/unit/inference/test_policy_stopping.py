"""Stopping a planner reply at the end of its JSON object: the scanner and the local sampler (the vLLM
cut is tested in test_policy_vllm.py and against a real server in tests/integration/test_vllm_policy.py)."""

from __future__ import annotations

import pytest
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.inference.stopping import JsonObjectEnd


@pytest.mark.parametrize(("prefix", "reply", "end"), [
    ('{"', 'tool": "calculator", "input": "2+2"} and then more', len('tool": "calculator", "input": "2+2"}')),
    ('{"', 'answer": "a } inside"}{"x": 1}', len('answer": "a } inside"}')),
    ('{"', 'answer": "say \\"}\\" twice"} tail', len('answer": "say \\"}\\" twice"}')),
    ('{"', 'tool": "python", "input": {"code": "x = {1: [2]}"}}\n', len('tool": "python", "input": {"code": "x = {1: [2]}"}}')),
    ('{"', 'a": [1, {"b": 2}, "]"]}', len('a": [1, {"b": 2}, "]"]}')),
    ("", 'Sure! {"answer": "4"} done', len('Sure! {"answer": "4"}')),
    ('{"', 'answer": "never closed', None),
    ("", "no object at all }", None),
    ('{"', 'answer\\\\": 1}', len('answer\\\\": 1}')),  # an escaped backslash does not escape the quote
])
def test_end_of_the_object_is_found(prefix: str, reply: str, end: int | None) -> None:
    assert JsonObjectEnd(prefix).end_of(reply) == end


def test_scanner_is_incremental_and_stops_once() -> None:
    scanner = JsonObjectEnd('{"').scanner()
    pieces = ['tool', '": "', 'calc', '"', ', "input": "1', '+1"', '}\n', '{"x": 1}']
    fed = [scanner.feed(p) for p in pieces]
    assert fed == [None, None, None, None, None, None, 1, None]  # closed by the '}' of the 7th piece only


def test_local_policy_stops_each_row_where_its_object_closes() -> None:
    """Same seed with and without the rule: each stopped row is the unstopped row cut right after the
    character that closes its object (a character-level tokenizer makes that position exact)."""
    tok = build_tiny_tokenizer()
    policy = LocalPolicy.from_model(build_tiny_model(seed=3), tok)
    prompt = policy.chat_prompt([{"role": "user", "content": "plan"}]) + tok.encode('{"', add_special_tokens=False)
    sampling = R.SamplingParams(temperature=1.6, top_p=1.0, max_new_tokens=120, seed=11)
    rule = JsonObjectEnd('{"')
    full = policy.generate([prompt] * 24, sampling, adapter_name="planner", adapter_version=0)
    cut = policy.generate([prompt] * 24, sampling, adapter_name="planner", adapter_version=0, stop=rule)
    closed = 0
    for whole, short in zip(full, cut, strict=True):
        chars = [tok.decode([t], skip_special_tokens=True) for t in whole.token_ids]
        end = rule.end_of("".join(chars))
        if end is None:
            assert short.token_ids == whole.token_ids
            continue
        keep = next(i + 1 for i in range(len(chars)) if len("".join(chars[:i + 1])) >= end)
        assert short.token_ids == whole.token_ids[:keep]
        # a stopped row leaves the decode batch, so the others' matmuls run at another batch size; the CPU
        # kernels for another shape round differently (measured: 5e-7 at one token on this AVX-512 machine)
        assert short.logprobs == pytest.approx(whole.logprobs[:keep], abs=1e-5)
        assert rule.end_of(short.text) == len(short.text)
        closed += 1
    assert closed >= 3, f"only {closed} of 24 random rows closed their object; pick another seed"
