"""A rollout worker never starts a group on a rolled-back version: the primary serves the whole group."""

from __future__ import annotations

from pathlib import Path

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.inference.base import Generation, PlannerPolicy
from streamgrpo.rollout.adapters import AdapterFollower
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.loop import LoopContext
from streamgrpo.rollout.worker import RolloutWorker


class AnswerAtOnce(PlannerPolicy):
    """Every planner reply is a final answer; records the versions it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return [1, 2, 3]

    def generate(self, prompts, sampling, *, adapter_name, adapter_version, stop=None):  # type: ignore[no-untyped-def]
        self.asked.append(adapter_version)
        text = '{"answer": "4"}'
        return [Generation(prompt_token_ids=p, text=text, token_ids=[ord(c) for c in text], logprobs=[-0.5] * len(text),
                           adapter_name=adapter_name, adapter_version=adapter_version, latency_ms=1) for p in prompts]

    def load_adapter(self, adapter_name: str, version: int, path: Path) -> None:  # pragma: no cover - never called
        raise NotImplementedError

    def unload_adapter(self, adapter_name: str, version: int) -> None:  # pragma: no cover - never called
        raise NotImplementedError

    def resident_versions(self, adapter_name: str) -> list[int]:
        return []


class Sink:
    def __init__(self) -> None:
        self.events: list[R.Event] = []

    def send(self, event: R.Event) -> None:
        self.events.append(event)

    def flush(self) -> None:
        pass


def group(version: int, n: int = 3) -> list[R.RolloutRequest]:
    return [R.RolloutRequest(R.Envelope.new("test", task_id="t", group_id="g", rollout_id=f"r{i}"), "2+2?", "s", i, n,
                             "planner", version, 2, R.SamplingParams()) for i in range(n)]


def test_a_group_asked_on_a_rolled_back_version_runs_on_the_primary() -> None:
    policy, sink = AnswerAtOnce(), Sink()
    follower = AdapterFollower(policy, adapter_name="planner", canary_share=0.5)
    follower.registry.apply(R.AdapterPublished(R.Envelope.new("trainer"), "planner", 1, "/a/1", "0" * 64, "b", 1, []))
    follower.registry.apply(R.AdapterRolledBack(R.Envelope.new("ab-controller"), "planner", 1, 0, "worse"))
    assert follower.serving_version("planner", 1) == 0 and follower.serving_version("planner", 0) == 0
    worker = RolloutWorker(RolloutConfig(follow_adapters=False), KafkaSettings(), LoopContext(policy=policy, tools={}),
                           sink, follower)
    results = worker.run_group_sync(group(1))
    assert len(results) == 3 and policy.asked == [0]  # one batched call, on the primary (the base model)
    done = [e for e in sink.events if isinstance(e, R.RolloutCompleted)]
    actions = [e for e in sink.events if isinstance(e, R.PlannerAction)]
    assert {e.adapter_version for e in done + actions} == {0}  # the events record the version that served
