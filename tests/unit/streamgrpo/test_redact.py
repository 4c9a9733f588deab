"""The one redaction path: registered secrets are masked in text, log records (message, arguments,
traceback, stack) and uncaught tracebacks; escaped forms of a secret too."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import uuid
from urllib.parse import quote

import pytest
from pydantic import BaseModel, SecretStr

from streamgrpo.log import RedactingFilter
from streamgrpo.redact import (
    MASK,
    install_excepthook,
    redact,
    redact_optional,
    register_secret,
    register_secrets_in,
)


def _secret() -> str:
    return f"sk-test/{uuid.uuid4().hex}+\"q\""


def test_registered_values_and_their_escaped_forms_are_masked() -> None:
    key = _secret()
    register_secret(SecretStr(key))
    for form in (key, json.dumps(key)[1:-1], quote(key, safe="")):
        assert redact(f"Bearer {form} was refused") == f"Bearer {MASK} was refused"
    assert redact_optional(None) is None
    assert redact("nothing secret here") == "nothing secret here"


def test_short_values_are_not_registered() -> None:
    register_secret("abc")
    assert redact("abc abc") == "abc abc"


PLACEHOLDER = "placeholder-" + uuid.uuid4().hex


class _Inner(BaseModel):
    token: SecretStr = SecretStr(PLACEHOLDER)


class _Outer(BaseModel):
    password: SecretStr | None = None
    inner: _Inner = _Inner()


def test_secrets_of_a_settings_model_are_registered_but_not_placeholder_defaults() -> None:
    pw, token = _secret(), _secret()
    register_secrets_in(_Outer(password=SecretStr(pw), inner=_Inner(token=SecretStr(token))))
    assert redact(f"{pw} {token}") == f"{MASK} {MASK}"
    register_secrets_in(_Outer())
    assert redact(PLACEHOLDER) == PLACEHOLDER


def test_log_records_are_masked_in_message_arguments_traceback_and_stack() -> None:
    key = _secret()
    register_secret(key)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger(f"test.redact.{uuid.uuid4().hex}")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        raise RuntimeError(f"server said: Bearer {key}")
    except RuntimeError:
        logger.exception("call failed with %s", key, stack_info=True)
    text = stream.getvalue()
    assert key not in text
    assert text.count(MASK) >= 2 and "RuntimeError: server said: Bearer " + MASK in text


def test_uncaught_tracebacks_are_masked(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    key = _secret()
    register_secret(key)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    install_excepthook()
    try:
        raise ValueError(f"echo {key}")
    except ValueError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)

    def boom() -> None:
        raise ValueError(f"thread echo {key}")

    thread = threading.Thread(target=boom, name="leaky")
    thread.start()
    thread.join()
    err = capsys.readouterr().err
    assert key not in err
    assert f"ValueError: echo {MASK}" in err and f"ValueError: thread echo {MASK}" in err
    assert "Exception in thread leaky" in err
