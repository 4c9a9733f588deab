"""Settings of ``streamgrpo serve``: section ``[serve]``, env ``STREAMGRPO_SERVE__<FIELD>``.

The command-line options (``--host``, ``--port``, ``--max-question-bytes``, ``--version-wait-s``) override them.
The bearer token has no option (a command line is visible to every user of the machine in ``ps``): set it in the
TOML file or in ``STREAMGRPO_SERVE__AUTH_TOKEN``. It is a ``SecretStr``: printed as ``**********`` and registered
for redaction (:mod:`streamgrpo.redact`) before the server starts.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from streamgrpo.config import StrictModel
from streamgrpo.serve.bounds import ServeLimits

#: Fewest characters of a bearer token (a shorter one is guessable, and too short to be redacted reliably).
MIN_TOKEN_CHARS = 16
_DEFAULTS = ServeLimits()


class ServeSettings(StrictModel):
    """``streamgrpo serve``: where the HTTP transport listens, who may call it, and the bounds of one call."""

    host: str = Field("127.0.0.1", min_length=1, pattern=r"^[0-9A-Za-z.:\-\[\]]+$",
                      description="Address the HTTP transport binds to. 127.0.0.1 (default): this machine only; "
                      "another address (0.0.0.0) reaches the network, so set auth_token with it.")
    port: int = Field(8765, ge=1, le=65535, description="Port of the HTTP transport (http://HOST:PORT/mcp).")
    auth_token: SecretStr | None = Field(
        None, description="Bearer token every HTTP request must carry (header `Authorization: Bearer <token>`); a "
        f"request without it, or with another, is answered 401. At least {MIN_TOKEN_CHARS} characters (e.g. "
        "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`). Unset: no authentication, keep host on "
        "127.0.0.1. stdio needs none (the client starts the process). Never logged.")
    max_question_bytes: int = Field(_DEFAULTS.max_question_bytes, ge=1, le=1_000_000,
                                    description="Longest question (UTF-8 bytes) `solve` accepts; a longer one is an "
                                    "error at once. A question whose prompt exceeds [rollout] max_prompt_tokens is cut "
                                    "to fit.")
    max_argument_bytes: int = Field(_DEFAULTS.max_argument_bytes, ge=64, le=1_000_000,
                                    description="Longest value (UTF-8 bytes) of every other text argument (version, "
                                    "rollout_id, comment); a longer one is an error at once. A feedback_token (signed "
                                    "by this server) may be up to 8192 bytes, or this bound if larger.")
    max_concurrent_solves: int = Field(_DEFAULTS.max_concurrent_solves, ge=1, le=256,
                                       description="`solve` calls running at once (each holds a worker thread while "
                                       "the model answers); more wait their turn without holding a thread. `adapters` "
                                       "and `feedback` never wait behind them.")
    version_wait_s: float = Field(_DEFAULTS.version_wait_s, ge=0, le=3600,
                                  description="How long a solve pinned to a version waits for it to be published and "
                                  "loaded.")

    @field_validator("auth_token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < MIN_TOKEN_CHARS:
            raise ValueError(f"a bearer token needs at least {MIN_TOKEN_CHARS} characters (unset it for no "
                             "authentication)")
        if value is not None and value.get_secret_value() != value.get_secret_value().strip():
            raise ValueError("a bearer token has no leading or trailing spaces")
        return value

    def limits(self) -> ServeLimits:
        return ServeLimits(self.max_question_bytes, self.version_wait_s, self.max_argument_bytes,
                           self.max_concurrent_solves)
