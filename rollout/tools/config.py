"""Settings of the agent's tools (section ``[rollout.tools]``, sub-tables per tool).

Example TOML::

    [rollout.tools]
    enabled = ["calculator", "python", "knowledge_search"]
    max_output_chars = 2000

    [rollout.tools.sandbox]
    cpu_seconds = 5
    memory_mb = 512

    [rollout.tools.knowledge]
    corpus_path = "/data/passages.parquet"

    [[rollout.tools.mcp_servers]]          # tools of an MCP server, registered as "<name>.<tool>"
    name = "files"
    command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/data"]

    [[rollout.tools.mcp_servers]]
    name = "search"
    url = "http://search.internal:8080/mcp"
    tools = ["query"]              # only these (and a stable tool list when the server is down at start)

Environment overrides work for the flat fields (``STREAMGRPO_ROLLOUT__TOOLS__MAX_OUTPUT_CHARS``,
``STREAMGRPO_ROLLOUT__TOOLS__MCP_MAX_TOOLS``); the sub-tables are set in TOML or by building the models in code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from streamgrpo.config import StrictModel
from streamgrpo.sandbox.config import SandboxSettings


class KnowledgeSettings(StrictModel):
    """The BM25 knowledge search tool."""

    corpus_path: Path | None = Field(
        default=None, description="JSONL or Parquet file of passages (id, title?, text). Unset: the built-in fact corpus."
    )
    top_k: int = Field(default=3, ge=1, le=50, description="Passages returned per query by default.")


class WikipediaSettings(StrictModel):
    """The (online only) Wikipedia search tool."""

    enabled: bool = Field(default=False, description="Off by default: the tool answers with an 'offline' error.")
    api_url: str = Field(default="https://en.wikipedia.org/w/api.php", description="MediaWiki API endpoint.")
    timeout_s: float = Field(default=10.0, gt=0, le=120, description="HTTP timeout per request.")
    top_k: int = Field(default=3, ge=1, le=20, description="Search results returned.")
    user_agent: str = Field(default="streamgrpo/0.1 (research; tool calls of an RL agent)", description="User-Agent header.")


class GeneralistSettings(StrictModel):
    """The LLM answer tool."""

    max_question_chars: int = Field(default=2000, ge=16, le=100_000, description="Longest question accepted.")


class McpServerSettings(StrictModel):
    """One MCP server whose tools the planner gets (see rollout/tools/mcp.py for what is covered)."""

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$", description="Namespace of the server's tools: "
                      "tool 'add' of server 'calc' is registered (and recorded in ToolObservation.tool) as 'calc.add'.")
    command: list[str] = Field(default_factory=list, description="stdio transport: the server's argv, started as a "
                               "child process of the worker (e.g. ['python', 'server.py']).")
    url: str | None = Field(default=None, description="Streamable-HTTP transport: the server's endpoint URL "
                            "(e.g. http://host:8000/mcp). Exactly one of command and url.")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: extra environment of the server process.")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="HTTP: request headers, e.g. "
                                          "Authorization (never logged).")
    tools: list[str] = Field(default_factory=list, description="Tools to register (empty: every listed tool). "
                             "Listed tools are registered even when the server is down at start, so the planner's "
                             "tool list and grammar stay the same across restarts.")
    timeout_s: float = Field(default=10.0, gt=0, le=600, description="Wall-clock limit of one tool call.")
    connect_timeout_s: float = Field(default=20.0, gt=0, le=600, description="Limit of one connect (process start "
                                     "or HTTP handshake) plus tool listing.")
    max_result_chars: int = Field(default=100_000, ge=64, le=10_000_000, description="A result longer than this is "
                                  "an observation error (shorter results are cut to [rollout.tools] max_output_chars).")
    reconnect_attempts: int = Field(default=3, ge=1, le=20, description="Connects tried (exponential backoff) when "
                                    "the server is gone at a call; the call is then retried once.")
    backoff_s: float = Field(default=0.25, gt=0, le=60, description="First wait between reconnects (doubles, "
                             "at most 8x).")
    jail: Literal["required", "warn", "off"] = Field(default="required", description="stdio: run the server in a "
                                                     "bubblewrap jail (sandbox/server_jail.py: fresh /proc, no home "
                                                     "directory, none of the worker's environment). 'required': a "
                                                     "jail that cannot be set up stops the worker at start; 'warn': "
                                                     "the server then runs unjailed, with an ERROR; 'off': never "
                                                     "jailed (a WARNING at start).")
    network: bool = Field(default=False, description="stdio, jailed: give the server the host's network (and its "
                          "DNS and CA files). Off: loopback only, in its own network namespace.")
    read_paths: list[Path] = Field(default_factory=list, description="stdio, jailed: more host paths the server may "
                                   "read (its interpreter, its executable's folder and every argument that names an "
                                   "existing path are bound already).")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r}: give exactly one of command (stdio) and url (HTTP)")
        return self

    @field_validator("tools")
    @classmethod
    def _tool_names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", n)]
        if bad:
            raise ValueError(f"tool names may use letters, digits, '_', '.' and '-' only: {bad}")
        return names


class ToolsSettings(StrictModel):
    """Which tools the agent has and their limits."""

    enabled: list[str] = Field(
        default_factory=lambda: ["calculator", "python", "knowledge_search"],
        description="Tool names given to the planner (see streamgrpo.rollout.tools.TOOL_FACTORIES).",
    )
    max_output_chars: int = Field(default=2000, ge=64, le=100_000, description="Bound of every tool's output, in characters.")
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings, description="Python sandbox limits.")
    knowledge: KnowledgeSettings = Field(default_factory=KnowledgeSettings, description="Knowledge search settings.")
    wikipedia: WikipediaSettings = Field(default_factory=WikipediaSettings, description="Wikipedia tool settings.")
    generalist: GeneralistSettings = Field(default_factory=GeneralistSettings, description="Generalist tool settings.")
    mcp_servers: list[McpServerSettings] = Field(
        default_factory=list, description="MCP servers whose tools are registered beside the built-ins, as "
        "'<server>.<tool>' (TOML [[rollout.tools.mcp_servers]]).")
    mcp_max_tools: int = Field(default=64, ge=1, le=1000, description="Most tools registered from ONE MCP server "
                               "(every tool is a line of every planner prompt and a name in its grammar). A server "
                               "that lists more, with no `tools` selection of at most this many, stops the worker "
                               "at start with a configuration error (not restarted).")
    mcp_max_description_chars: int = Field(default=1024, ge=16, le=65_536, description="Longest tool or argument "
                                           "description kept from an MCP server, in characters (after it is made "
                                           "one line of plain text); a longer one is cut, with a WARNING.")
    mcp_max_schema_bytes: int = Field(default=8192, ge=256, le=1_048_576, description="Largest input schema (compact "
                                      "JSON, UTF-8 bytes) of a registered MCP tool; a larger one stops the worker at "
                                      "start with a configuration error naming the tool.")

    @field_validator("mcp_servers")
    @classmethod
    def _unique_servers(cls, servers: list[McpServerSettings]) -> list[McpServerSettings]:
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise ValueError(f"MCP server names must be unique: {names}")
        return servers

    @model_validator(mode="after")
    def _selections_within_bound(self) -> ToolsSettings:
        over = [f"{s.name} ({len(s.tools)})" for s in self.mcp_servers if len(s.tools) > self.mcp_max_tools]
        if over:
            raise ValueError(f"MCP server(s) {', '.join(over)} select more tools than mcp_max_tools="
                             f"{self.mcp_max_tools}: shorten their `tools` lists ([[rollout.tools.mcp_servers]]) or "
                             "raise [rollout.tools] mcp_max_tools (env STREAMGRPO_ROLLOUT__TOOLS__MCP_MAX_TOOLS)")
        return self
