"""Issue 38, "feedback is authorised", across a restart: the real `streamgrpo serve` process (stdio, the `mcp` SDK's
Client; the tiny planner saved to disk; the embedded broker) answers alice's call and is stopped; a new `serve` on
the same home accepts alice's feedback with the feedback_token the first one gave her, and refuses a forged token.
The server secret the tokens are signed with is a file of the home with mode 0600, made once, and is in no log line
(DEBUG) and no event.
"""

from __future__ import annotations

import asyncio
import base64
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic

QUESTION = "What is 2 plus 3?"
ROLLOUT = '[rollout]\nmax_new_tokens = 16\n\n[rollout.tools]\nenabled = ["calculator"]\n'


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny-planner")
    build_tiny_model().save_pretrained(path)
    build_tiny_tokenizer().save_pretrained(path)
    return path


def _env(home: Path, config: Path, kafka: KafkaSettings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGRPO_") or k.startswith("STREAMGRPO_TEST_")}
    return {**env, "STREAMGRPO_HOME": str(home), "STREAMGRPO_CONFIG": str(config), "STREAMGRPO_LOOP__MAX_TURNS": "1",
            "STREAMGRPO_KAFKA__BOOTSTRAP": str(kafka.bootstrap), "STREAMGRPO_KAFKA__TOPIC_PREFIX": kafka.topic_prefix,
            "STREAMGRPO_LOG_LEVEL": "DEBUG"}


async def _session(env: dict[str, str], errlog: Path, client: str,
                   calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """One `streamgrpo serve` process over stdio, one client session; it exits when the session ends."""
    from mcp import Client, Implementation, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "streamgrpo.cli", "serve"], env=env)
    with errlog.open("w") as err:
        async with Client(stdio_client(params, errlog=err), client_info=Implementation(name=client, version="1")) as c:
            return [await c.call_tool(name, arguments, read_timeout_seconds=120) for name, arguments in calls]


@pytest.mark.broker
def test_feedback_with_a_token_from_before_a_restart_is_accepted_and_a_forged_one_is_refused(
        kafka_ns: KafkaSettings, tiny_model_dir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = tmp_path / "serve.toml"
    config.write_text(ROLLOUT.replace("[rollout]\n", f"[rollout]\nmodel = {str(tiny_model_dir)!r}\n"))
    env = _env(home, config, kafka_ns)

    (solved,) = asyncio.run(_session(env, tmp_path / "first.log", "alice", [("solve", {"question": QUESTION})]))
    assert not solved.is_error, (solved.content, (tmp_path / "first.log").read_text()[-3000:])
    reply = solved.structured_content
    rid, token = reply["rollout_id"], reply["feedback_token"]
    assert reply["recorded"] is True and token

    version, payload, mac = token.split(".")
    forged = f"{version}.{payload}.{base64.urlsafe_b64encode(os.urandom(32)).rstrip(b'=').decode()}"
    # the first serve has exited: a new process on the same home
    (mallory,) = asyncio.run(_session(env, tmp_path / "second.log", "mallory", [
        ("feedback", {"rollout_id": rid, "score": 1.0, "feedback_token": token})]))
    forged_reply, accepted = asyncio.run(_session(env, tmp_path / "third.log", "alice", [
        ("feedback", {"rollout_id": rid, "score": 0.0, "feedback_token": forged}),
        ("feedback", {"rollout_id": rid, "score": 1.0, "feedback_token": token, "comment": "right"})]))
    logs = {name: (tmp_path / name).read_text() for name in ("first.log", "second.log", "third.log")}

    assert mallory.is_error and "feedback_token" in mallory.content[0].text  # her token is not mallory's
    assert forged_reply.is_error and "feedback_token" in forged_reply.content[0].text
    assert not accepted.is_error, (accepted.content, logs["third.log"][-3000:])
    assert accepted.structured_content["judge"] == "human:mcp:alice" and accepted.structured_content["score"] == 1.0
    rewards = [r.event for r in read_topic(kafka_ns, "rewards") if isinstance(r.event, R.Reward)]
    human = [(w.envelope.rollout_id, w.score, w.judge.name, w.adapter_version, w.group_size) for w in rewards]
    assert human == [(rid, 1.0, "human:mcp:alice", reply["version"], 1)]
    done = [r.event for r in read_topic(kafka_ns, "rollouts") if isinstance(r.event, R.RolloutCompleted)]
    assert [(d.envelope.rollout_id, d.envelope.task_id) for d in done] == [(rid, rewards[0].envelope.task_id)]
    # the key is a file of the home, mode 0600, made once (the later serves verified the first one's token with it),
    # with no temporary file left beside it, and it is in no log line and no event
    key_file = home / "serve" / "feedback.key"
    key = key_file.read_text().strip()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and len(bytes.fromhex(key)) == 32
    assert [p.name for p in key_file.parent.iterdir()] == ["feedback.key"]
    assert all("DEBUG" in text for text in logs.values())  # every line was logged
    for name, text in logs.items():
        assert key not in text and key[:16] not in text, name
    events = [r.event for topic in ("tasks", "rollouts", "rewards", "planner-actions")
              for r in read_topic(kafka_ns, topic)]
    assert events and all(key not in repr(e) for e in events)
