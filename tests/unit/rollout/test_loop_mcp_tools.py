"""The agent loop calls MCP tools like built-ins: the planner (the tiny in-process model under the grammar)
calls a tool of a real stdio MCP server, and the ToolObservation records it under its namespaced name."""

from __future__ import annotations

from support.mcp_servers import stdio_server
from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

from streamgrpo.avro import records as R
from streamgrpo.inference.local import LocalPolicy
from streamgrpo.models.grammar import ActionGrammar
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.loop import run_group
from streamgrpo.rollout.runtime import build_context
from streamgrpo.rollout.tools.config import ToolsSettings
from streamgrpo.rollout.tools.mcp import McpTool


def _request(i: int) -> R.RolloutRequest:
    sampling = R.SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=24, seed=i)
    return R.RolloutRequest(R.Envelope.new("t", task_id="task", group_id="g", rollout_id=f"r{i}"),
                            "Shout the word hello.", "test", i, 2, "planner", 0, 1, sampling)


def test_the_planner_calls_an_mcp_tool_and_the_observation_records_server_and_tool() -> None:
    tools = ToolsSettings(enabled=[], mcp_servers=[stdio_server("fx", tools=["echo"])])
    # the prefix commits every reply to a tool call and fx.echo is the only tool: the one turn calls it
    # (a last turn constrained to answer would refuse that prefix: off where the setting exists)
    last = {"answer_at_last_turn": False} if "answer_at_last_turn" in RolloutConfig.model_fields else {}
    cfg = RolloutConfig(tools=tools, response_prefix='{"tool": "', max_turns=1, **last)
    policy = LocalPolicy.from_model(build_tiny_model(), build_tiny_tokenizer())
    ctx = build_context(cfg, policy)
    try:
        assert list(ctx.tools) == ["fx.echo"]
        assert ctx.constraint is not None
        assert ActionGrammar.from_descriptor(ctx.constraint.descriptor).tools == ("fx.echo",)
        events: list[R.Event] = []
        run_group([_request(0), _request(1)], ctx, events.append)
        observations = [e for e in events if isinstance(e, R.ToolObservation)]
        assert [o.tool for o in observations] == ["fx.echo", "fx.echo"]
        for o in observations:
            assert o.error is None and o.output == o.command.upper() and o.command
            assert o.executor_mode == "passthrough"
    finally:
        next(t for t in ctx.tools.values() if isinstance(t, McpTool)).hub.close()
        policy.close()
