"""The LLM judge's API key never leaves the process, even when the endpoint echoes it: a fake
endpoint on 127.0.0.1 answers 401 with the request's Authorization header in its error body."""

from __future__ import annotations

import logging
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.echo_endpoint import echo_endpoint
from pydantic import SecretStr

from streamgrpo.avro import records as R
from streamgrpo.cli import main
from streamgrpo.judge.config import LLMSettings
from streamgrpo.judge.decide import Reject, decide_reward
from streamgrpo.judge.endpoint import ChatEndpoint
from streamgrpo.judge.errors import JudgeCallError
from streamgrpo.judge.scorers.base import Candidate
from streamgrpo.judge.scorers.group_relative import GroupRelativeScorer
from streamgrpo.judge.scorers.llm import LLMScorer
from streamgrpo.log import setup_logging
from streamgrpo.redact import MASK, redact

#: what stands for the key: the endpoint masks the credential it echoes (first line of defence), the
#: redaction path masks registered secrets (second); the text must show a mask, never the key
MASKED_BEARER = ("Bearer *****", f"Bearer {MASK}")


@pytest.fixture
def endpoint_url() -> Iterator[str]:
    with echo_endpoint() as url:
        yield url


@pytest.fixture
def key() -> str:
    return "sk-live-" + uuid.uuid4().hex


def _settings(url: str, key: str) -> LLMSettings:
    return LLMSettings(base_url=url, api_key=SecretStr(key), max_retries=0, timeout_s=10)


def test_the_fake_endpoint_really_echoes_the_key(endpoint_url: str, key: str) -> None:
    """Without this the other tests would prove nothing: the server's raw error body carries the key. The
    endpoint's own error text is the first line of defence and already masks it; the redaction path (the
    other tests) is the second."""
    import httpx

    raw = httpx.post(f"{endpoint_url.rstrip('/')}/chat/completions", headers={"Authorization": f"Bearer {key}"},
                     json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}, timeout=10)
    assert raw.status_code >= 400 and key in raw.text
    with pytest.raises(JudgeCallError) as info:
        ChatEndpoint(_settings(endpoint_url, key)).complete([{"role": "user", "content": "hi"}])
    assert key not in str(info.value)


@pytest.mark.parametrize("scorer", [LLMScorer, GroupRelativeScorer])
def test_every_llm_backed_scorer_registers_its_key_for_redaction(endpoint_url: str, scorer: type) -> None:
    """The second line of defence holds for each scorer built outside the judge service (e.g. `replay train
    --judge group_relative`): its key is registered when its endpoint is made, so any text redacted from then on
    masks it. Before, only the LLM scorer registered it; the group-relative scorer did not."""
    fresh = "sk-live-" + uuid.uuid4().hex
    assert redact(f"echo: {fresh}") == f"echo: {fresh}"  # not registered by anything else
    scorer(_settings(endpoint_url, fresh))
    assert redact(f"echo: {fresh}") == f"echo: {MASK}"


def _rollout() -> R.RolloutCompleted:
    return R.RolloutCompleted(
        envelope=R.Envelope.new("test", task_id="t1", group_id="g1", rollout_id="r1"), question="q?", source="nq",
        final_answer="Paris", turns=1, status=R.RolloutStatus.ANSWERED, group_size=1, adapter_name="planner",
        adapter_version=1, duration_ms=5, error=None, tool_calls={},
    )


def test_reward_error_and_dead_letter_reason_carry_no_key(endpoint_url: str, key: str) -> None:
    scorer = LLMScorer(_settings(endpoint_url, key))
    task = R.Task(envelope=R.Envelope.new("test", task_id="t1"), question="q?", source="nq", group_size=1,
                  ground_truths=[])  # no ground truth: no fallback, the failure becomes event text
    outcome = decide_reward(task, _rollout(), scorer)
    assert isinstance(outcome, Reject) and outcome.reason_code == "judge_error"
    assert key not in outcome.reason and any(m in outcome.reason for m in MASKED_BEARER)
    assert outcome.reward.error is not None and key not in outcome.reward.error


def test_the_fallback_warning_in_the_log_carries_no_key(endpoint_url: str, key: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        setup_logging("INFO")
        score = LLMScorer(_settings(endpoint_url, key)).score(Candidate("q?", "Paris", ("Paris",)))
    finally:
        root.handlers[:], root.level = saved
    assert score.components[1][0] == "llm_error:call"
    err = capsys.readouterr().err
    assert "llm judge failed" in err and any(m in err for m in MASKED_BEARER) and key not in err
    assert key not in err


def test_the_cli_error_line_carries_no_key(endpoint_url: str, key: str, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # main() installs the redacting hooks
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    config = tmp_path / "judge.toml"
    config.write_text(f'[judge.llm]\nbase_url = "{endpoint_url}"\napi_key = "{key}"\nmax_retries = 0\n')
    with pytest.raises(SystemExit) as info:
        main(["--config", str(config), "judge", "score", "--judge", "llm", "--question", "q?", "--answer", "Paris"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "\nerror: llm judge failed (call: " in "\n" + err
    assert any(m in err for m in MASKED_BEARER) and key not in err  # the error line and the log lines before it
