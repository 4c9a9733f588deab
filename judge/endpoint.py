"""A chat call to an OpenAI-compatible endpoint with timeout and one retry policy (tenacity).

Up to ``max_retries`` retries, waiting ``backoff_s * 2**(n-1)`` capped at ``backoff_max_s``; retried:
timeouts, connection errors, HTTP 429 and 5xx; not retried: other 4xx (a bad model name or key does
not improve by waiting). The openai client's own retries are off: they ignore these settings (0.5-8 s
with jitter) and also retry 408/409 and whatever ``x-should-retry`` asks. Then :class:`JudgeCallError`,
whose text has the exception class, HTTP status and the server's error message only (never request
headers), with the API key and credential-like words masked.
Not covered: streaming, tool calls, async clients (the service runs calls in a thread pool).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from streamgrpo.judge.config import LLMSettings
from streamgrpo.judge.errors import JudgeCallError

log = logging.getLogger(__name__)
_CREDENTIAL = re.compile(r"(?i)(authorization|bearer|api[-_ ]?key)(\W{0,3})\S+")


class ChatEndpoint:
    """Blocking chat completions under one retry policy; thread-safe (the openai client is)."""

    def __init__(self, settings: LLMSettings, *, sleep: Callable[[float], None] = time.sleep) -> None:
        try:
            import openai
            import tenacity
        except ModuleNotFoundError as exc:  # pragma: no cover - ml extra missing
            from streamgrpo.errors import MissingExtraError

            raise MissingExtraError("ml", exc.name or "openai") from exc
        from streamgrpo.redact import register_secrets_in

        register_secrets_in(settings)  # every user of the key masks it: an endpoint may echo it in its errors
        self._openai, self.settings, s = openai, settings, settings
        self._client = openai.OpenAI(base_url=s.base_url, api_key=s.api_key.get_secret_value(), timeout=s.timeout_s,
                                     max_retries=0)
        self.attempts = 0  # total requests sent (for metrics and tests)
        self._retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(s.max_retries + 1), sleep=sleep, reraise=True,
            wait=tenacity.wait_exponential(multiplier=s.backoff_s, max=s.backoff_max_s),
            retry=tenacity.retry_if_exception(self._retryable),
            before_sleep=lambda st: log.warning("judge endpoint attempt %d/%d failed: %s", st.attempt_number,
                                                s.max_retries + 1, st.outcome and type(st.outcome.exception()).__name__))

    def _retryable(self, exc: BaseException) -> bool:
        status = exc.status_code if isinstance(exc, self._openai.APIStatusError) else 0
        return isinstance(exc, self._openai.APIConnectionError) or status == 429 or status >= 500  # incl. timeouts

    def describe(self, exc: BaseException) -> str:
        """Class, HTTP status and the server's error message of ``exc``, credentials masked."""
        body, status = getattr(exc, "body", None), getattr(exc, "status_code", None)
        detail = body.get("message") if isinstance(body, dict) else (None if status else str(exc))
        text = type(exc).__name__ + (f" (HTTP {status})" if status else "") + (f": {str(detail)[:300]}" if detail else "")
        key = self.settings.api_key.get_secret_value()
        return _CREDENTIAL.sub(r"\1\2***", text.replace(key, "***") if len(key) >= 4 else text)

    def complete(self, messages: list[dict[str, str]]) -> str:
        """The reply text of one chat completion; raises JudgeCallError after the retries."""
        s = self.settings
        kwargs: dict[str, Any] = {"model": s.model, "messages": messages, "temperature": s.temperature,
                                  "max_tokens": s.max_tokens} | ({"response_format": {"type": "json_object"}}
                                                                 if s.json_mode else {})
        retrying = self._retrying.copy()  # per call: its statistics count this call's attempts
        try:
            reply = retrying(self._client.chat.completions.create, **kwargs)
        except self._openai.OpenAIError as exc:
            what = (f"failed {retrying.statistics['attempt_number']} times; last error" if self._retryable(exc)
                    else "refused the request:")
            raise JudgeCallError(f"judge endpoint {what} {self.describe(exc)}") from exc
        finally:
            self.attempts += retrying.statistics.get("attempt_number", 0)
        return next((c.message.content or "" for c in getattr(reply, "choices", None) or []), "")
