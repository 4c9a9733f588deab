"""MCP tools against real MCP servers (the ``mcp`` package's MCPServer, as a stdio child and as an HTTP
subprocess): registration, calls, and every failure as an observation error, never an exception."""

from __future__ import annotations

import time

import pytest
from support.mcp_servers import free_port, http_server, stdio_server

from streamgrpo.rollout.tools import build_tools, call_tool
from streamgrpo.rollout.tools.config import McpServerSettings, ToolsSettings
from streamgrpo.rollout.tools.mcp import McpTool, spec_from_schema, tool_name


@pytest.fixture(scope="module")
def fx_tools():
    """The fixture server's tools over stdio, built once (its child process lives for the module)."""
    tools = build_tools(settings=ToolsSettings(enabled=["calculator"], max_output_chars=500,
                                               mcp_servers=[stdio_server(timeout_s=1.5, max_result_chars=5000)]))
    yield tools
    next(t for t in tools.values() if isinstance(t, McpTool)).hub.close()


def test_the_servers_tools_are_registered_after_the_builtins_namespaced_and_described(fx_tools) -> None:
    assert list(fx_tools) == ["calculator", "fx.echo", "fx.add", "fx.slow", "fx.huge", "fx.fail", "fx.die"]
    echo = fx_tools["fx.echo"].spec
    assert echo.description.startswith("Repeat the text back, in capitals.")
    assert [(p.name, p.type, p.required) for p in fx_tools["fx.add"].spec.params] == [
        ("a", "integer", True), ("b", "integer", True)]
    assert "MCP server 'fx'" in echo.limits


def test_calls_return_the_servers_answers(fx_tools) -> None:
    assert call_tool(fx_tools, "fx.echo", "hello there").output == "HELLO THERE"  # plain text -> first param
    result = call_tool(fx_tools, "fx.add", '{"a": 2, "b": "40"}')
    assert (result.output, result.error) == ("42", None)


def test_a_slow_tool_times_out_as_an_error_and_the_connection_stays_usable(fx_tools) -> None:
    start = time.monotonic()
    result = call_tool(fx_tools, "fx.slow", '{"seconds": 5}')
    assert result.error is not None and "timed out" in result.error.lower()
    assert time.monotonic() - start < 4.5
    assert call_tool(fx_tools, "fx.echo", "still here").output == "STILL HERE"


def test_an_error_result_and_an_oversized_result_are_errors_and_long_ones_are_cut(fx_tools) -> None:
    failed = call_tool(fx_tools, "fx.fail", "boom")
    assert failed.error is not None and failed.error.startswith("the MCP tool failed")
    too_big = call_tool(fx_tools, "fx.huge", '{"chars": 6000}')
    assert too_big.error is not None and "too large (6000 characters; the limit is 5000)" in too_big.error
    long = call_tool(fx_tools, "fx.huge", '{"chars": 1000}')
    assert long.ok and long.truncated and len(long.output) == 500


def test_a_server_that_disappears_is_restarted_and_the_next_call_succeeds(fx_tools) -> None:
    died = call_tool(fx_tools, "fx.die", "{}")  # the server exits mid-call; reconnected, retried once, exits again
    assert died.error is not None and "Connection closed" in died.error
    assert call_tool(fx_tools, "fx.echo", "back").output == "BACK"


def test_a_malformed_result_is_an_observation_error() -> None:
    tools = build_tools([], ToolsSettings(mcp_servers=[stdio_server("bad", "--malformed")]))
    try:
        result = call_tool(tools, "bad.echo", "hi")
        assert result.error is not None and "malformed result from the server" in result.error
    finally:
        tools["bad.echo"].hub.close()  # type: ignore[attr-defined]


def test_a_server_down_at_start_keeps_its_listed_tools_and_each_call_is_an_error() -> None:
    down = McpServerSettings(name="down", url=f"http://127.0.0.1:{free_port()}/mcp", tools=["lookup"],
                             connect_timeout_s=2, reconnect_attempts=2, backoff_s=0.05)
    unlisted = down.model_copy(update={"name": "gone", "tools": []})
    tools = build_tools([], ToolsSettings(mcp_servers=[down, unlisted]))
    assert list(tools) == ["down.lookup"]
    result = call_tool(tools, "down.lookup", "x")
    assert result.error is not None and result.error.startswith("MCP server 'down' tool 'lookup'")
    tools["down.lookup"].hub.close()  # type: ignore[attr-defined]


def test_the_http_transport_registers_and_calls_the_same_tools() -> None:
    with http_server() as url:
        tools = build_tools([], ToolsSettings(mcp_servers=[McpServerSettings(name="web", url=url, tools=["echo"])]))
        try:
            assert list(tools) == ["web.echo"]
            assert call_tool(tools, "web.echo", "over http").output == "OVER HTTP"
        finally:
            tools["web.echo"].hub.close()  # type: ignore[attr-defined]


def test_names_are_grammar_safe_and_nested_arguments_travel_as_json() -> None:
    assert tool_name("srv", "look up,now!") == "srv.look_up_now_"
    spec, as_json = spec_from_schema("s.t", "Find.", {"properties": {"q": {"type": "string"},
                                                                     "filters": {"type": "object"}},
                                                      "required": ["q"]}, "s", 3)
    assert [(p.name, p.type) for p in spec.params] == [("q", "string"), ("filters", "string")]
    assert as_json == {"filters"}


def test_settings_refuse_two_transports_and_duplicate_names() -> None:
    with pytest.raises(ValueError, match="exactly one of command"):
        McpServerSettings(name="x", command=["a"], url="http://h/mcp")
    with pytest.raises(ValueError, match="unique"):
        ToolsSettings(mcp_servers=[McpServerSettings(name="x", url="http://h/mcp")] * 2)
    with pytest.raises(ValueError):
        McpServerSettings(name="a,b", url="http://h/mcp")
