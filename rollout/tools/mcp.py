"""Tools from MCP servers: each listed tool of a configured server becomes a :class:`Tool` named ``<server>.<tool>``.

:func:`build_mcp_tools` connects to every ``[tools] mcp_servers`` entry (stdio: the command is started as a
child process; streamable HTTP: the URL), lists its tools and wraps each one in an :class:`McpTool` whose
spec comes from the server's own name, description and input schema. The planner sees them beside the
built-ins, the grammar admits their names (letters, digits, ``_ . -``: never a comma), and the loop records
each call as a ToolObservation whose ``tool`` is the namespaced name (the server is its provenance).

One :class:`McpHub` per worker runs the MCP client on its own asyncio loop in a daemon thread; the
worker's group threads call tools synchronously through it (``run_coroutine_threadsafe``), so concurrent
groups share one connection per server.

Bounds per server, checked at start (issue 38: a server listing 14,000 tools made the first PlannerAction
1 MB, over the record bound, and the worker crash-looped): more than ``[rollout.tools] mcp_max_tools`` registered
tools (default 64), or an input schema over ``mcp_max_schema_bytes`` (8 KiB), or an argument name that is not
plain, is a :class:`~streamgrpo.rollout.tools.errors.ToolConfigError`: the worker exits "misconfigured, do not
restart" with one message naming the server, the bound and both fixes (a ``tools`` selection, or a larger bound).
Refused, not trimmed: dropping the extra tools would make the agent's tool set depend on the server's listing
order, silently. A description longer than ``mcp_max_description_chars`` (1 KiB) is cut, with a WARNING: it is
prose that only the prompts show.

Text from a server reaches prompts only through :func:`prompt_text`: the planner's tool line and the executor
show the description, errors show argument names. Descriptions become one line of plain text (no control or
format characters, no JSON braces, brackets or quotes, no ``<|...|>`` or ``###`` markers, role labels lose
their colon), bounded; argument names must be plain identifiers (else the server is refused at start).

Failure policy (a tool call never raises; every failure is the observation's ``error``):

- down at start: a warning; the tools named in the server's ``tools`` setting are registered anyway
  (described as unreachable) and each call tries to connect; without ``tools`` nothing is registered;
- slow: the call ends after ``timeout_s`` with an error (the connection is kept);
- an ``isError`` result, an MCP error, a malformed result (fails the protocol's schema) or one longer than
  ``max_result_chars``: an error naming what was wrong;
- gone (the process exited, the HTTP server went away): the connection is dropped and re-opened with
  exponential backoff (tenacity, ``reconnect_attempts``), then the call is retried ONCE -- a tool that was
  half-run when its server died may run twice.

What is not covered: tool lists or schemas that change after start (the list read at start is kept: the
planner prompt and grammar stay fixed), nested argument schemas (an object/array argument is passed as JSON
text that is parsed before the call), non-text content (images, audio and resources are summarised in one
line), progress notifications, sampling/elicitation requests from the server, memory bounds inside the
transport (a result is read whole before it is measured).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import re
import threading
import unicodedata
from collections.abc import Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from pydantic import ValidationError

from streamgrpo.rollout.tools.base import Param, Tool, ToolResult, ToolSpec
from streamgrpo.rollout.tools.config import McpServerSettings, ToolsSettings
from streamgrpo.rollout.tools.errors import ToolConfigError, ToolError, ToolInputError

log = logging.getLogger(__name__)
T = TypeVar("T")
_SCALARS = {"string", "integer", "number", "boolean"}
_CLIENT_NAME = "streamgrpo-rollout"
#: Punctuation a server's text keeps on its way into a prompt (see :func:`prompt_text`).
_PROMPT_PUNCT = frozenset(".,;:!?()-_/+*=%&@")
_APOSTROPHES = frozenset("'\u2019")
#: Role labels a description could use to pose as a turn of the conversation: they lose their colon.
_ROLE_LABEL = re.compile(r"\b(system|assistant|user|developer|human|tool|inst)\s*:", re.IGNORECASE)
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
PARAM_DESCRIPTION_CHARS = 200
_BOUND_SETTINGS = ("[rollout.tools] {key} (env STREAMGRPO_ROLLOUT__TOOLS__{env})")


class McpUnavailableError(ToolError):
    """The server cannot be reached (not started, exited, refused the connection or the handshake)."""


class McpTimeoutError(ToolError):
    """A call got no answer within ``timeout_s`` (the connection is kept)."""


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a broken connection raises, from the transports' third-party layers."""
    import anyio
    import httpx2
    from mcp import MCPError

    group: type[BaseException] = ExceptionGroup  # noqa: F821 - builtin on 3.11+
    return (MCPError, OSError, ValidationError, anyio.BrokenResourceError, anyio.ClosedResourceError,
            anyio.EndOfStream, httpx2.HTTPError, TimeoutError, group, McpUnavailableError, McpTimeoutError)


