"""Rollout worker on the real broker: 2 groups x N=4 requests -> every rollout's events, read back as Avro.

Runs once with the tiny in-process model (fast, gibberish outputs: exercises parse failures) and once
with SmolLM2-135M (``model``). Model-free roles, small token budgets and 2 turns keep it short on CPU.
A third group asks for an adapter version that never appears: its rollouts must end as ERROR (no
silent fallback to the base model).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.runtime import build_context
from streamgrpo.rollout.worker import RolloutWorker
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

N = 4
QUESTIONS = {"g-math": "What is 17 times 3?", "g-fact": "In which year did the Apollo 11 mission land on the Moon?"}


def make_requests(group_id: str, question: str, n: int, version: int = 0, max_turns: int = 2) -> list[R.RolloutRequest]:
    sampling = R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=48, seed=None)
    return [R.RolloutRequest(
        envelope=R.Envelope.new("test-fanout", task_id=f"task-{group_id}", group_id=group_id,
                                rollout_id=f"{group_id}-r{i}"),
        question=question, source="builtin", rollout_index=i, group_size=n, adapter_name="planner",
        adapter_version=version, max_turns=max_turns, sampling=sampling) for i in range(n)]


def tiny_policy():
    from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

    from streamgrpo.inference.local import LocalPolicy

    return LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer())


def smollm2_policy():
    from streamgrpo.inference.local import LocalPolicy

    return LocalPolicy("smollm2-135m-instruct")


@pytest.mark.broker
@pytest.mark.parametrize("make_policy", [pytest.param(tiny_policy, id="tiny"),
                                         pytest.param(smollm2_policy, id="smollm2", marks=pytest.mark.model)])
def test_worker_emits_complete_event_sets_for_two_groups(kafka_ns: KafkaSettings, make_policy) -> None:
    cfg = RolloutConfig(max_turns=2, concurrency=2, adapter_wait_s=0.5, linger_ms=500, follow_adapters=False,
                        tools={"enabled": ["calculator", "knowledge_search"]})
    requests = [r for gid, q in QUESTIONS.items() for r in make_requests(gid, q, N)]
    missing = make_requests("g-missing-adapter", "What is 2+2?", 2, version=7)
    with EventProducer(kafka_ns, "test-fanout") as prod:
        for r in requests + missing:
            prod.send(r)
    ctx = build_context(cfg, make_policy())
    producer = EventProducer(kafka_ns, cfg.service)
    worker = RolloutWorker(cfg, kafka_ns, ctx, producer)
    stats = asyncio.run(asyncio.wait_for(worker.run(asyncio.Event(), max_rollouts=len(requests) + 2), 900))
    producer.close()
    assert stats.rollouts == len(requests) + 2

    events = {t: [r.event for r in read_topic(kafka_ns, t, timeout_s=20)]
              for t in ("planner-actions", "tool-observations", "verdicts", "rollouts")}
    by_rollout: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for topic, evs in events.items():
        for e in evs:
            by_rollout[e.envelope.rollout_id][topic].append(e)

    for req in requests:
        rid, env = req.envelope.rollout_id, req.envelope
        got = by_rollout[rid]
        done = got["rollouts"]
        assert len(done) == 1, f"{rid}: expected exactly one RolloutCompleted, got {len(done)}"
        completed = done[0]
        assert completed.status in (R.RolloutStatus.ANSWERED, R.RolloutStatus.MAX_TURNS), completed.error
        assert completed.adapter_version == 0 and completed.group_size == N and completed.question == req.question
        actions = sorted(got["planner-actions"], key=lambda a: a.envelope.turn)
        assert [a.envelope.turn for a in actions] == list(range(1, completed.turns + 1))
        for a in actions:
            assert len(a.action_token_ids) == len(a.behaviour_logprobs) > 0
            assert a.prompt_token_ids and a.adapter_name == "planner" and a.adapter_version == 0
            # the request's sampling, with the planner grammar the local policy applied (constrain=auto)
            assert ctx.constraint is not None
            grammar = ctx.grammar_for(req)  # the worker's grammar, its answer turn = the request's max_turns
            assert grammar is not None and grammar.grammar.answer_turn == req.max_turns
            assert a.sampling == dataclasses.replace(req.sampling, constraint=grammar.descriptor)
            assert a.envelope.event_id == ids.derived_id("planner_action", rid, a.envelope.turn)
        tool_turns = [a.envelope.turn for a in actions if a.tool and not a.is_final]
        assert sorted(o.envelope.turn for o in got["tool-observations"]) == tool_turns
        assert all(o.executor_mode == "passthrough" for o in got["tool-observations"])
        verdicts = got["verdicts"]
        assert sorted(v.envelope.turn for v in verdicts) == list(range(1, completed.turns + 1))
        assert all(v.verifier_mode == "rule" for v in verdicts)
        for e in actions + got["tool-observations"] + verdicts + done:
            assert (e.envelope.task_id, e.envelope.group_id) == (env.task_id, env.group_id)

    for req in missing:
        (completed,) = by_rollout[req.envelope.rollout_id]["rollouts"]
        assert completed.status is R.RolloutStatus.ERROR and "planner@v7 not available" in (completed.error or "")
        assert not by_rollout[req.envelope.rollout_id]["planner-actions"]


@pytest.mark.broker
def test_fallback_when_allowed_records_the_version_that_actually_served(kafka_ns: KafkaSettings) -> None:
    cfg = RolloutConfig(adapter_wait_s=0.2, linger_ms=200, follow_adapters=False,
                        serve_resident_fallback=True, tools={"enabled": ["calculator"]})
    requests = make_requests("g-fallback", "What is 6 times 7?", 2, version=9, max_turns=1)  # honoured as asked
    with EventProducer(kafka_ns, "test-fanout") as prod:
        for r in requests:
            prod.send(r)
    producer = EventProducer(kafka_ns, cfg.service)
    worker = RolloutWorker(cfg, kafka_ns, build_context(cfg, tiny_policy()), producer)
    asyncio.run(asyncio.wait_for(worker.run(asyncio.Event(), max_rollouts=2), 300))
    producer.close()
    actions = [r.event for r in read_topic(kafka_ns, "planner-actions", timeout_s=20)]
    done = [r.event for r in read_topic(kafka_ns, "rollouts", timeout_s=20)]
    assert len(actions) == 2 and {a.adapter_version for a in actions} == {0}  # nothing resident: base served
    assert len(done) == 2 and {d.adapter_version for d in done} == {0}
    assert all(d.status is not R.RolloutStatus.ERROR for d in done)


@pytest.mark.broker
def test_resident_adapter_serves_the_group_and_is_pinned_while_it_runs(kafka_ns: KafkaSettings, tmp_path,
                                                                      monkeypatch) -> None:
    monkeypatch.setenv("STREAMGRPO_HEARTBEAT_FILE", str(tmp_path / "rollout.hb"))
    import torch
    from peft import LoraConfig, get_peft_model
    from support.tiny_policy import build_tiny_model

    from streamgrpo.models.adapter_store import Manifest, write_version

    torch.manual_seed(3)
    lora = get_peft_model(build_tiny_model(), LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                                          init_lora_weights=False))
    path, _ = write_version(tmp_path, Manifest(adapter_name="planner", version=3, parent_version=2,
                                               base_model="in-process", trainer_step=3), lora)
    policy = tiny_policy()
    policy.load_adapter("planner", 3, path)
    cfg = RolloutConfig(adapter_wait_s=0.2, linger_ms=200, follow_adapters=False,
                        tools={"enabled": ["calculator"]})
    requests = make_requests("g-v3", "What is 6 times 7?", 3, version=3, max_turns=1)
    with EventProducer(kafka_ns, "test-fanout") as prod:
        for r in requests:
            prod.send(r)
    pins_seen: list[int] = []
    ctx = build_context(cfg, policy)
    original = ctx.policy.generate

    def generate_and_watch(prompts, sampling, *, adapter_name, adapter_version, stop=None, logits_mask=None):
        pins_seen.append(policy._slots.pin_count(adapter_name, adapter_version))
        return original(prompts, sampling, adapter_name=adapter_name, adapter_version=adapter_version, stop=stop,
                        logits_mask=logits_mask)

    ctx.policy.generate = generate_and_watch  # observe the real policy's pin state; generation is unchanged
    producer = EventProducer(kafka_ns, cfg.service)
    worker = RolloutWorker(cfg, kafka_ns, ctx, producer)
    asyncio.run(asyncio.wait_for(worker.run(asyncio.Event(), max_rollouts=3), 300))
    producer.close()
    assert pins_seen == [1] and policy._slots.pin_count("planner", 3) == 0  # pinned during, released after
    assert (tmp_path / "rollout.hb").exists()  # the worker loop beat the liveness file
    actions = [r.event for r in read_topic(kafka_ns, "planner-actions", timeout_s=20)]
    done = [r.event for r in read_topic(kafka_ns, "rollouts", timeout_s=20)]
    assert len(actions) == 3 and {a.adapter_version for a in actions} == {3}
    assert len(done) == 3 and {d.adapter_version for d in done} == {3}
