"""The agent's tools and their registry.

:data:`TOOL_FACTORIES` maps a tool name to a factory ``(ToolsSettings, ToolContext) -> Tool``;
:func:`build_tools` builds the named ones (unknown names and missing dependencies fail at start
with :class:`~streamgrpo.rollout.tools.errors.ToolConfigError`), and :func:`render_tools` writes
the metadata the planner reads (name, description, arguments, limits, examples) as prompt text,
and :func:`call_tool` runs a planner command (JSON or plain text) on a tool by name.

Tools: ``calculator`` (AST arithmetic), ``python`` (sandboxed subprocess), ``knowledge_search``
(BM25 over the built-in archive or a corpus file), ``wikipedia`` (online only, off by default),
``generalist`` (an LLM answer; needs ``ToolContext.generate``); and every tool of the MCP servers in
``[tools] mcp_servers``, registered after the built-ins as ``<server>.<tool>`` (:mod:`.mcp`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from streamgrpo.rollout.tools.base import Tool, ToolResult, ToolSpec, coerce_args
from streamgrpo.rollout.tools.calculator import Calculator
from streamgrpo.rollout.tools.config import ToolsSettings
from streamgrpo.rollout.tools.errors import ToolConfigError
from streamgrpo.rollout.tools.generalist import Generalist
from streamgrpo.rollout.tools.knowledge_search import KnowledgeSearch, load_passages
from streamgrpo.rollout.tools.python_sandbox import PythonSandbox
from streamgrpo.rollout.tools.wikipedia import WikipediaSearch

__all__ = [
    "TOOL_FACTORIES", "Tool", "ToolContext", "ToolResult", "ToolSpec", "ToolsSettings", "build_tools",
    "call_tool", "coerce_args", "render_tools",
]


@dataclass(frozen=True)
class ToolContext:
    """Run-time dependencies that are not settings (callables, models)."""

    generate: Callable[[str], str] | None = None


def _calculator(s: ToolsSettings, _: ToolContext) -> Tool:
    return Calculator(max_output_chars=s.max_output_chars)


def _python(s: ToolsSettings, _: ToolContext) -> Tool:
    return PythonSandbox(s.sandbox, max_output_chars=s.max_output_chars)


def _knowledge(s: ToolsSettings, _: ToolContext) -> Tool:
    path = s.knowledge.corpus_path
    if path is None:
        return KnowledgeSearch(top_k=s.knowledge.top_k, max_output_chars=s.max_output_chars)
    return KnowledgeSearch(load_passages(path), top_k=s.knowledge.top_k, max_output_chars=s.max_output_chars,
                           corpus_name=f"the corpus {path.name}")


def _wikipedia(s: ToolsSettings, _: ToolContext) -> Tool:
    return WikipediaSearch(s.wikipedia, max_output_chars=s.max_output_chars)


def _generalist(s: ToolsSettings, ctx: ToolContext) -> Tool:
    if ctx.generate is None:
        raise ToolConfigError("the generalist tool needs a model: pass ToolContext(generate=...) to build_tools, "
                              "or remove 'generalist' from [tools] enabled")
    return Generalist(ctx.generate, max_question_chars=s.generalist.max_question_chars,
                      max_output_chars=s.max_output_chars)


TOOL_FACTORIES: dict[str, Callable[[ToolsSettings, ToolContext], Tool]] = {
    "calculator": _calculator,
    "python": _python,
    "knowledge_search": _knowledge,
    "wikipedia": _wikipedia,
    "generalist": _generalist,
}


def build_tools(names: Iterable[str] | None = None, settings: ToolsSettings | None = None,
                context: ToolContext | None = None) -> dict[str, Tool]:
    """Build the named tools (default: ``settings.enabled``), in the given order, then the tools of
    ``settings.mcp_servers`` (an unreachable server is logged, never raised: see :mod:`.mcp`)."""
    settings = settings or ToolsSettings()
    context = context or ToolContext()
    wanted = list(settings.enabled if names is None else names)
    unknown = [n for n in wanted if n not in TOOL_FACTORIES]
    if unknown:
        raise ToolConfigError(f"unknown tool(s) {unknown}; available: {sorted(TOOL_FACTORIES)}")
    tools = {name: TOOL_FACTORIES[name](settings, context) for name in dict.fromkeys(wanted)}
    if settings.mcp_servers:
        from streamgrpo.rollout.tools.mcp import build_mcp_tools

        tools.update(build_mcp_tools(settings))  # "<server>.<tool>": never a built-in's name
    return tools


def call_tool(tools: Mapping[str, Tool], name: str, raw: str | Mapping[str, Any]) -> ToolResult:
    """Run tool ``name`` on a planner command (JSON object text, a dict, or plain text for the tool's
    first argument). An unknown name is a ToolResult error listing the available tools; never raises."""
    tool = tools.get(name.strip())
    if tool is None:
        return ToolResult(output="", error=f"unknown tool {name!r}; available tools: {', '.join(tools)}")
    return tool.run(coerce_args(tool.spec, raw))


def render_tool(spec: ToolSpec) -> str:
    """One tool's metadata as prompt text."""
    lines = [f"### {spec.name}", spec.description, "Arguments:"]
    for p in spec.params:
        opt = "" if p.required else f", optional, default {p.default!r}"
        lines.append(f"  - {p.name} ({p.type}{opt}): {p.description}")
    if spec.limits:
        lines.append(f"Limits: {spec.limits}")
    for ex in spec.examples:
        lines.append(f"Example: {json.dumps(dict(ex.args))} -> {ex.output}")
    return "\n".join(lines)


def render_tools(tools: Mapping[str, Tool] | Iterable[Tool]) -> str:
    """All tools' metadata as one prompt section (deterministic: in the given order)."""
    items: Iterable[Tool] = tools.values() if isinstance(tools, Mapping) else tools
    return "\n\n".join(render_tool(t.spec) for t in items)