def tool_name(server: str, tool: str) -> str:
    """``server.tool`` with every character the planner grammar or a JSON string could trip on replaced by ``_``."""
    return f"{server}.{re.sub(r'[^A-Za-z0-9_.-]', '_', tool)[:64]}"


def prompt_text(text: str, limit: int) -> str:
    """What of an MCP server's text may reach a prompt (tool and argument descriptions): NFKC-normalised, then ONE
    line of letters, digits, single spaces and the punctuation ``. , ; : ! ? ( ) - _ / + * = % & @``. Everything
    else (newlines, control and format characters such as bidi overrides, JSON braces and brackets, quotes,
    backticks, ``< > | #``: what chat-template tokens, fake JSON turns and headings are made of) becomes a space;
    apostrophes vanish; role labels (``system:``, ``assistant:``...) lose their colon. Cut at a word boundary to
    ``limit`` characters."""
    norm = unicodedata.normalize("NFKC", text)
    kept = "".join(ch if ch.isalnum() or ch in _PROMPT_PUNCT else "" if ch in _APOSTROPHES else " " for ch in norm)
    line = _ROLE_LABEL.sub(r"\1", re.sub(r" ([.,;:!?])", r"\1", " ".join(kept.split())))
    if len(line) > limit:
        cut = line[:limit]
        line = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return line


def spec_from_schema(name: str, description: str, schema: dict[str, Any] | None, server: str,
                     timeout_s: float, *, max_description_chars: int = 1024) -> tuple[ToolSpec, frozenset[str]]:
    """A :class:`ToolSpec` from an MCP tool's description and JSON input schema (required parameters first),
    and the names of its non-scalar parameters (given as JSON text). Descriptions pass through
    :func:`prompt_text` (the tool's bounded by ``max_description_chars``, each argument's by
    :data:`PARAM_DESCRIPTION_CHARS`)."""
    props: dict[str, Any] = (schema or {}).get("properties") or {}
    required = set((schema or {}).get("required") or [])
    params, as_json = [], set()
    arg_limit = min(PARAM_DESCRIPTION_CHARS, max_description_chars)
    for pname, prop in sorted(props.items(), key=lambda kv: kv[0] not in required):
        kind = prop.get("type") if isinstance(prop, dict) else None
        text = str((prop or {}).get("description") or (prop or {}).get("title") or pname) if isinstance(prop, dict) \
            else pname
        text = prompt_text(text, arg_limit) or pname
        if kind not in _SCALARS:
            kind, text = "string", f"{text} (JSON {prompt_text(str(kind or 'value'), 16) or 'value'})"
            as_json.add(pname)
        params.append(Param(pname, kind, text, required=pname in required))
    spec = ToolSpec(name=name, description=prompt_text(description, max_description_chars) or f"Tool {name}",
                    params=tuple(params), limits=f"MCP server {server!r}; {timeout_s:g} s per call")
    return spec, frozenset(as_json)


