"""Issue 38, findings 7 and 10: `streamgrpo serve`'s MCP server (the real MCPServer of serve/server.py, called with
the `mcp` SDK's Client, in-process) over the real agent (the tiny planner saved to disk, loaded the way `serve`
loads a model) and, where events are involved, the real broker.

- feedback is authorised: only the client a rollout was served to, with the answer's feedback_token, and never on a
  training rollout; scores outside [0, 1] are refused;
- a question over the byte bound is an error within a second and the server keeps answering;
- a question under the bound but over the prompt budget is cut: every planner prompt fits max_prompt_tokens;
- calls pinned to a version that never comes are refused after version_wait_s and hold no thread: a normal call
  answers meanwhile.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from support.streams import synthetic_group

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.follow import read_topic
from streamgrpo.topics.producer import EventProducer

QUESTION = "What is 2 plus 3?"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from support.tiny_policy import build_tiny_model, build_tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny-planner")
    build_tiny_model().save_pretrained(path)
    build_tiny_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def loaded(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    """(cfg, policy, ctx) as `streamgrpo serve --model DIR --max-turns 1` builds them."""
    from streamgrpo.config import load
    from streamgrpo.rollout.config import RolloutConfig
    from streamgrpo.rollout.runtime import build_context, build_policy

    config = tmp_path_factory.mktemp("serve-config") / "serve.toml"
    config.write_text('[rollout]\nmax_new_tokens = 16\n\n[rollout.tools]\nenabled = ["calculator"]\n')
    cfg = load(RolloutConfig, "rollout", path=config,
               overrides={"model": str(tiny_model_dir), "max_turns": 1, "policy": "local", "service": "mcp"})
    policy = build_policy(cfg)
    return cfg, policy, build_context(cfg, policy)


def _server(loaded: tuple[Any, Any, Any], **kw: Any) -> Any:
    from streamgrpo.serve.agent import ServeAgent
    from streamgrpo.serve.server import build_server

    cfg, _, ctx = loaded
    return build_server(ServeAgent(cfg, ctx, **kw))


async def _call(server: Any, client: str, name: str, args: dict[str, Any], timeout_s: float = 60) -> Any:
    from mcp import Client, Implementation

    async with Client(server, client_info=Implementation(name=client, version="1")) as c:
        return await c.call_tool(name, args, read_timeout_seconds=timeout_s)


@pytest.fixture
def recording(kafka_ns: KafkaSettings) -> Iterator[dict[str, Any]]:
    with EventProducer(kafka_ns, "mcp") as producer:
        yield {"producer": producer, "kafka": kafka_ns}


def _rewards(kafka: KafkaSettings) -> list[R.Reward]:
    return [r.event for r in read_topic(kafka, "rewards") if isinstance(r.event, R.Reward)]


@pytest.mark.broker
def test_feedback_only_from_the_client_served_with_its_token_and_never_on_training_rollouts(
        loaded: tuple[Any, Any, Any], recording: dict[str, Any]) -> None:
    kafka = recording["kafka"]
    training = synthetic_group("training", [0.0, 1.0])
    with EventProducer(kafka, "test") as prod:
        for done in training.completions:
            prod.send(done)
    server = _server(loaded, **recording)

    async def scenario() -> dict[str, Any]:
        solved = await _call(server, "alice", "solve", {"question": QUESTION})
        assert not solved.is_error, solved.content
        rid, token = solved.structured_content["rollout_id"], solved.structured_content.get("feedback_token", "")
        out = {"rid": rid}
        for key, client, args in [
            ("mallory", "mallory", {"rollout_id": rid, "score": 1.0}),
            ("mallory_token", "mallory", {"rollout_id": rid, "score": 1.0, "feedback_token": token}),
            ("alice_no_token", "alice", {"rollout_id": rid, "score": 1.0}),
            ("alice_wrong_token", "alice", {"rollout_id": rid, "score": 1.0, "feedback_token": "x" * 24}),
            ("training", "alice", {"rollout_id": training.rollout_ids[0], "score": 1.0, "feedback_token": token}),
            ("negative", "alice", {"rollout_id": rid, "score": -5.0, "feedback_token": token}),
            ("too_big", "alice", {"rollout_id": rid, "score": 1e308, "feedback_token": token}),
            ("alice", "alice", {"rollout_id": rid, "score": 0.5, "feedback_token": token}),
        ]:
            out[key] = await _call(server, client, "feedback", args)
        return out

    got = anyio.run(scenario)
    for key in ("mallory", "mallory_token", "alice_no_token", "alice_wrong_token"):
        assert got[key].is_error and "feedback_token" in got[key].content[0].text, key
    assert got["training"].is_error and "not answered by this server" in got["training"].content[0].text
    for key in ("negative", "too_big"):
        assert got[key].is_error and "from 0 (wrong) to 1 (right)" in got[key].content[0].text, key
    assert not got["alice"].is_error and got["alice"].structured_content["judge"] == "human:mcp:alice"
    assert [(w.envelope.rollout_id, w.score, w.judge.name) for w in _rewards(kafka)] == [
        (got["rid"], 0.5, "human:mcp:alice")]


def test_a_question_over_the_bound_is_an_error_at_once_and_the_server_keeps_answering(
        loaded: tuple[Any, Any, Any]) -> None:
    server = _server(loaded)

    async def scenario() -> tuple[Any, float, Any]:
        t0 = time.monotonic()
        big = await _call(server, "alice", "solve", {"question": "What is 2 plus 3? " * 11_000}, timeout_s=10)
        took = time.monotonic() - t0
        return big, took, await _call(server, "alice", "solve", {"question": QUESTION})

    big, took, normal = anyio.run(scenario)
    assert big.is_error and "at most 8,192" in big.content[0].text and "shorten" in big.content[0].text
    assert took < 1.0
    assert not normal.is_error and normal.structured_content["answer"] is not None


@pytest.mark.broker
def test_a_question_over_the_prompt_budget_is_cut_to_max_prompt_tokens(
        loaded: tuple[Any, Any, Any], recording: dict[str, Any]) -> None:
    cfg, _, ctx = loaded
    question = "Numbers: " + " ".join(str(i) for i in range(1500)) + ". What is 2 plus 3?"
    assert len(question.encode()) < 8192 and len(question) > 2 * ctx.max_prompt_tokens  # a char-level tokenizer
    reply = anyio.run(lambda: _call(_server(loaded, **recording), "alice", "solve", {"question": question}))
    assert not reply.is_error, reply.content
    kafka = recording["kafka"]
    actions = [r.event for r in read_topic(kafka, "planner-actions") if isinstance(r.event, R.PlannerAction)]
    assert actions and all(len(a.prompt_token_ids) <= ctx.max_prompt_tokens for a in actions)
    assert "was cut" in reply.structured_content["question_cut"]
    [task] = [r.event for r in read_topic(kafka, "tasks") if isinstance(r.event, R.Task)]
    assert task.question.startswith("Numbers: 0 1 2") and task.question.endswith("What is 2 plus 3?")
    assert "[...]" in task.question and len(task.question) < len(question)


def test_calls_pinned_to_a_version_that_never_comes_time_out_and_hold_no_thread(
        loaded: tuple[Any, Any, Any], tmp_path: Path) -> None:
    from streamgrpo.rollout.adapters import AdapterFollower

    cfg, policy, _ = loaded
    follower = AdapterFollower(policy, adapter_name=cfg.adapter_name, store_root=tmp_path)  # no v99 ever
    server = _server(loaded, follower=follower)
    done: dict[str, float] = {}

    async def one(key: str, args: dict[str, Any], t0: float, out: dict[str, Any]) -> None:
        out[key] = await _call(server, key, "solve", args, timeout_s=30)
        done[key] = time.monotonic() - t0

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        t0 = time.monotonic()
        async with anyio.create_task_group() as tg:
            for i in range(42):
                tg.start_soon(one, f"pinned{i}", {"question": QUESTION, "version": "planner@v99"}, t0, out)
            await anyio.sleep(0.5)
            tg.start_soon(one, "normal", {"question": QUESTION}, t0, out)
        return out

    out = anyio.run(scenario)
    assert not out["normal"].is_error, out["normal"].content
    assert done["normal"] < 5.0  # answered while the 42 pinned calls wait (default version_wait_s: 5 s)
    pinned = [out[f"pinned{i}"] for i in range(42)]
    assert all(p.is_error and "not published within 5 s" in p.content[0].text for p in pinned)
    assert max(done[f"pinned{i}"] for i in range(42)) < 10.0


def test_scores_beyond_the_range_are_label_errors_in_the_sdk() -> None:
    from streamgrpo.topics.sdk import LabelError, human_reward

    done = synthetic_group("sdk", [1.0]).completions[0]
    for score in (math.nan, math.inf, -math.inf, -5.0, 1.5, 1e308, "0.5", True):
        with pytest.raises(LabelError, match="score"):
            human_reward(done, score, "ada")  # type: ignore[arg-type]
    assert human_reward(done, 0.75, "ada").score == 0.75
