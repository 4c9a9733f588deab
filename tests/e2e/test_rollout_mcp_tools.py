"""A rollout worker on SmolLM2 and the real broker calls a tool of an MCP server started by the test (the
fixture server over stdio); the ToolObservation decoded from `tool-observations` records the call."""

from __future__ import annotations

import asyncio

import pytest
from support.mcp_servers import stdio_server

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.runtime import build_context
from streamgrpo.rollout.tools.config import ToolsSettings
from streamgrpo.rollout.tools.mcp import McpTool
from streamgrpo.rollout.worker import RolloutWorker
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer


@pytest.mark.slow
@pytest.mark.broker
@pytest.mark.model
def test_a_smollm2_rollout_calls_an_mcp_tool_and_the_observation_is_on_the_topic(kafka_ns: KafkaSettings) -> None:
    # one tool, and a prefix that commits the reply to a tool call: the one turn calls fx.echo
    last = {"answer_at_last_turn": False} if "answer_at_last_turn" in RolloutConfig.model_fields else {}
    cfg = RolloutConfig(max_turns=1, concurrency=1, follow_adapters=False, linger_ms=300, response_prefix='{"tool": "',
                        tools=ToolsSettings(enabled=[], mcp_servers=[stdio_server("fx", tools=["echo"])]), **last)
    sampling = R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=32)
    requests = [R.RolloutRequest(R.Envelope.new("test", task_id="t-mcp", group_id="g-mcp", rollout_id=f"g-mcp-r{i}"),
                                 "Shout the word hello.", "test", i, 2, "planner", 0, 1, sampling) for i in range(2)]
    with EventProducer(kafka_ns, "test") as prod:
        for r in requests:
            prod.send(r)
    ctx = build_context(cfg, LocalPolicy("smollm2-135m-instruct"))
    producer = EventProducer(kafka_ns, cfg.service)
    try:
        worker = RolloutWorker(cfg, kafka_ns, ctx, producer)
        stats = asyncio.run(asyncio.wait_for(worker.run(asyncio.Event(), max_rollouts=2), 600))
    finally:
        producer.close()
        next(t for t in ctx.tools.values() if isinstance(t, McpTool)).hub.close()
    assert stats.rollouts == 2
    observations = [r.event for r in read_topic(kafka_ns, "tool-observations", timeout_s=20)]
    assert sorted(o.envelope.rollout_id for o in observations) == ["g-mcp-r0", "g-mcp-r1"]
    for o in observations:
        assert isinstance(o, R.ToolObservation) and o.tool == "fx.echo" and o.executor_mode == "passthrough"
        assert o.error is None and o.command and o.output == o.command.upper()