class _Connection:
    """One server: a long-lived client held open by an owner task on the hub's loop."""

    def __init__(self, settings: McpServerSettings) -> None:
        self.settings = settings
        self.argv: list[str] | None = None  # stdio: the jailed command line (see stdio_argv)
        self.client: Any = None
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None

    def _target(self) -> Any:
        from mcp import StdioServerParameters

        s = self.settings
        if s.command:
            argv = self.argv or s.command
            return StdioServerParameters(command=argv[0], args=list(argv[1:]), env=dict(s.env) or None)
        if not s.headers:
            return s.url
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        headers = {k: v.get_secret_value() for k, v in s.headers.items()}
        return streamable_http_client(str(s.url), http_client=httpx2.AsyncClient(headers=headers))

    async def _hold(self, ready: asyncio.Future[Any]) -> None:
        from mcp import Client, Implementation

        assert self._stop is not None
        try:
            async with Client(self._target(), client_info=Implementation(name=_CLIENT_NAME, version="1")) as client:
                self.client = client
                ready.set_result(client)
                await self._stop.wait()
        except _transport_errors() as exc:
            if not ready.done():
                ready.set_exception(McpUnavailableError(f"MCP server {self.settings.name!r}: {_describe(exc)}"))
        finally:
            self.client = None

    async def open(self) -> Any:
        """The connected client; connects (within ``connect_timeout_s``) when there is none."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.client is not None and self._owner is not None and not self._owner.done():
                return self.client
            await self._close_owner()
            self._stop = asyncio.Event()
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._owner = asyncio.create_task(self._hold(ready))
            try:
                return await asyncio.wait_for(asyncio.shield(ready), self.settings.connect_timeout_s)
            except asyncio.TimeoutError as exc:
                await self._close_owner()
                raise McpUnavailableError(f"MCP server {self.settings.name!r} did not connect within "
                                          f"{self.settings.connect_timeout_s:g}s") from exc

    async def _close_owner(self) -> None:
        owner, self._owner = self._owner, None
        if owner is None:
            return
        if self._stop is not None:
            self._stop.set()
        try:
            await asyncio.wait_for(owner, 5.0)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            owner.cancel()
        self.client = None

    async def reopen(self) -> Any:
        """Drop the connection and connect again, with exponential backoff."""
        from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

        s = self.settings
        async with self._lock or asyncio.Lock():
            await self._close_owner()
        async for attempt in AsyncRetrying(stop=stop_after_attempt(s.reconnect_attempts), reraise=True,
                                           wait=wait_exponential(multiplier=s.backoff_s, max=8 * s.backoff_s),
                                           retry=retry_if_exception_type(McpUnavailableError)):
            with attempt:
                return await self.open()
        raise McpUnavailableError(f"MCP server {s.name!r}: no connection")  # pragma: no cover - reraise above

    async def list_tools(self) -> list[Any]:
        client = await self.open()
        tools: list[Any] = []
        cursor = None
        while True:
            page = await asyncio.wait_for(client.list_tools(cursor=cursor), self.settings.connect_timeout_s)
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None:
                return tools

    async def call(self, tool: str, args: dict[str, Any]) -> Any:
        """The server's CallToolResult; a connection that is gone is re-opened (backoff) and the call retried once."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        try:
            return await self._call_once(await self.open(), tool, args)
        except (McpUnavailableError, MCPError, OSError) as exc:
            if isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED:
                raise
            log.warning("MCP server %r is gone (%s); reconnecting", self.settings.name, _describe(exc))
        return await self._call_once(await self.reopen(), tool, args)

    async def _call_once(self, client: Any, tool: str, args: dict[str, Any]) -> Any:
        timeout = self.settings.timeout_s
        try:
            return await asyncio.wait_for(client.call_tool(tool, args, read_timeout_seconds=timeout), timeout)
        except TimeoutError as exc:  # slow, not gone (and not an OSError to reconnect on)
            raise McpTimeoutError(f"timed out after {timeout:g}s") from exc

    async def close(self) -> None:
        await self._close_owner()


