"""Wikipedia search through the MediaWiki API (online only; disabled by default).

Disabled (``[rollout.tools.wikipedia] enabled = false``, the default, since the rollout workers usually have
no internet), every call returns a ToolResult error that says so and how to enable it. Enabled, a
call runs ``action=query&list=search`` with ``httpx`` (imported lazily; timeout and User-Agent from
the settings) and returns the titles and plain-text snippets of the top results.

Covered: search result titles and snippets (HTML tags and entities stripped), HTTP and network
errors reported as tool errors. Not covered: fetching full article text, caching, rate limiting
(Wikimedia asks for a descriptive User-Agent and modest request rates; keep it that way).
"""

from __future__ import annotations

import html
import re
from typing import Any

from streamgrpo.rollout.tools.base import Param, Tool, ToolExample, ToolResult, ToolSpec
from streamgrpo.rollout.tools.config import WikipediaSettings
from streamgrpo.rollout.tools.errors import ToolConfigError

_TAG = re.compile(r"<[^>]+>")


def clean_snippet(snippet: str) -> str:
    """MediaWiki search snippets carry <span> highlights and entities; return plain text."""
    return html.unescape(_TAG.sub("", snippet)).strip()


def format_results(payload: dict[str, Any]) -> str:
    """Render a ``list=search`` answer as numbered ``title: snippet`` lines."""
    hits = payload.get("query", {}).get("search", [])
    if not hits:
        return "no Wikipedia article matches; try other keywords"
    return "\n".join(f"[{i}] {h.get('title', '?')}: {clean_snippet(str(h.get('snippet', '')))}"
                     for i, h in enumerate(hits, start=1))


class WikipediaSearch(Tool):
    """``{"query": "Marcion of Sinope"}`` -> titles and snippets of matching articles."""

    def __init__(self, settings: WikipediaSettings | None = None, *, max_output_chars: int = 2000) -> None:
        super().__init__(max_output_chars=max_output_chars)
        self.settings = settings or WikipediaSettings()
        if self.settings.enabled:
            try:
                import httpx  # noqa: F401, PLC0415 - fail at start, not on the first call
            except ImportError as exc:
                raise ToolConfigError("the wikipedia tool needs httpx: pip install 'streamgrpo[ml]'") from exc
        self.spec = ToolSpec(
            name="wikipedia",
            description="Searches English Wikipedia and returns the titles and snippets of the best articles"
            + ("" if self.settings.enabled else " (DISABLED in this deployment: offline)") + ".",
            params=(Param("query", "string", "What to search for, e.g. 'events of 144 AD'."),),
            limits=f"{self.settings.top_k} results; snippets only; {self.settings.timeout_s:g}s timeout.",
            examples=(ToolExample({"query": "Marcion of Sinope"}, "[1] Marcion of Sinope: Marcion of Sinope was ..."),),
        )

    def _call(self, args: dict[str, Any]) -> ToolResult:
        if not self.settings.enabled:
            return ToolResult(output="", error="wikipedia search is disabled (offline); enable it with "
                              "[rollout.tools.wikipedia] enabled = true where the worker has internet access, or use "
                              "knowledge_search instead")
        import httpx  # noqa: PLC0415 - optional (ml extra); presence checked in __init__
        params = {"action": "query", "list": "search", "srsearch": args["query"], "format": "json",
                  "srlimit": str(self.settings.top_k), "utf8": "1"}
        try:
            resp = httpx.get(self.settings.api_url, params=params, timeout=self.settings.timeout_s,
                             headers={"User-Agent": self.settings.user_agent})
            resp.raise_for_status()
            payload = resp.json()
        except httpx.HTTPStatusError as exc:
            return ToolResult(output="", error=f"Wikipedia answered HTTP {exc.response.status_code}; try again later")
        except httpx.HTTPError as exc:
            return ToolResult(output="", error=f"Wikipedia is unreachable ({type(exc).__name__}: {exc})")
        except ValueError as exc:
            return ToolResult(output="", error=f"Wikipedia returned something that is not JSON ({exc})")
        if not isinstance(payload, dict):
            return ToolResult(output="", error="Wikipedia returned an unexpected answer (not a JSON object)")
        return ToolResult(output=format_results(payload))
