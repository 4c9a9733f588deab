"""A planner reply with a lone surrogate is carried, not a crash loop (issue 24, finding 9).

``{"answer": "4\\ud800"}`` made EncodeError escape ``run_group``: the worker died, the batch was
redelivered and the reply repeated. The worker's sink here encodes every event to real Avro bytes
with the project's codec, as the producer does, and decodes them back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec
from streamgrpo.config import KafkaSettings
from streamgrpo.inference.base import Generation, PlannerPolicy
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.loop import LoopContext
from streamgrpo.rollout.worker import RolloutWorker


class Replies(PlannerPolicy):
    """Every planner reply is the same text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return [1, 2, 3]

    def generate(self, prompts, sampling, *, adapter_name, adapter_version, stop=None):  # type: ignore[no-untyped-def]
        return [Generation(prompt_token_ids=p, text=self.text, token_ids=[7] * 5, logprobs=[-0.5] * 5,
                           adapter_name=adapter_name, adapter_version=adapter_version, latency_ms=1) for p in prompts]

    def load_adapter(self, adapter_name: str, version: int, path: Path) -> None:  # pragma: no cover - never called
        raise NotImplementedError

    def unload_adapter(self, adapter_name: str, version: int) -> None:  # pragma: no cover - never called
        raise NotImplementedError

    def resident_versions(self, adapter_name: str) -> list[int]:
        return []


class EncodingSink:
    """The producer's encoding step: every event becomes Avro bytes (an EncodeError raises, as in send)."""

    def __init__(self) -> None:
        self.codec = Codec()
        self.records: list[bytes] = []

    def send(self, event: R.Event) -> None:
        self.records.append(self.codec.encode(event))

    def flush(self) -> None:
        pass


def _group(n: int = 2) -> list[R.RolloutRequest]:
    return [R.RolloutRequest(R.Envelope.new("test", task_id="t", group_id="g", rollout_id=f"r{i}"), "2+2?", "s", i, n,
                             "planner", 0, 2, R.SamplingParams()) for i in range(n)]


@pytest.mark.parametrize("reply", [r'{"answer": "4\ud800"}', '{"answer": "4\ud800"}', '{"answer": "\udfff4\ud83d"}'],
                         ids=["json-escape", "raw", "several"])
def test_a_reply_with_a_lone_surrogate_completes_its_rollouts(reply: str) -> None:
    sink = EncodingSink()
    worker = RolloutWorker(RolloutConfig(follow_adapters=False), KafkaSettings(),
                           LoopContext(policy=Replies(reply), tools={}), sink)
    results = worker.run_group_sync(_group())
    assert len(results) == 2
    events = [sink.codec.decode(b) for b in sink.records]
    done = [e for e in events if isinstance(e, R.RolloutCompleted)]
    assert sorted(e.envelope.rollout_id for e in done) == ["r0", "r1"]
    assert all("\ufffd" in e.final_answer and "4" in e.final_answer for e in done), [e.final_answer for e in done]
    assert any(isinstance(e, R.PlannerAction) for e in events)
