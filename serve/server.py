"""The MCP server of ``streamgrpo serve``: three tools over a :class:`~streamgrpo.serve.agent.ServeAgent`.

- ``solve(question, version=None)``: one trajectory; answer, short trace, the version that served it;
- ``adapters()``: versions and lifecycle status;
- ``feedback(rollout_id, score, comment="")``: a human reward for an answer.

The client's name (its MCP ``clientInfo``) becomes the Task source ``mcp:<name>`` and the labeller
``human:mcp:<name>``. Model calls block, so each tool runs in a worker thread (``anyio.to_thread``).

Bounds (:mod:`.bounds`): a question beyond ``max_question_bytes`` is refused on the event loop, before it takes a
thread; a call pinned to a version not yet announced waits for it on the event loop (no thread held) for at most
``version_wait_s``, then is refused; a ``solve`` whose client gives up (a cancelled request: its timeout, or it went
away) releases its caller at once and its rollout stops at its next event. ``feedback`` needs the
``feedback_token`` of the ``solve`` reply (see :mod:`.agent`).
What is not covered: authentication of HTTP clients (bind to localhost or put it behind a gateway).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from streamgrpo.errors import StreamGRPOError
from streamgrpo.serve.agent import ServeAgent
from streamgrpo.serve.bounds import check_question

T = TypeVar("T")

INSTRUCTIONS = ("The streamgrpo agent: `solve` answers a question with a tool-using planner trained by GRPO and "
                "says which adapter version served it; `feedback` scores an answer (0 = wrong .. 1 = right) so the "
                "next version learns from it (pass the rollout_id and feedback_token of the answer); `adapters` lists the "
                "versions.")
#: Seconds between checks of the adapter follower while a pinned call waits for its version's announcement.
VERSION_POLL_S = 0.2


def client_name(ctx: Any) -> str:
    """The calling client's name from its clientInfo (letters, digits, ``._-``), or ``unknown``."""
    try:
        params = ctx.session.client_params
        name = params.client_info.name if params is not None else ""
    except (AttributeError, LookupError, ValueError):
        name = ""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name or "")[:64] or "unknown"


async def _in_thread(fn: Callable[[], T], cancel: threading.Event | None = None) -> T:
    """``fn()`` in a worker thread; a StreamGRPOError or a rejected input (ValueError) becomes the tool's error
    message (an isError result). When the call is cancelled (its client gave up) the caller is released at once and
    ``cancel`` is set, for ``fn`` to stop at its next step."""
    try:
        return await anyio.to_thread.run_sync(fn, abandon_on_cancel=cancel is not None)
    except anyio.get_cancelled_exc_class():
        if cancel is not None:
            cancel.set()
        raise
    except (StreamGRPOError, ValueError) as exc:
        raise ToolError(str(exc)) from exc


async def await_version(agent: ServeAgent, version: str | None) -> None:
    """Wait on the event loop (no thread held) until ``version`` is announced; ToolError after ``version_wait_s``."""
    try:
        with anyio.fail_after(agent.limits.version_wait_s):
            while not agent.version_announced(version):
                await anyio.sleep(VERSION_POLL_S)
    except TimeoutError:
        raise ToolError(f"version {version!r} was not published within {agent.limits.version_wait_s:g} s: call "
                        "`adapters` for the versions there are, or leave `version` out to use the primary") from None
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
        try:
            check_question(question, agent.limits)  # before it takes a thread
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        await await_version(agent, version)
        cancel = threading.Event()
        return await _in_thread(lambda: agent.solve(question, who, version, cancel), cancel)

    @server.tool(description="The adapter versions of the planner and their status (primary, canary, candidate, "
                 "rolled back); `serving` marks the one `solve` uses by default.")
    async def adapters() -> list[dict[str, Any]]:
        return await _in_thread(agent.adapters)

    @server.tool(description="Score an answer `solve` gave you: its rollout_id and feedback_token, score from 0 "
                 "(wrong) to 1 (right), an optional comment. Recorded as a human reward with your client's name as "
                 "provenance.")
    async def feedback(rollout_id: str, score: float, ctx: Context, comment: str = "",
                       feedback_token: str = "") -> dict[str, Any]:
        who = client_name(ctx)
        return await _in_thread(lambda: agent.feedback(rollout_id, score, comment, who, feedback_token))

    return server
