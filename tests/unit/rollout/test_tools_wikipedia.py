"""Wikipedia tool: the disabled (offline) path, and the enabled path against a local stub MediaWiki
server on 127.0.0.1 (a real HTTP server in a thread; the real API is unreachable here)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from streamgrpo.rollout.tools.config import WikipediaSettings
from streamgrpo.rollout.tools.wikipedia import WikipediaSearch, clean_snippet


class _Stub(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server API
        qs = parse_qs(urlparse(self.path).query)
        self.server.requests.append((qs, self.headers.get("User-Agent")))  # type: ignore[attr-defined]
        if qs.get("srsearch") == ["boom"]:
            self.send_response(503)
            self.end_headers()
            return
        hits = [] if qs.get("srsearch") == ["nothing"] else [
            {"title": "Marcion of Sinope", "snippet": '<span class="searchmatch">Marcion</span> was excommunicated &amp; ...'},
            {"title": "144", "snippet": "Year 144 (CXLIV)"},
        ]
        body = json.dumps({"query": {"search": hits[: int(qs["srlimit"][0])]}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[HTTPServer]:
    server = HTTPServer(("127.0.0.1", 0), _Stub)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def test_disabled_by_default_with_a_clear_error() -> None:
    tool = WikipediaSearch()
    result = tool.run({"query": "Marcion"})
    assert result.error is not None
    assert result.error.startswith("wikipedia search is disabled (offline); enable it with [rollout.tools.wikipedia] enabled = true")
    assert "DISABLED" in tool.spec.description


def test_enabled_queries_the_mediawiki_api(stub: HTTPServer) -> None:
    url = f"http://127.0.0.1:{stub.server_address[1]}/w/api.php"
    tool = WikipediaSearch(WikipediaSettings(enabled=True, api_url=url, top_k=2, timeout_s=5))
    result = tool.run({"query": "Marcion 144"})
    assert result.error is None
    assert result.output == "[1] Marcion of Sinope: Marcion was excommunicated & ...\n[2] 144: Year 144 (CXLIV)"
    qs, agent = stub.requests[0]  # type: ignore[attr-defined]
    assert qs["action"] == ["query"] and qs["list"] == ["search"] and qs["srsearch"] == ["Marcion 144"]
    assert agent is not None and agent.startswith("streamgrpo/")
    assert tool.run({"query": "nothing"}).output.startswith("no Wikipedia article matches")
    assert tool.run({"query": "boom"}).error == "Wikipedia answered HTTP 503; try again later"


def test_unreachable_server_is_an_error(stub: HTTPServer) -> None:
    port = stub.server_address[1]
    stub.shutdown()
    stub.server_close()
    tool = WikipediaSearch(WikipediaSettings(enabled=True, api_url=f"http://127.0.0.1:{port}/", timeout_s=2))
    result = tool.run({"query": "x"})
    assert result.error is not None and result.error.startswith("Wikipedia is unreachable")


def test_clean_snippet() -> None:
    assert clean_snippet('<span class="x">A</span> &lt;b&gt; ') == "A <b>"
