"""The MCP server of ``streamgrpo serve``: three tools over a :class:`~streamgrpo.serve.agent.ServeAgent`.

- ``solve(question, version=None)``: one trajectory; answer, short trace, the version that served it;
- ``adapters()``: versions and lifecycle status;
- ``feedback(rollout_id, score, comment="")``: a human reward for an answer (recorded; it does not train the
  planner: :func:`~streamgrpo.serve.agent.feedback_effect` is what clients are told).

The client's name (its MCP ``clientInfo``) becomes the Task source ``mcp:<name>`` and the labeller
``human:mcp:<name>``. Model calls block, so each tool runs in a worker thread (``anyio.to_thread``): ``solve`` on a
limiter of ``max_concurrent_solves`` threads, ``adapters`` and ``feedback`` on one of their own
(:data:`OTHER_THREADS`), so that solves never keep them waiting.

Bounds (:mod:`.bounds`): a question beyond ``max_question_bytes``, or another text argument beyond
``max_argument_bytes``, is refused on the event loop, before it takes a thread; a call pinned to a version not yet
announced waits for it on the event loop (no thread held) for at most ``version_wait_s``, then is refused; a
``solve`` whose client gives up (a cancelled request: its timeout, or it went away) releases its caller at once and
its rollout stops at its next event. ``feedback`` needs the ``feedback_token`` of the ``solve`` reply (see
:mod:`.agent`; a token, signed and stateless, is bounded by :data:`~streamgrpo.serve.tokens.MAX_TOKEN_BYTES`, or by
``max_argument_bytes`` when that is larger: :mod:`.tokens`).

Authentication (HTTP): with ``[serve] auth_token`` set, every request to ``/mcp`` must carry
``Authorization: Bearer <token>``; the SDK's bearer middleware (``token_verifier`` + ``AuthSettings``) answers any
other request 401 before it reaches a session. :class:`StaticBearerToken` compares in constant time and keeps the
token out of the ``AccessToken`` it returns. No OAuth flow is offered (no authorization server, no protected
resource metadata): the token is a shared secret handed to the client's configuration.
What is not covered: several tokens or scopes per client, rotation without a restart, TLS (put the server behind a
TLS-terminating proxy to reach it over a network).
"""

from __future__ import annotations

import hmac
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import anyio
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import SecretStr

from streamgrpo.errors import StreamGRPOError
from streamgrpo.serve.agent import ServeAgent
from streamgrpo.serve.bounds import check_argument, check_question
from streamgrpo.serve.tokens import MAX_TOKEN_BYTES

T = TypeVar("T")

INSTRUCTIONS = ("The streamgrpo agent: `solve` answers a question with a tool-using planner trained by GRPO and "
                "says which adapter version served it; `feedback` records a score for an answer (0 = wrong .. 1 = "
                "right; pass the rollout_id and feedback_token of the answer) as a human reward on the event log, "
                "beside that version's figures; it does not train the planner (a served call is a group of one "
                "rollout: the reply says what happens to it); `adapters` lists the versions.")
#: Seconds between checks of the adapter follower while a pinned call waits for its version's announcement.
VERSION_POLL_S = 0.2
#: Worker threads of ``adapters`` and ``feedback`` (apart from the solves').
OTHER_THREADS = 4


class StaticBearerToken:
    """The SDK's ``TokenVerifier`` for one shared secret: a request whose bearer token equals it (constant-time
    comparison) is let through as client ``bearer``; any other is None (401). The token itself is not kept in the
    returned ``AccessToken``."""

    def __init__(self, token: SecretStr) -> None:
        self._token = token.get_secret_value().encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode("utf-8", errors="replace"), self._token):
            return AccessToken(token="", client_id="bearer", scopes=[])
        return None


def client_name(ctx: Any) -> str:
    """The calling client's name from its clientInfo (letters, digits, ``._-``), or ``unknown``."""
    try:
        params = ctx.session.client_params
        name = params.client_info.name if params is not None else ""
    except (AttributeError, LookupError, ValueError):
        name = ""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name or "")[:64] or "unknown"


