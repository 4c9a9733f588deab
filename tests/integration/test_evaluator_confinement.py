"""The in-loop evaluator loads announced adapters only from its adapter store (issue 23): an
``AdapterPublished`` on the real broker whose uri points outside the store -- with the right sha256 of real
peft files, so only the confinement can refuse it -- is logged as skipped with the reason, never evaluated
or published, and the evaluator carries on (the version announced inside the store is evaluated and
published). Real parts: the embedded broker, Avro events, a tiny in-process Llama with real peft adapters."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings, LoopSettings
from streamgrpo.errors import StreamGRPOError
from streamgrpo.evaluation.service import EvaluatorSettings, serve
from streamgrpo.evaluation.session import EvalSession
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.models import adapter_store as store
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.runtime import build_context
from streamgrpo.rollout.tools.config import ToolsSettings
from streamgrpo.streams.config import StreamsSettings
from streamgrpo.topics import catalog
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker


def _adapter(out: Path) -> str:
    """A real peft adapter of the tiny model at ``out``; its store sha256."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    model = get_peft_model(build_tiny_model(), LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    model.save_pretrained(str(out))
    return store.sha256_dir(out)


def _published(version: int, path: Path, sha: str) -> R.AdapterPublished:
    return R.AdapterPublished(envelope=R.Envelope.new("trainer"), adapter_name="planner", version=version,
                              uri=path.as_uri(), sha256=sha, base_model="in-process", trainer_step=version, lineage=[])


def _session(kafka: KafkaSettings, adapter_store: Path) -> EvalSession:
    rollout = RolloutConfig(tools=ToolsSettings(enabled=["calculator"]))
    session = EvalSession(rollout, LoopSettings(adapter_store=adapter_store, max_turns=1),
                          StreamsSettings(max_new_tokens=4), JudgeSettings(), kafka)
    session._ctx = build_context(rollout, LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer()))
    return session


def _run_until(settings: EvaluatorSettings, session: EvalSession, done: Callable[[], object],
               timeout_s: float = 240) -> list[Exception]:
    """``serve`` in a thread until ``done()`` (or the timeout); the exceptions it raised."""
    stop, errors = threading.Event(), list[Exception]()

    def target() -> None:
        try:
            serve(settings, session, stop)
        except (StreamGRPOError, OSError, RuntimeError, ValueError) as exc:  # reported by the test, not swallowed
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while thread.is_alive() and not done() and time.monotonic() < deadline:
        time.sleep(1.0)
    alive = thread.is_alive()
    stop.set()
    thread.join(30)
    assert alive or errors, "the evaluator returned by itself"
    return errors


def test_an_announcement_outside_the_store_is_skipped_with_its_reason(
        kafka_ns: KafkaSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    adapter_store, outside = tmp_path / "store", tmp_path / "outside"
    inside_dir = store.version_dir(adapter_store, "planner", 1)
    inside_dir.parent.mkdir(parents=True)
    outside_dir = outside / "planner" / "v2"
    outside_dir.parent.mkdir(parents=True)
    events = [_published(1, inside_dir, _adapter(inside_dir)), _published(2, outside_dir, _adapter(outside_dir))]
    with EventProducer(kafka_ns, "test") as producer:
        for event in events:
            producer.send(event)
        producer.flush()
    session = _session(kafka_ns, adapter_store)
    settings = EvaluatorSettings(limit=1, include_base=False, batch_size=1, nice=0, poll_s=0.2, metrics_port=0)

    def evaluations() -> dict[int, R.EvaluationCompleted]:
        return {e.adapter_version: e for e in (r.event for r in read_topic(kafka_ns, catalog.EVALUATIONS))
                if isinstance(e, R.EvaluationCompleted)}

    def skipped() -> list[str]:
        return [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="streamgrpo.evaluation.service"):
        errors = _run_until(settings, session, lambda: 1 in evaluations() and (2 in evaluations() or skipped()))
    assert errors == []
    assert sorted(evaluations()) == [1], "only the version inside the store is evaluated and published"
    assert evaluations()[1].trigger == "run-evaluator"
    [message] = skipped()
    assert "v2 skipped" in message and "outside the adapter store" in message and str(outside_dir) in message
    assert 2 not in session.context().policy.resident_versions("planner")  # never loaded