class McpHub:
    """The event loop (in a daemon thread) on which every server connection lives."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="mcp-client", daemon=True)
        self._thread.start()
        self.connections: dict[str, _Connection] = {}
        atexit.register(self.close)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the hub's loop from another thread; TimeoutError after ``timeout`` seconds."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout as exc:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g}s") from exc

    def connection(self, settings: McpServerSettings) -> _Connection:
        return self.connections.setdefault(settings.name, _Connection(settings))

    def close(self) -> None:
        """Close every connection (stdio servers are stopped) and the loop; idempotent."""
        if self.loop.is_closed():
            return
        if self.loop.is_running():
            for conn in list(self.connections.values()):
                try:
                    self.run(conn.close(), 10.0)
                except TimeoutError:
                    log.warning("MCP server %r did not close within 10 s", conn.settings.name)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5.0)
        if not self.loop.is_running():
            self.loop.close()


class McpTool(Tool):
    """One tool of an MCP server (see the module docstring for the failure policy)."""

    def __init__(self, hub: McpHub, settings: McpServerSettings, remote_name: str,
                 spec: tuple[ToolSpec, frozenset[str]], *, max_output_chars: int) -> None:
        super().__init__(max_output_chars=max_output_chars)
        self.hub, self.settings, self.remote_name = hub, settings, remote_name
        self.spec, self.json_params = spec

    @property
    def server(self) -> str:
        return self.settings.name

    def _call(self, args: dict[str, Any]) -> ToolResult:
        args = _decode_json_args(args, self.json_params)
        s = self.settings
        budget = s.timeout_s * 2 + s.reconnect_attempts * (s.connect_timeout_s + 8 * s.backoff_s) + 5
        conn = self.hub.connection(s)
        try:
            result = self.hub.run(conn.call(self.remote_name, args), budget)
        except _transport_errors() as exc:
            return ToolResult(output="", error=f"MCP server {s.name!r} tool {self.remote_name!r}: {_describe(exc)}")
        return result_to_tool_result(result, s.max_result_chars)


def _decode_json_args(args: dict[str, Any], as_json: frozenset[str]) -> dict[str, Any]:
    """Drop unset optional arguments (the server applies its defaults); parse the JSON text of non-scalar ones."""
    out = {}
    for name, value in args.items():
        if value is None:
            continue
        if name in as_json and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ToolInputError(f"argument {name!r} must be JSON: {exc}") from exc
        out[name] = value
    return out


def result_to_tool_result(result: Any, max_chars: int) -> ToolResult:
    """A CallToolResult as a ToolResult: text blocks joined; ``is_error`` and oversized results are errors."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "?")
        if kind == "text":
            parts.append(str(block.text))
        else:
            parts.append(f"[{kind} content: {getattr(block, 'mime_type', None) or 'no text'}]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    if len(text) > max_chars:
        return ToolResult(output="", error=f"the MCP result is too large ({len(text)} characters; the limit is "
                                           f"{max_chars}); ask for less")
    if getattr(result, "is_error", False):
        return ToolResult(output="", error=f"the MCP tool failed: {text[:500] or '(no message)'}")
    return ToolResult(output=text)


def _describe(exc: BaseException) -> str:
    """One line for an error, unwrapping exception groups (anyio task groups wrap transport failures)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # noqa: F821 - builtin on 3.11+
        exc = exc.exceptions[0]
    if isinstance(exc, ValidationError):
        return f"malformed result from the server ({exc.error_count()} schema errors: {exc.errors()[0]['msg']})"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


def _placeholder(settings: McpServerSettings, tool: str) -> tuple[ToolSpec, frozenset[str]]:
    return ToolSpec(name=tool_name(settings.name, tool), params=(Param("input", "string", "the tool's input"),),
                    description=f"Tool {tool} of MCP server {settings.name} (unreachable at start).",
                    limits=f"MCP server {settings.name!r}; {settings.timeout_s:g} s per call"), frozenset()


def _schema_bytes(schema: dict[str, Any] | None) -> int:
    return len(json.dumps(schema or {}, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8"))


def _bound_error(s: McpServerSettings, what: str, key: str, fix: str) -> ToolConfigError:
    setting = _BOUND_SETTINGS.format(key=key, env=key.upper())
    return ToolConfigError(f"MCP server {s.name!r}: {what}. The worker does not start with it: {fix}, or raise "
                           f"{setting}.")


def check_bounds(s: McpServerSettings, wanted: list[str], by_name: dict[str, Any], settings: ToolsSettings) -> None:
    """Refuse (ToolConfigError, at start) a server whose registered tools exceed the per-server bounds of
    ``settings``: their count, an input schema's size, an argument name that is not plain. Refusing, not dropping
    the extra tools, keeps the agent's tool set what the operator configured: a server that grows its list must
    not silently change (or, as in issue 38, blow up) every prompt."""
    select = "name the tools the planner needs in its `tools` list ([[rollout.tools.mcp_servers]] tools = [...])"
    if len(wanted) > settings.mcp_max_tools:
        raise _bound_error(s, f"it lists {len(wanted)} tools, over the bound of {settings.mcp_max_tools} per server",
                           "mcp_max_tools", f"{select}, at most {settings.mcp_max_tools}")
    for n in wanted:
        size = _schema_bytes(by_name[n].input_schema)
        if size > settings.mcp_max_schema_bytes:
            raise _bound_error(s, f"the input schema of tool {prompt_text(n, 64)!r} is {size} bytes, over the bound "
                               f"of {settings.mcp_max_schema_bytes}", "mcp_max_schema_bytes",
                               f"{select} without it")
        props = (by_name[n].input_schema or {}).get("properties") or {}
        bad = [p for p in props if not _PARAM_NAME.fullmatch(str(p))]
        if bad:
            raise ToolConfigError(f"MCP server {s.name!r}: tool {prompt_text(n, 64)!r} has argument names that are "
                                  f"not plain (letters, digits, '_', '.', '-'; at most 64): "
                                  f"{[prompt_text(str(b), 40) for b in bad][:5]}. The worker does not start with it: "
                                  f"{select} without it.")


def _server_tools(hub: McpHub, s: McpServerSettings, settings: ToolsSettings) -> list[McpTool]:
    conn, max_output_chars = hub.connection(s), settings.max_output_chars
    try:
        listed = hub.run(conn.list_tools(), s.connect_timeout_s * 2 + 5)
    except _transport_errors() as exc:
        log.error("MCP server %r is unreachable at start (%s); %s", s.name, _describe(exc),
                  f"its tools {s.tools} are registered and each call retries" if s.tools else
                  "no tools registered from it (list them in its `tools` setting to keep them)")
        return [McpTool(hub, s, t, _placeholder(s, t), max_output_chars=max_output_chars) for t in s.tools]
    by_name = {t.name: t for t in listed}
    missing = [t for t in s.tools if t not in by_name]
    if missing:
        log.warning("MCP server %r does not list %s (it lists %d tools)", s.name, missing, len(by_name))
    wanted = [n for n in (s.tools or list(by_name)) if n in by_name]
    check_bounds(s, wanted, by_name, settings)
    limit = settings.mcp_max_description_chars
    long = [n for n in wanted if len(prompt_text(by_name[n].description or "", 10 * limit)) > limit]
    if long:
        log.warning("MCP server %r: the descriptions of %d tool(s) (%s) are longer than %d characters and were cut "
                    "(%s)", s.name, len(long), [prompt_text(n, 64) for n in long[:5]], limit,
                    _BOUND_SETTINGS.format(key="mcp_max_description_chars", env="MCP_MAX_DESCRIPTION_CHARS"))
    out = [McpTool(hub, s, n, spec_from_schema(tool_name(s.name, n), by_name[n].description or "",
                                               by_name[n].input_schema, s.name, s.timeout_s,
                                               max_description_chars=limit),
                   max_output_chars=max_output_chars) for n in wanted]
    out += [McpTool(hub, s, t, _placeholder(s, t), max_output_chars=max_output_chars) for t in missing]
    log.info("MCP server %r: %d tool(s) registered: %s", s.name, len(out), [t.name for t in out])
    return out


def stdio_argv(s: McpServerSettings, bwrap: str) -> list[str] | None:
    """The jailed command line of a stdio server (:mod:`streamgrpo.sandbox.server_jail`), checked once; None to
    run ``command`` as it is (``jail = "off"``, or ``"warn"`` when the jail cannot be set up: said loudly).
    Raises ToolConfigError under ``jail = "required"`` when it cannot be set up."""
    from streamgrpo.sandbox.errors import SandboxUnavailableError
    from streamgrpo.sandbox.server_jail import check_server_jail, server_argv

    where = f'[[rollout.tools.mcp_servers]] name = "{s.name}"'
    if s.jail == "off":
        log.warning("MCP server %r runs UNJAILED (%s: jail = \"off\"): it can read the worker's environment "
                    "(API keys) through /proc and every file the worker can", s.name, where)
        return None
    try:
        argv = server_argv(s.command, s.env, bwrap=bwrap, network=s.network, read_paths=s.read_paths)
        check_server_jail(argv)
        return argv
    except SandboxUnavailableError as exc:
        if s.jail == "required":
            raise ToolConfigError(f"MCP server {s.name!r}: its jail cannot be set up ({exc}). The worker does not "
                                  f"start a stdio server unjailed: grant what is missing, or set jail = \"warn\" "
                                  f"(or \"off\") in {where}") from exc
        log.error("MCP server %r runs UNJAILED, its jail cannot be set up (%s; %s: jail = \"warn\"): it can read "
                  "the worker's environment (API keys) and files", s.name, exc, where)
        return None


def build_mcp_tools(settings: ToolsSettings, hub: McpHub | None = None) -> dict[str, Tool]:
    """Connect to ``settings.mcp_servers`` and wrap their tools (see the module docstring); {} without servers.
    Raises ToolConfigError for a server over the bounds (:func:`check_bounds`), after closing every connection
    this call opened (stdio servers are stopped)."""
    if not settings.mcp_servers:
        return {}
    own = hub is None
    hub = hub or McpHub()
    tools: dict[str, Tool] = {}
    try:
        for server in settings.mcp_servers:
            if server.command:
                hub.connection(server).argv = stdio_argv(server, settings.sandbox.bwrap)
            for tool in _server_tools(hub, server, settings):
                tools.setdefault(tool.name, tool)
    except ToolConfigError:
        if own:
            hub.close()
        raise
    return tools