async def _in_thread(fn: Callable[[], T], limiter: anyio.CapacityLimiter, cancel: threading.Event | None = None) -> T:
    """``fn()`` in a worker thread of ``limiter``; a StreamGRPOError or a rejected input (ValueError) becomes the
    tool's error message (an isError result). When the call is cancelled (its client gave up) the caller is released
    at once and ``cancel`` is set, for ``fn`` to stop at its next step."""
    try:
        return await anyio.to_thread.run_sync(fn, abandon_on_cancel=cancel is not None, limiter=limiter)
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


def check_arguments(agent: ServeAgent, **arguments: str | None) -> None:
    """ToolError when a text argument is longer than ``max_argument_bytes`` (on the event loop: no thread taken)."""
    try:
        for name, value in arguments.items():
            check_argument(name, value, agent.limits)
    except ValueError as exc:
        raise ToolError(str(exc)) from exc


def check_token(agent: ServeAgent, token: str | None) -> None:
    """ToolError when a feedback token is longer than any this server gives (at most
    :data:`~streamgrpo.serve.tokens.MAX_TOKEN_BYTES`, or ``max_argument_bytes`` when that is larger)."""
    try:
        check_argument("feedback_token", token,
                       replace(agent.limits, max_argument_bytes=max(agent.limits.max_argument_bytes, MAX_TOKEN_BYTES)))
    except ValueError as exc:
        raise ToolError(str(exc)) from exc


def build_server(agent: ServeAgent, auth_token: SecretStr | None = None, url: str = "http://127.0.0.1") -> MCPServer:
    """An MCPServer exposing ``agent`` (run it with ``.run("stdio")`` or ``.run("streamable-http", ...)``). With
    ``auth_token``, its HTTP transport refuses (401) every request without that bearer token; ``url`` is the
    server's own address, which the SDK's auth settings require (no OAuth server is offered)."""
    auth: dict[str, Any] = {}
    if auth_token is not None:
        auth = {"token_verifier": StaticBearerToken(auth_token),
                "auth": AuthSettings(issuer_url=url, resource_server_url=None)}  # type: ignore[arg-type]
    server = MCPServer("streamgrpo", instructions=INSTRUCTIONS, **auth)
    solves = anyio.CapacityLimiter(agent.limits.max_concurrent_solves)
    others = anyio.CapacityLimiter(OTHER_THREADS)

    @server.tool(description="Answer a question with the trained agent (tools: calculator, python, search...). "
                 "Returns the answer, a short trace of the tool calls, the adapter version that served it and the "
                 "rollout_id to give `feedback` on. `version` pins e.g. 'planner@v3' (default: the primary).")
    async def solve(question: str, ctx: Context, version: str | None = None) -> dict[str, Any]:
        who = client_name(ctx)
        try:
            check_question(question, agent.limits)  # before it takes a thread
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        check_arguments(agent, version=version)
        await await_version(agent, version)
        cancel = threading.Event()
        return await _in_thread(lambda: agent.solve(question, who, version, cancel), solves, cancel)

    @server.tool(description="The adapter versions of the planner and their status (primary, canary, candidate, "
                 "rolled back); `serving` marks the one `solve` uses by default.")
    async def adapters() -> list[dict[str, Any]]:
        return await _in_thread(agent.adapters, others)

    @server.tool(description="Score an answer `solve` gave you: its rollout_id and feedback_token, score from 0 "
                 "(wrong) to 1 (right), an optional comment. Recorded as a human reward of that answer with your "
                 "client's name as provenance, kept apart from the judge's rewards; it does not train the planner (a "
                 "served call is a group of one rollout; the reply's `effect` says what happens to it).")
    async def feedback(rollout_id: str, score: float, ctx: Context, comment: str = "",
                       feedback_token: str = "") -> dict[str, Any]:
        who = client_name(ctx)
        check_arguments(agent, rollout_id=rollout_id, comment=comment)
        check_token(agent, feedback_token)
        return await _in_thread(lambda: agent.feedback(rollout_id, score, comment, who, feedback_token), others)

    return server
