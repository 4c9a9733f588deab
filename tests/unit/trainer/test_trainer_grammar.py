"""Grammar-constrained planner replies, sampler vs trainer, on the tiny in-process model.

The rollout loop samples every planner reply under the planner grammar (both local engines); the
trainer rebuilds the grammar from ``SamplingParams.constraint``, replays its masks over the action
tokens and recomputes, with the same weights, EXACTLY the behaviour logprobs (masked, renormalised
distribution). Without the replay the recomputation is the free distribution, which differs: the
test would catch a trainer that forgot the mask.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.models.grammar import ActionGrammar, GrammarReplay
from streamgrpo.rollout.loop import LoopContext, run_group
from streamgrpo.rollout.roles import planner
from streamgrpo.rollout.runtime import build_constraint
from streamgrpo.rollout.tools.calculator import Calculator
from streamgrpo.trainer import model as model_module
from streamgrpo.trainer.batching import Batch, admit, build_batch, micro_batches, sampling_mismatch
from streamgrpo.trainer.losses import LossConfig, build_loss
from streamgrpo.trainer.model import ModelSpec, attach_lora, token_logprobs
from streamgrpo.trainer.step import StepConfig, build_optimizer, optimizer_step

TEMPERATURE = 2.0  # the tiny model then closes about half of its replies within the budget


@pytest.fixture(params=["fast", "eager"])
def policy(request: pytest.FixtureRequest) -> Iterator[LocalPolicy]:
    built = LocalPolicy.from_model(build_tiny_model(seed=2), build_tiny_tokenizer(), engine=request.param)
    yield built
    built.close()


def rollouts(policy: LocalPolicy, mode: str = "on", n: int = 6) -> list[R.Event]:
    ctx = LoopContext(policy=policy, tools={"calculator": Calculator()}, response_prefix='{"')
    ctx.constraint = build_constraint(mode, ctx)
    events: list[R.Event] = []
    requests = [R.RolloutRequest(
        envelope=R.Envelope.new("test", task_id="t", group_id="g", rollout_id=f"r{i}"), question="What is 6*7?",
        source="test", rollout_index=i, group_size=n, adapter_name="planner", adapter_version=0, max_turns=2,
        sampling=R.SamplingParams(temperature=TEMPERATURE, top_p=1.0, max_new_tokens=48, seed=11))
        for i in range(n)]
    run_group(requests, ctx, events.append)
    return events


def samples_of(actions: list[R.PlannerAction]) -> list[R.TrainingSample]:
    """One TrainingSample per rollout, as the streams join builds it (turns in order, the actions' sampling)."""
    by_rollout: dict[str, list[R.PlannerAction]] = {}
    for a in actions:
        by_rollout.setdefault(str(a.envelope.rollout_id), []).append(a)
    return [R.TrainingSample(
        envelope=R.Envelope.new("test", task_id="t", group_id="g", rollout_id=rid),
        turns=[R.SampleTurn(turn=int(a.envelope.turn or 0), prompt_token_ids=a.prompt_token_ids,
                            action_token_ids=a.action_token_ids, behaviour_logprobs=a.behaviour_logprobs)
               for a in acts],
        advantage=1.0, reward=1.0, group_mean=0.0, group_std=1.0, group_size=len(by_rollout), estimator="grpo",
        adapter_name="planner", behaviour_version=0, sampling=acts[0].sampling) for rid, acts in by_rollout.items()]


def test_every_constrained_reply_parses_and_records_its_grammar(policy: LocalPolicy) -> None:
    """The tiny model writes gibberish: free, nearly nothing parses; constrained, every reply is a valid
    action for the registered tool (or an answer), and its events say which grammar it was sampled under."""
    actions = [e for e in rollouts(policy) if isinstance(e, R.PlannerAction)]
    grammar = ActionGrammar(("calculator",), '{"', tuple(sorted(policy.eos_ids)), answer_turn=2)  # = max_turns
    assert actions and all(a.sampling.constraint == grammar.descriptor for a in actions)
    last = [a for a in actions if a.envelope.turn == 2]
    assert last and all(planner.parse('{"' + a.action_text).value.is_final for a in last if a.action_text.endswith("}"))
    for a in actions:  # a reply cut by max_new_tokens inside its string is completed by the repair
        parsed = planner.parse('{"' + a.action_text)
        closed = a.action_text.endswith("}")
        assert parsed.status is (R.ParseStatus.STRICT if closed else R.ParseStatus.REPAIRED), a.action_text
        assert parsed.value is not None and (parsed.value.is_final or parsed.value.tool == "calculator")
    assert any(a.action_text.endswith("}") for a in actions)
    free = [e for e in rollouts(policy, "off") if isinstance(e, R.PlannerAction)]
    assert all(a.sampling.constraint is None for a in free)
    assert sum(a.parse_status is R.ParseStatus.FAILED for a in free) > len(free) // 2


def constrained_batch(policy: LocalPolicy) -> Batch:
    samples = samples_of([e for e in rollouts(policy) if isinstance(e, R.PlannerAction)])
    kept, dropped = admit(samples, adapter_name="planner", current_version=0, max_staleness=1, max_seq_len=2048)
    assert kept == samples and not dropped
    replay = GrammarReplay(build_tiny_tokenizer(), policy.vocab_size)
    return build_batch(kept, max_seq_len=2048, normalisation="rollout_mean", max_tokens=64, replay=replay)


@pytest.mark.parametrize("path", ["shared_prefix", "action_only", "full_logits"])
def test_trainer_replays_the_grammar_and_recomputes_the_behaviour_logprobs_exactly(
        policy: LocalPolicy, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = constrained_batch(policy)
    assert batch.grammar_bits.shape[:2] == (batch.input_ids.shape[0], int(batch.action_mask.sum(1).max()))
    if path == "full_logits":  # the path of models whose head is not exposed (logit soft-capping...)
        monkeypatch.setattr(model_module, "_decoder_and_head", lambda model: None)
    share_prefix = path == "shared_prefix"
    model = policy._base
    with torch.no_grad():
        masked = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.temperature,
                                only=batch.action_mask, share_prefix=share_prefix, grammar_bits=batch.grammar_bits)
        free = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.temperature,
                              only=batch.action_mask, share_prefix=share_prefix)
    gap = ((masked - batch.behaviour_logp).abs() * batch.action_mask).max().item()
    assert gap < 1e-5
    assert ((free - batch.behaviour_logp).abs() * batch.action_mask).max().item() > 0.1  # the mask matters


