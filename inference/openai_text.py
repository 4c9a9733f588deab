"""A fixed chat model (executor / verifier / synthesiser) over any OpenAI-compatible endpoint.

Uses the ``openai`` package; the API key is a ``SecretStr`` (``"EMPTY"`` when unset, which vLLM
accepts) and is never logged. The client retries transient failures itself (``max_retries``).

What is covered: single-turn chat completion returning the assistant text. What is not:
streaming, tool calls, logprobs (the planner policy owns token-level bookkeeping).
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from streamgrpo.inference.errors import BackendUnavailableError, PolicyError


class OpenAITextModel:
    """:class:`~.base.TextModel` over ``POST {base_url}/chat/completions``."""

    def __init__(self, base_url: str, model: str, api_key: SecretStr | str | None = None, *, timeout: float = 60.0,
                 max_retries: int = 2) -> None:
        import openai

        if isinstance(api_key, str):
            api_key = SecretStr(api_key)
        self.model = model
        self._openai = openai
        key = api_key.get_secret_value() if api_key is not None else "EMPTY"
        self._client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries)

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> str:
        try:
            response: Any = self._client.chat.completions.create(
                model=self.model, messages=messages, max_tokens=max_tokens, temperature=temperature)  # type: ignore[arg-type]
        except (self._openai.APIConnectionError, self._openai.APITimeoutError, self._openai.InternalServerError) as exc:
            raise BackendUnavailableError(f"chat endpoint for {self.model!r} unavailable: {exc}") from exc
        except self._openai.APIStatusError as exc:
            raise PolicyError(f"chat endpoint refused the request for {self.model!r}: HTTP {exc.status_code} "
                              f"{exc.message}") from exc
        if not response.choices:
            raise PolicyError(f"chat endpoint returned no choices for {self.model!r}")
        return str(response.choices[0].message.content or "")
