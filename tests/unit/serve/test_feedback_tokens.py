"""Issue 38, "feedback is authorised", across a restart of `serve`: feedback tokens are stateless, signed with a key kept
in the home (serve/tokens.py). A token issued by one FeedbackTokens is accepted by another built on the same key
file (a restarted serve) for that rollout and client only; the Reward it gives is the one the first process would
have written; the key file is made once with mode 0600 and a key file others could read is refused."""

from __future__ import annotations

import dataclasses
import os
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest

from streamgrpo.avro import records as R
from streamgrpo.errors import ConfigError
from streamgrpo.redact import redact
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.serve.agent import served_request
from streamgrpo.serve.tokens import (
    MAX_TOKEN_BYTES,
    TOOLS_FOLDED,
    FeedbackTokens,
    TokenRefused,
    key_path,
    load_or_create_key,
)
from streamgrpo.topics.sdk import human_reward

EPOCH = datetime(2020, 1, 1, tzinfo=timezone.utc)


def _done(client: str = "alice", tools: dict[str, int] | None = None) -> R.RolloutCompleted:
    request, task = served_request(RolloutConfig(), "What is 2 plus 3?", client, 3)
    env = request.envelope
    return R.RolloutCompleted(
        envelope=R.Envelope.new("mcp", task_id=env.task_id, group_id=env.group_id, rollout_id=env.rollout_id),
        question=task.question, source=task.source, final_answer="5", turns=2, status=R.RolloutStatus.ANSWERED,
        group_size=1, adapter_name="planner", adapter_version=3, duration_ms=12,
        tool_calls={"calculator": 2} if tools is None else tools)


def test_the_key_is_made_once_with_mode_0600_and_read_back_after_a_restart(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path / "home")
    path = key_path(tmp_path / "home")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(key) == 32 and load_or_create_key(tmp_path / "home") == key  # the restarted serve's key
    assert [p.name for p in path.parent.iterdir()] == ["feedback.key"]  # no temporary file left
    assert load_or_create_key(tmp_path / "other") != key


def test_a_token_from_before_a_restart_is_accepted_and_gives_the_same_reward(tmp_path: Path) -> None:
    done = _done()
    before = FeedbackTokens(load_or_create_key(tmp_path), "run-a.")
    token = before.issue(done, "alice")
    after = FeedbackTokens(load_or_create_key(tmp_path), "run-a.")  # a new process, the same home
    seen = after.verify(str(done.envelope.rollout_id), "alice", token)
    assert _timeless(human_reward(seen, 0.5, "mcp:alice")) == _timeless(human_reward(done, 0.5, "mcp:alice"))
    assert seen.source == "mcp:alice" and seen.group_size == 1


def _timeless(reward: R.Reward) -> R.Reward:
    """The reward but for when and where its envelope was made (its event id is deterministic: one event)."""
    env = dataclasses.replace(reward.envelope, event_time=EPOCH, producer=R.Producer("x", "x"))
    return dataclasses.replace(reward, envelope=env)


def test_a_token_is_refused_for_another_client_rollout_key_scope_or_a_changed_payload(tmp_path: Path) -> None:
    done, other = _done(), _done()
    tokens = FeedbackTokens(load_or_create_key(tmp_path / "a"), "run-a.")
    token = tokens.issue(done, "alice")
    rid = str(done.envelope.rollout_id)
    with pytest.raises(TokenRefused) as wrong:
        tokens.verify(str(other.envelope.rollout_id), "alice", token)  # valid, but for another rollout
    assert wrong.value.wrong_rollout
    version, payload, mac = token.split(".")
    forged_payload = tokens.issue(dataclasses.replace(done, adapter_version=4), "alice").split(".")[1]
    for client, tok, scope, key_home in [
        ("mallory", token, "run-a.", "a"),  # another client with alice's token
        ("alice", "", "run-a.", "a"),  # no token
        ("alice", "x" * 24, "run-a.", "a"),  # a made-up token
        ("alice", f"{version}.{forged_payload}.{mac}", "run-a.", "a"),  # another version under the old mac
        ("alice", f"{version}.{payload}.{mac[:-2]}AA", "run-a.", "a"),  # a changed mac
        ("alice", f"v2.{payload}.{mac}", "run-a.", "a"),
        ("alice", token, "run-b.", "a"),  # another run's topics
        ("alice", token, "run-a.", "b"),  # another home's key
    ]:
        with pytest.raises(TokenRefused) as refused:
            FeedbackTokens(load_or_create_key(tmp_path / key_home), scope).verify(rid, client, tok)
        assert not refused.value.wrong_rollout, (client, tok, scope, key_home)


def test_the_key_is_never_in_a_token_and_is_redacted(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path)
    tokens = FeedbackTokens(key)
    token = tokens.issue(_done(), "alice")
    assert key.hex() not in token and key.hex()[:16] not in token
    assert key.hex() not in redact(f"leaked {key.hex()}")


def test_a_key_others_could_read_a_link_or_garbage_is_refused_naming_the_file(tmp_path: Path) -> None:
    load_or_create_key(tmp_path / "open")
    path = key_path(tmp_path / "open")
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match=r"feedback\.key.*readable or writable by others \(mode 0644\)"):
        load_or_create_key(tmp_path / "open")
    target = load_or_create_key(tmp_path / "target")
    linked = key_path(tmp_path / "linked")
    linked.parent.mkdir(parents=True)
    linked.symlink_to(key_path(tmp_path / "target"))
    with pytest.raises(ConfigError, match=r"cannot be read"):
        assert load_or_create_key(tmp_path / "linked") != target
    garbage = key_path(tmp_path / "garbage")
    garbage.parent.mkdir(parents=True)
    garbage.write_text("not a key\n")
    os.chmod(garbage, 0o600)
    with pytest.raises(ConfigError, match=r"does not hold 32 bytes"):
        load_or_create_key(tmp_path / "garbage")


def test_a_token_stays_within_its_bound_whatever_tools_the_answer_called(tmp_path: Path) -> None:
    many = {f"server_{i}.{'t' * 200}": 1 for i in range(64)}
    done = _done(tools=many)
    tokens = FeedbackTokens(load_or_create_key(tmp_path))
    token = tokens.issue(done, "alice")
    assert len(token) <= MAX_TOKEN_BYTES
    seen = tokens.verify(str(done.envelope.rollout_id), "alice", token)
    assert seen.tool_calls == {TOOLS_FOLDED: 64}
    few = _done(tools={"calculator": 2, "python": 1})
    assert tokens.verify(str(few.envelope.rollout_id), "alice", tokens.issue(few, "alice")).tool_calls == {
        "calculator": 2, "python": 1}
