"""Protocol handling of the LLM judges against a local OpenAI-compatible stub server.

The stub (http.server on 127.0.0.1, random port) replays scripted replies: it tests parsing,
repair, retries, timeouts and fallbacks through the real ``openai`` client and real HTTP. It does
not test judgement quality (the stub's verdicts are scripted, not judged).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import SecretStr

from streamgrpo.judge.config import LLMSettings
from streamgrpo.judge.endpoint import ChatEndpoint
from streamgrpo.judge.errors import JudgeCallError, ScoringError
from streamgrpo.judge.scorers.base import Candidate
from streamgrpo.judge.scorers.group_relative import GroupRelativeScorer
from streamgrpo.judge.scorers.llm import LLMScorer


class Stub:
    """Scripted replies: ("ok", content) | ("status", code[, message]) | ("sleep", seconds, content)."""

    def __init__(self) -> None:
        self.script: list[tuple] = []
        self.requests: list[dict] = []
        self.auth: list[str] = []
        self.lock = threading.Lock()

    def next(self) -> tuple:
        with self.lock:
            return self.script.pop(0) if self.script else ("status", 503)


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with stub.lock:
                stub.requests.append(body)
                stub.auth.append(self.headers.get("Authorization", ""))
            step = stub.next()
            if step[0] == "sleep":
                time.sleep(step[1])
                step = ("ok", step[2])
            if step[0] == "status":
                message = step[2] if len(step) > 2 else "stub error"
                payload = json.dumps({"error": {"message": message, "type": "server_error"}}).encode()
                self.send_response(step[1])
            else:
                payload = json.dumps({
                    "id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": step[1]}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode()
                self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            try:
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return H


@pytest.fixture
def stub() -> Iterator[tuple[Stub, str]]:
    s = Stub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(s))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield s, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _llm(url: str, sleeps: list[float], **kw: object) -> LLMScorer:
    settings = LLMSettings(base_url=url, api_key=SecretStr("sk-test-secret"), model="stub-judge",
                           timeout_s=kw.pop("timeout_s", 5.0), **kw)  # type: ignore[arg-type]
    return LLMScorer(settings, endpoint=ChatEndpoint(settings, sleep=sleeps.append))


CAND = Candidate("What is the capital of France?", "Paris, France", ("Paris",))


def test_well_formed_verdict(stub: tuple[Stub, str]) -> None:
    s, url = stub
    s.script = [("ok", json.dumps({"correct": True, "score": 0.9, "explanation": "same city"}))]
    score = _llm(url, []).score(CAND)
    assert score.score == 0.9 and score.correct is True
    assert score.judge_name == "llm" and score.model == "stub-judge"
    assert ("parse_repaired", 0.0, 0.0) in score.components
    assert not score.is_fallback
    req = s.requests[0]
    assert req["model"] == "stub-judge" and "Paris, France" in req["messages"][1]["content"]
    assert "- Paris" in req["messages"][1]["content"]
    assert s.auth[0] == "Bearer sk-test-secret"


def test_near_json_is_repaired(stub: tuple[Stub, str]) -> None:
    s, url = stub
    s.script = [("ok", "Sure! ```json\n{'correct': True, 'score': 0.25, 'explanation': 'partly',}\n```")]
    score = _llm(url, []).score(CAND)
    assert score.score == 0.25 and score.correct is True
    assert ("parse_repaired", 1.0, 0.0) in score.components


def test_unrepairable_reply_falls_back_without_retry(stub: tuple[Stub, str]) -> None:
    s, url = stub
    s.script = [("ok", "I think the answer is right, 10/10.")]
    llm = _llm(url, [])
    score = llm.score(CAND)
    assert score.is_fallback and score.components[0][0] == "fallback:qa"
    assert ("llm_error:parse", 1.0, 0.0) in score.components
    assert score.judge_name == "llm" and score.model is None
    assert score.score == 1.0 and score.correct is True  # the qa judge's own verdict on "Paris, France"
    assert score.rubric_hash != llm.rubric_hash
    assert len(s.requests) == 1


def test_out_of_range_score_is_a_failure_not_a_score(stub: tuple[Stub, str]) -> None:
    s, url = stub
    s.script = [("ok", json.dumps({"correct": False, "score": 7, "explanation": "out of 10"}))]
    score = _llm(url, []).score(Candidate("q", "London", ("Paris",)))
    assert score.is_fallback and score.score == 0.0 and score.correct is False


def test_http_500_is_retried_then_succeeds(stub: tuple[Stub, str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    s, url = stub
    s.script = [("status", 500), ("status", 502), ("ok", '{"correct": false, "score": 0.0, "explanation": "no"}')]
    sleeps: list[float] = []
    score = _llm(url, sleeps, max_retries=2, backoff_s=0.5).score(CAND)
    assert not score.is_fallback and score.score == 0.0 and score.correct is False
    assert len(s.requests) == 3
    assert sleeps == [0.5, 1.0]  # exponential backoff
    assert "attempt 1/3 failed" in caplog.text and "sk-test-secret" not in caplog.text


def test_timeouts_exhaust_retries_then_fallback(stub: tuple[Stub, str]) -> None:
    s, url = stub
    ok = json.dumps({"correct": True, "score": 1.0, "explanation": "late"})
    s.script = [("sleep", 1.5, ok)] * 3
    sleeps: list[float] = []
    llm = _llm(url, sleeps, timeout_s=0.3, max_retries=2, backoff_s=0.1, backoff_max_s=0.15)
    score = llm.score(Candidate("2+2?", "The answer is 4", ("4",)))
    assert len(s.requests) == 3 and llm.endpoint.attempts == 3
    assert sleeps == [0.1, 0.15]  # capped
    assert score.components[0][0] == "fallback:math" and score.score == 1.0
    assert ("llm_error:call", 1.0, 0.0) in score.components


def test_client_error_is_not_retried(stub: tuple[Stub, str]) -> None:
    s, url = stub
    s.script = [("status", 404)]
    score = _llm(url, [], max_retries=3).score(CAND)
    assert len(s.requests) == 1 and score.is_fallback


def test_failure_without_ground_truth_raises(stub: tuple[Stub, str]) -> None:
    s, url = stub
    s.script = [("status", 500)]
    with pytest.raises(ScoringError, match="ground truth"):
        _llm(url, [], max_retries=0).score(Candidate("q", "a", ()))


def _group(url: str, sleeps: list[float], **kw: object) -> GroupRelativeScorer:
    settings = LLMSettings(base_url=url, model="stub-judge", timeout_s=5.0, **kw)  # type: ignore[arg-type]
    return GroupRelativeScorer(settings, endpoint=ChatEndpoint(settings, sleep=sleeps.append))


GROUP = [Candidate("Capital of France?", a, ("Paris",)) for a in ("Paris", "Lyon", "Paris, France")]


def test_group_relative_one_call_for_the_group(stub: tuple[Stub, str]) -> None:
    s, url = stub
    reply = {"scores": [{"id": 3, "score": 0.9}, {"id": 1, "score": 1.0}, {"id": 2, "score": 0.1}]}
    s.script = [("ok", json.dumps(reply))]
    scores = _group(url, []).score_group(GROUP)
    assert [x.score for x in scores] == [1.0, 0.1, 0.9]
    assert len(s.requests) == 1
    content = s.requests[0]["messages"][1]["content"]
    assert all(f"Candidate {i}:" in content for i in (1, 2, 3))
    assert all(x.judge_name == "group_relative" and x.correct is None for x in scores)


def test_group_relative_bare_list_is_repaired(stub: tuple[Stub, str]) -> None:
    s, url = stub
    s.script = [("ok", "Scores: [1, 0.2, 0.8]")]
    scores = _group(url, []).score_group(GROUP)
    assert [x.score for x in scores] == [1.0, 0.2, 0.8]
    assert all(("parse_repaired", 1.0, 0.0) in x.components for x in scores)


def test_group_relative_wrong_length_falls_back_per_answer(stub: tuple[Stub, str]) -> None:
    s, url = stub
    s.script = [("ok", json.dumps({"scores": [1.0, 0.0]}))]
    scores = _group(url, []).score_group(GROUP)
    assert [x.components[0][0] for x in scores] == ["fallback:qa"] * 3
    assert [x.correct for x in scores] == [True, False, True]


def test_group_relative_http_errors_retry_then_fallback(stub: tuple[Stub, str]) -> None:
    s, url = stub
    s.script = [("status", 500)] * 2
    sleeps: list[float] = []
    scores = _group(url, sleeps, max_retries=1, backoff_s=0.2).score_group(GROUP)
    assert len(s.requests) == 2 and sleeps == [0.2]
    assert all(x.is_fallback for x in scores)


def test_error_text_never_echoes_credentials(stub: tuple[Stub, str]) -> None:
    # a proxy that echoes the request's Authorization header into its error body
    s, url = stub
    echo = "bad key; you sent Authorization: Bearer sk-test-secret and api_key=sk-test-secret"
    s.script = [("status", 401, echo), ("status", 503, echo), ("status", 503, echo)]
    settings = LLMSettings(base_url=url, api_key=SecretStr("sk-test-secret"), model="m", max_retries=1)
    endpoint = ChatEndpoint(settings, sleep=lambda _: None)
    with pytest.raises(JudgeCallError) as refused:
        endpoint.complete([{"role": "user", "content": "hi"}])
    with pytest.raises(JudgeCallError) as failed:
        endpoint.complete([{"role": "user", "content": "hi"}])
    assert str(refused.value).startswith("judge endpoint refused the request: AuthenticationError (HTTP 401): bad key")
    assert str(failed.value).startswith("judge endpoint failed 2 times; last error InternalServerError (HTTP 503)")
    for text in (str(refused.value), str(failed.value)):
        assert "sk-test-secret" not in text and "Authorization: ***" in text
    assert endpoint.attempts == 3 and s.auth == ["Bearer sk-test-secret"] * 3
