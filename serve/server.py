"""The MCP server of ``streamgrpo serve``: three tools over a :class:`~streamgrpo.serve.agent.ServeAgent`.

- ``solve(question, version=None)``: one trajectory; answer, short trace, the version that served it;
- ``adapters()``: versions and lifecycle status;
- ``feedback(rollout_id, score, comment="")``: a human reward for an answer.

The client's name (its MCP ``clientInfo``) becomes the Task source ``mcp:<name>`` and the labeller
``human:mcp:<name>``. Model calls block, so each tool runs in a worker thread (``anyio.to_thread``).
What is not covered: authentication of HTTP clients (bind to localhost or put it behind a gateway).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from streamgrpo.errors import StreamGRPOError
from streamgrpo.serve.agent import ServeAgent

T = TypeVar("T")

INSTRUCTIONS = ("The streamgrpo agent: `solve` answers a question with a tool-using planner trained by GRPO and "
                "says which adapter version served it; `feedback` scores an answer (0 = wrong .. 1 = right) so the "
                "next version learns from it; `adapters` lists the versions.")


def client_name(ctx: Any) -> str:
    """The calling client's name from its clientInfo (letters, digits, ``._-``), or ``unknown``."""
    try:
        params = ctx.session.client_params
        name = params.client_info.name if params is not None else ""
    except (AttributeError, LookupError, ValueError):
        name = ""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name or "")[:64] or "unknown"


async def _in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread; a StreamGRPOError or a rejected input (ValueError) becomes the tool's error
    message (an isError result)."""
    try:
        return await anyio.to_thread.run_sync(fn)
    except (StreamGRPOError, ValueError) as exc:
        raise ToolError(str(exc)) from exc


def build_server(agent: ServeAgent) -> MCPServer:
    """An MCPServer exposing ``agent`` (run it with ``.run("stdio")`` or ``.run("streamable-http", ...)``)."""
    server = MCPServer("streamgrpo", instructions=INSTRUCTIONS)

    @server.tool(description="Answer a question with the trained agent (tools: calculator, python, search...). "
                 "Returns the answer, a short trace of the tool calls, the adapter version that served it and the "
                 "rollout_id to give `feedback` on. `version` pins e.g. 'planner@v3' (default: the primary).")
    async def solve(question: str, ctx: Context, version: str | None = None) -> dict[str, Any]:
        who = client_name(ctx)
        return await _in_thread(lambda: agent.solve(question, who, version))

    @server.tool(description="The adapter versions of the planner and their status (primary, canary, candidate, "
                 "rolled back); `serving` marks the one `solve` uses by default.")
    async def adapters() -> list[dict[str, Any]]:
        return await _in_thread(agent.adapters)

    @server.tool(description="Score an answer of `solve`: score from 0 (wrong) to 1 (right), with an optional "
                 "comment. Recorded as a human reward with your client's name as provenance.")
    async def feedback(rollout_id: str, score: float, ctx: Context, comment: str = "") -> dict[str, Any]:
        who = client_name(ctx)
        return await _in_thread(lambda: agent.feedback(rollout_id, score, comment, who))

    return server
