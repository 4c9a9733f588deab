"""The group_relative judge inside the service, on the real broker, against a local stub LLM server.

The stub only exercises protocol and wiring: it answers score = position/10 for each candidate of
the request, so the test can check that the service sends ONE request per group (a complete group
at once, a partial group after ``group_wait_s``) and maps each score back to the right rollout.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.judge.config import JudgeSettings, LLMSettings
from streamgrpo.judge.service import JudgeService
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

pytestmark = pytest.mark.broker

REQUESTS: list[list[str]] = []


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answers = re.findall(r"Candidate \d+:\n(\S+)", body["messages"][1]["content"])
        REQUESTS.append(answers)
        scores = [{"id": i, "score": i / 10} for i in range(1, len(answers) + 1)]
        payload = json.dumps({
            "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": json.dumps({"scores": scores})}}],
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def llm_url() -> Iterator[str]:
    REQUESTS.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _rollout(gid: str, rid: str, answer: str, n: int) -> R.RolloutCompleted:
    return R.RolloutCompleted(
        envelope=R.Envelope.new("test", task_id="t1", group_id=gid, rollout_id=rid),
        question="Capital of France?", source="nq", final_answer=answer, turns=1,
        status=R.RolloutStatus.ANSWERED, group_size=n, adapter_name="planner", adapter_version=1, duration_ms=1,
    )


def test_group_relative_scores_each_group_in_one_call(kafka_ns: KafkaSettings, llm_url: str) -> None:
    task = R.Task(envelope=R.Envelope.new("test", task_id="t1"), question="Capital of France?", source="nq",
                  group_size=3, ground_truths=["Paris"])
    full = [_rollout("g-full", f"f{i}", f"full-{i}", 3) for i in range(3)]
    partial = [_rollout("g-part", f"p{i}", f"part-{i}", 3) for i in range(2)]  # one rollout never comes
    with EventProducer(kafka_ns, "test") as prod:
        for e in [task, *full, *partial]:
            prod.send(e)
    settings = JudgeSettings(
        routes={"nq": "group_relative"}, group_wait_s=2.0, poll_timeout_ms=100, consumer_group="judge-gr",
        llm=LLMSettings(base_url=llm_url, model="stub", timeout_s=5.0, max_retries=0),
    )
    service = JudgeService(kafka_ns, settings)
    asyncio.run(asyncio.wait_for(service.run(max_idle_s=3.0), timeout=120))
    service.close()

    assert sorted(map(sorted, REQUESTS)) == [["full-0", "full-1", "full-2"], ["part-0", "part-1"]]
    rewards = {r.event.envelope.rollout_id: r.event for r in read_topic(kafka_ns, "rewards", timeout_s=10)}
    assert set(rewards) == {"f0", "f1", "f2", "p0", "p1"}
    answer_of = {e.envelope.rollout_id: e.final_answer for e in [*full, *partial]}
    for rid, reward in rewards.items():
        request = next(req for req in REQUESTS if answer_of[rid] in req)
        assert reward.score == pytest.approx((request.index(answer_of[rid]) + 1) / 10)
        assert reward.judge.name == "group_relative" and reward.judge.model == "stub"
        assert reward.status == R.RewardStatus.OK and not reward.cached
