"""Start the fixture MCP server (tests/fixtures/mcp_tools_server.py) for tests and benchmarks: as stdio settings,
or as a streamable-HTTP subprocess on a free port (stopped by pid)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from streamgrpo.rollout.tools.config import McpServerSettings

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_tools_server.py"


def stdio_server(name: str = "fx", *extra: str, **settings: Any) -> McpServerSettings:
    """Settings of the fixture server over stdio (``extra``: its flags, e.g. ``--malformed``)."""
    return McpServerSettings(name=name, command=[sys.executable, str(SERVER), *extra], **settings)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout_s: float = 30.0) -> None:
    """Until something answers HTTP at ``url`` (any status)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)  # noqa: S310 - a local test server
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing answered at {url} within {timeout_s:g}s")


@contextmanager
def http_server(port: int | None = None) -> Iterator[str]:
    """The URL (``http://127.0.0.1:<port>/mcp``) of the fixture server running as an HTTP subprocess."""
    port = port or free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "--http", "--port", str(port)],  # noqa: S603
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_http(url)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
