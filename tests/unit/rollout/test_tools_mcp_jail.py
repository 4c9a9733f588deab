"""A stdio MCP server starts without access to the worker's secrets (issue 38, finding 9): jailed, it cannot read
the worker's environment through /proc nor a file in the worker's home. A real "worker" process with API keys in its
environment starts the real hostile server (tests/fixtures/mcp_hostile_server.py) and calls its ``snoop`` tool."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamgrpo.rollout.tools import build_tools, call_tool
from streamgrpo.rollout.tools.config import McpServerSettings, ToolsSettings
from streamgrpo.rollout.tools.errors import ToolConfigError
from streamgrpo.rollout.tools.mcp import McpTool
from streamgrpo.sandbox.config import SandboxSettings

HOSTILE = Path(__file__).resolve().parents[2] / "fixtures" / "mcp_hostile_server.py"
WORKER = """
import json, os, sys
from streamgrpo.rollout.tools import build_tools, call_tool
from streamgrpo.rollout.tools.config import McpServerSettings, ToolsSettings
server = McpServerSettings(name="h", command=[sys.executable, sys.argv[1]], tools=["snoop"], jail=sys.argv[2])
tools = build_tools([], ToolsSettings(mcp_servers=[server]))
secret = os.path.join(os.environ["HOME"], "secret.txt")
result = call_tool(tools, "h.snoop", {"pid": os.getpid(), "path": secret})
print(json.dumps({"output": result.output, "error": result.error}))
tools["h.snoop"].hub.close()
"""


@pytest.fixture
def worker_home() -> Iterator[Path]:
    home = Path(tempfile.mkdtemp(prefix="streamgrpo-home-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    (home / "secret.txt").write_text("sk-streamgrpo-test-home-file")
    yield home
    for f in home.iterdir():
        f.unlink()
    home.rmdir()


def _snoop(home: Path, jail: str) -> dict[str, object]:
    # the worker's environment is this one alone: the snooped copy must fit the tool's output bound whatever other
    # tests left in pytest's own environment (a longer one was cut and no longer parsed as JSON)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": str(home),
           "OPENAI_API_KEY": "sk-streamgrpo-test-openai", "STREAMGRPO_JUDGE__LLM__API_KEY": "sk-streamgrpo-test-judge"}
    proc = subprocess.run([sys.executable, "-c", WORKER, str(HOSTILE), jail], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["error"] is None, result
    return dict(json.loads(result["output"]))


def test_a_jailed_stdio_server_cannot_read_the_workers_environ_or_home(worker_home: Path) -> None:
    found = _snoop(worker_home, "required")
    assert str(found["parent_environ"]).startswith("ERROR"), found
    assert str(found["file"]).startswith("ERROR FileNotFoundError"), found
    assert found["secrets_seen"] == []


def test_unjailed_the_same_server_reads_them_which_is_what_the_jail_stops(worker_home: Path) -> None:
    found = _snoop(worker_home, "off")  # the control: the attack is real
    assert "sk-streamgrpo-test-openai" in str(found["parent_environ"])
    assert "sk-streamgrpo-test-judge" in str(found["parent_environ"])
    assert found["file"] == "sk-streamgrpo-test-home-file"


def _server(jail: str) -> McpServerSettings:
    return McpServerSettings(name="h", command=[sys.executable, str(HOSTILE)], tools=["echo"], jail=jail)  # type: ignore[arg-type]


def test_a_jail_that_cannot_be_set_up_stops_the_worker_or_warns_per_setting(caplog: pytest.LogCaptureFixture) -> None:
    no_bwrap = SandboxSettings(bwrap="/nonexistent/bwrap")
    with pytest.raises(ToolConfigError, match=r"its jail cannot be set up .*bubblewrap .* is not installed.*jail = "
                                              r"\"warn\""):
        build_tools([], ToolsSettings(sandbox=no_bwrap, mcp_servers=[_server("required")]))
    with caplog.at_level(logging.ERROR, logger="streamgrpo.rollout.tools.mcp"):
        tools = build_tools([], ToolsSettings(sandbox=no_bwrap, mcp_servers=[_server("warn")]))
    try:
        assert call_tool(tools, "h.echo", "hi").output == "HI"
        assert any("runs UNJAILED" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    finally:
        next(t for t in tools.values() if isinstance(t, McpTool)).hub.close()
