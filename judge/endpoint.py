"""A chat call to an OpenAI-compatible endpoint with timeout, retries and exponential backoff.

The ``openai`` client is built with ``max_retries=0``: retries are ours, so they are counted and
bounded the same way on every server. Retried: timeouts, connection errors, HTTP 429 and 5xx.
Not retried: other HTTP 4xx (a bad model name or key does not improve by waiting). After the last
attempt :class:`JudgeCallError` is raised; the caller decides the fallback.
The API key is a ``SecretStr`` and is never logged.

What is not covered: streaming replies, tool calls, async clients (the judge service runs calls in
a thread pool sized by ``llm.concurrency``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from streamgrpo.judge.config import LLMSettings
from streamgrpo.judge.errors import JudgeCallError

log = logging.getLogger(__name__)


class ChatEndpoint:
    """Blocking chat completions with our retry policy; thread-safe (the openai client is)."""

    def __init__(self, settings: LLMSettings, *, sleep: Callable[[float], None] = time.sleep) -> None:
        try:
            import openai
        except ModuleNotFoundError as exc:  # pragma: no cover - ml extra missing
            from streamgrpo.errors import MissingExtraError

            raise MissingExtraError("ml", "openai") from exc
        self._openai = openai
        self.settings = settings
        self._sleep = sleep
        self._client = openai.OpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key.get_secret_value(),
            timeout=settings.timeout_s,
            max_retries=0,
        )
        self.attempts = 0  # total requests sent (for metrics and tests)

    def _retryable(self, exc: Exception) -> bool:
        o = self._openai
        if isinstance(exc, (o.APITimeoutError, o.APIConnectionError, o.RateLimitError, o.InternalServerError)):
            return True
        return isinstance(exc, o.APIStatusError) and exc.status_code >= 500

    def complete(self, messages: list[dict[str, str]]) -> str:
        """The reply text of one chat completion; raises JudgeCallError after the retries."""
        s = self.settings
        kwargs: dict[str, Any] = {"model": s.model, "messages": messages, "temperature": s.temperature,
                                  "max_tokens": s.max_tokens}
        if s.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        last: Exception | None = None
        for attempt in range(s.max_retries + 1):
            if attempt:
                self._sleep(min(s.backoff_max_s, s.backoff_s * 2 ** (attempt - 1)))
            self.attempts += 1
            try:
                reply = self._client.chat.completions.create(**kwargs)
            except self._openai.OpenAIError as exc:
                last = exc
                if not self._retryable(exc):
                    raise JudgeCallError(f"judge endpoint refused the request: {type(exc).__name__}: {exc}") from exc
                log.warning("judge endpoint attempt %d/%d failed: %s", attempt + 1, s.max_retries + 1,
                            type(exc).__name__)
                continue
            choices = getattr(reply, "choices", None) or []
            content = choices[0].message.content if choices else None
            return content or ""
        raise JudgeCallError(
            f"judge endpoint failed {s.max_retries + 1} times; last error {type(last).__name__}: {last}"
        ) from last
