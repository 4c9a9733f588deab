from __future__ import annotations

from typing import Any

import pytest

from streamgrpo.rollout.tools import (
    TOOL_FACTORIES,
    ToolContext,
    build_tools,
    call_tool,
    coerce_args,
    render_tools,
)
from streamgrpo.rollout.tools.base import Param, Tool, ToolResult, ToolSpec, truncate, validate_args
from streamgrpo.rollout.tools.config import ToolsSettings
from streamgrpo.rollout.tools.errors import ToolConfigError, ToolInputError


class Echo(Tool):
    spec = ToolSpec("echo", "Repeats its text n times.",
                    (Param("text", "string", "what to repeat"), Param("n", "integer", "times", False, 1)))

    def _call(self, args: dict[str, Any]) -> str:
        if args["n"] < 0:
            raise ToolInputError("n must be >= 0")
        return args["text"] * args["n"]


def test_run_validates_truncates_and_times() -> None:
    tool = Echo(max_output_chars=50)
    ok = tool.run({"text": "ab", "n": 3})
    assert ok == ToolResult(output="ababab", error=None, truncated=False, duration_ms=ok.duration_ms)
    long = tool.run({"text": "x", "n": 500})
    assert long.truncated and len(long.output) == 50 and long.output.endswith("[truncated]")
    assert tool.run({"text": "x", "n": -1}).error == "n must be >= 0"
    assert tool.run({"text": "x", "n": "2"}).output == "xx"  # "2" coerced to an integer


@pytest.mark.parametrize(
    ("args", "fragment"),
    [({}, "missing required argument 'text'"), ({"text": "a", "m": 1}, "unknown argument(s) ['m']"),
     ({"text": "a", "n": "two"}, "must be of type integer"), ({"text": "a", "n": True}, "got a boolean"),
     ({"text": ["a"]}, "must be of type string")],
)
def test_bad_arguments_become_errors(args: dict[str, Any], fragment: str) -> None:
    result = Echo().run(args)
    assert result.error is not None and fragment in result.error
    assert 'call echo with {"text": <string>, "n": <integer, optional>}' in result.error


def test_validate_args_rejects_non_mapping() -> None:
    with pytest.raises(ToolInputError, match="must be a JSON object"):
        validate_args(Echo.spec, ["text"])  # type: ignore[arg-type]


def test_truncate_bounds() -> None:
    assert truncate("abc", 10) == ("abc", False)
    text, cut = truncate("a" * 100, 20)
    assert cut and len(text) == 20


def test_coerce_args() -> None:
    assert coerce_args(Echo.spec, '{"text": "a", "n": 2}') == {"text": "a", "n": 2}
    assert coerce_args(Echo.spec, "  12**2 ") == {"text": "12**2"}
    assert coerce_args(Echo.spec, "{not json") == {"text": "{not json"}


def test_build_tools_from_settings_and_render() -> None:
    tools = build_tools(settings=ToolsSettings())
    assert list(tools) == ["calculator", "python", "knowledge_search"]
    text = render_tools(tools)
    for name, tool in tools.items():
        assert f"### {name}" in text
        assert tool.spec.description in text
        assert f"Limits: {tool.spec.limits}" in text
    assert 'Example: {"expression": "347 * 29"} -> 10063' in text
    schema = tools["knowledge_search"].spec.json_schema()
    assert schema["required"] == ["query"] and set(schema["properties"]) == {"query", "k"}


def test_build_tools_errors() -> None:
    with pytest.raises(ToolConfigError, match="unknown tool"):
        build_tools(["calculator", "teleporter"])
    with pytest.raises(ToolConfigError, match="needs a model"):
        build_tools(["generalist"])
    tools = build_tools(["generalist"], context=ToolContext(generate=lambda prompt: "42"))
    assert tools["generalist"].run({"question": "answer?"}).output == "42"
    assert set(TOOL_FACTORIES) == {"calculator", "python", "knowledge_search", "wikipedia", "generalist"}


def test_every_tool_has_metadata_and_examples() -> None:
    tools = build_tools(list(TOOL_FACTORIES), context=ToolContext(generate=str.upper))
    for tool in tools.values():
        assert tool.spec.description and tool.spec.params and tool.spec.limits
        assert 1 <= len(tool.spec.examples) <= 2
        for ex in tool.spec.examples:
            assert validate_args(tool.spec, ex.args)


def test_settings_bound_output_of_every_tool() -> None:
    tools = build_tools(["calculator"], ToolsSettings(max_output_chars=64))
    assert tools["calculator"].run({"expression": "2**1000"}).truncated


def test_call_tool_by_name_with_raw_commands() -> None:
    tools = build_tools(["calculator", "knowledge_search"])
    assert call_tool(tools, "calculator", "12**2").output == "144"
    assert call_tool(tools, " calculator ", '{"expression": "2+3"}').output == "5"
    assert call_tool(tools, "knowledge_search", {"query": "year 144", "k": 1}).output.startswith("[1] Events of the year 144")
    unknown = call_tool(tools, "browser", "x")
    assert unknown.error == "unknown tool 'browser'; available tools: calculator, knowledge_search"


@pytest.mark.parametrize("text", ["4\ud800", "\udfff", "a\ud83d"])
def test_a_lone_surrogate_argument_is_an_error_not_an_exception(text: str) -> None:
    # issue 24, finding 5: Tool.run raised UnicodeEncodeError (the python tool) on such an argument
    result = Echo().run({"text": text})
    assert result.error is not None and "lone UTF-16 surrogate" in result.error
    result.error.encode("utf-8")  # the error itself is text an event can carry