def test_an_optimizer_step_on_constrained_samples_starts_at_importance_ratio_one(policy: LocalPolicy) -> None:
    """The trainer's own step (fresh LoRA on the same weights): the per-version |logp - behaviour| metric is
    ~0 and every importance weight is 1, gradients are finite (-inf logits of disallowed tokens get none)."""
    batch = constrained_batch(policy)
    model = attach_lora(build_tiny_model(seed=2), ModelSpec(base_model="unused", lora_rank=4, lora_alpha=8))
    model.train()
    cfg = StepConfig(loss=build_loss("grpo"), loss_config=LossConfig(kl_coef=0.01))
    metrics = optimizer_step(model, build_optimizer(model, 1e-3), None, micro_batches(batch, 4096), cfg)
    assert metrics["max_abs_log_ratio_v0"] < 1e-5
    assert metrics["is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_samples_under_a_grammar_this_code_does_not_build_are_refused() -> None:
    good = ActionGrammar(("calculator",), '{"', (2,)).descriptor
    tampered = good.replace("calculator", "python")  # same hash, other tools: not what was sampled
    assert sampling_mismatch(R.SamplingParams(temperature=1.0, constraint=good)) is None
    assert "cannot replay" in str(sampling_mismatch(R.SamplingParams(temperature=1.0, constraint=tampered)))


def test_a_reply_the_grammar_does_not_allow_is_refused_by_the_replay() -> None:
    tokenizer = build_tiny_tokenizer()
    replay = GrammarReplay(tokenizer, 128)
    descriptor = ActionGrammar(("calculator",), '{"', (2,)).descriptor
    good = tokenizer.encode('answer": "42"}', add_special_tokens=False)
    assert replay(descriptor, good).shape == (len(good), 4)
    with pytest.raises(ValueError, match="not allowed"):
        replay(descriptor, tokenizer.encode('tool": "python", "input": "1"}', add_special_tokens=False))


def test_the_trainer_refuses_a_sample_whose_tokens_its_grammar_does_not_allow(policy: LocalPolicy) -> None:
    """``loop.replay_error``: what ``accept`` uses to dead-letter such a sample as sampling_mismatch."""
    from streamgrpo.trainer.loop import replay_error

    (good, *_) = samples_of([e for e in rollouts(policy, n=1) if isinstance(e, R.PlannerAction)])
    replay = GrammarReplay(build_tiny_tokenizer(), policy.vocab_size)
    assert replay_error(good, replay) is None
    turn = good.turns[0]
    bad_turn = R.SampleTurn(turn=0, prompt_token_ids=turn.prompt_token_ids,
                            action_token_ids=[turn.action_token_ids[0] + 1, *turn.action_token_ids[1:]],
                            behaviour_logprobs=turn.behaviour_logprobs)
    bad = R.TrainingSample(**{**good.__dict__, "turns": [bad_turn]})
    assert "not allowed" in str(replay_error(bad, replay))
