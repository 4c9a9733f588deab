"""``streamgrpo serve`` as a real subprocess, called with the ``mcp`` client: over stdio without a broker (the
base model answers, nothing recorded) and over streamable HTTP with the broker (Task, rollout events and the
human Reward of ``feedback`` decoded from the topics). The planner is the tiny in-process model saved to disk."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from support.mcp_servers import free_port, wait_http

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny-planner")
    build_tiny_model().save_pretrained(path)
    build_tiny_tokenizer().save_pretrained(path)
    return path


def _config(tmp: Path) -> Path:
    path = tmp / "serve.toml"
    path.write_text('[rollout]\nmax_new_tokens = 16\n\n[rollout.tools]\nenabled = ["calculator"]\n')
    return path


def _argv(model: Path, config: Path, *extra: str) -> list[str]:
    return ["-m", "streamgrpo.cli", "--config", str(config), "serve", "--model", str(model), "--max-turns", "1",
            *extra]


async def _session(target: Any, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    from mcp import Client, Implementation

    async with Client(target, client_info=Implementation(name="pytest-client", version="1")) as client:
        names = sorted(t.name for t in (await client.list_tools()).tools)
        assert names == ["adapters", "feedback", "solve"]
        out = []
        for name, args in calls:
            if name == "feedback" and "rollout_id" not in args:
                served = out[0].structured_content
                args = {**args, "rollout_id": served["rollout_id"], "feedback_token": served["feedback_token"]}
            out.append(await client.call_tool(name, args, read_timeout_seconds=120))
        return out


def test_serve_over_stdio_without_a_broker_answers_with_the_base_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    from mcp import StdioServerParameters

    env = {**os.environ, "STREAMGRPO_BOOTSTRAP": f"127.0.0.1:{free_port()}"}  # nothing listens there
    params = StdioServerParameters(command=sys.executable, args=_argv(tiny_model_dir, _config(tmp_path)), env=env)
    solved, versions, fed = asyncio.run(_session(params, [("solve", {"question": "What is 2 plus 3?"}),
                                                          ("adapters", {}), ("feedback", {"score": 1.0})]))
    reply = solved.structured_content
    assert not solved.is_error and reply["version"] == 0 and reply["adapter"] == "planner@v0"
    assert reply["recorded"] is False and "not recorded" in reply["note"]
    assert reply["status"] in {"ANSWERED", "MAX_TURNS", "ERROR"} and reply["trace"]
    assert "base model" in str(versions.structured_content)
    assert fed.is_error and "cannot be recorded" in fed.content[0].text


@pytest.mark.broker
def test_serve_over_http_records_the_task_the_rollout_and_the_feedback(kafka_ns: KafkaSettings, tiny_model_dir: Path,
                                                                       tmp_path: Path) -> None:
    import subprocess

    port = free_port()
    env = {**os.environ, "STREAMGRPO_KAFKA__TOPIC_PREFIX": kafka_ns.topic_prefix}
    argv = _argv(tiny_model_dir, _config(tmp_path), "--transport", "http", "--port", str(port),
                 "--bootstrap", kafka_ns.bootstrap)
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, *argv], env=env, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        wait_http(url, 120)
        solved, fed = asyncio.run(_session(url, [("solve", {"question": "What is 2 plus 3?"}),
                                                 ("feedback", {"score": 0.5, "comment": "half right"})]))
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    reply = solved.structured_content
    assert not solved.is_error, (tmp_path / "serve.log").read_text()[-3000:]
    assert reply["recorded"] is True and reply["version"] == 0 and "note" not in reply
    assert not fed.is_error and fed.structured_content["judge"] == "human:mcp:pytest-client"
    tasks = [r.event for r in read_topic(kafka_ns, "tasks") if isinstance(r.event, R.Task)]
    assert [(t.source, t.group_size, t.question) for t in tasks] == [("mcp:pytest-client", 1, "What is 2 plus 3?")]
    done = [r.event for r in read_topic(kafka_ns, "rollouts") if isinstance(r.event, R.RolloutCompleted)]
    assert [(d.envelope.rollout_id, d.envelope.task_id, d.source) for d in done] == [
        (reply["rollout_id"], tasks[0].envelope.task_id, "mcp:pytest-client")]
    actions = [r.event for r in read_topic(kafka_ns, "planner-actions") if isinstance(r.event, R.PlannerAction)]
    assert actions and all(a.envelope.rollout_id == reply["rollout_id"] and a.adapter_version == 0 for a in actions)
    rewards = [r.event for r in read_topic(kafka_ns, "rewards") if isinstance(r.event, R.Reward)]
    assert [(w.envelope.rollout_id, w.score, w.judge.name) for w in rewards] == [
        (reply["rollout_id"], 0.5, "human:mcp:pytest-client")]
