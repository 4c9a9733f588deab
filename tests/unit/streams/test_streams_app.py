"""create_app: configuration only (no broker needed: building a Faust app does not connect)."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest

from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.streams.app import broker_urls, create_app
from streamgrpo.streams.config import StreamsSettings
from streamgrpo.streams.errors import StreamsConfigError
from streamgrpo.streams.metrics import Prometheus


def settings(tmp_path: Path, **kw: object) -> StreamsSettings:
    return StreamsSettings(data_dir=tmp_path / "data", archive_dir=tmp_path / "archive", **kw)


def test_app_is_built_from_settings(tmp_path: Path) -> None:
    kafka = KafkaSettings(bootstrap="127.0.0.1:1,127.0.0.1:2", topic_prefix="run7.")
    app = create_app(settings(tmp_path, processing_guarantee="exactly_once"), kafka, ["window", "metrics"])
    conf = app.conf
    assert conf.id == "run7.streamgrpo-streams"
    assert [str(u) for u in conf.broker] == ["streamgrpo-kafka://127.0.0.1:1", "streamgrpo-kafka://127.0.0.1:2"]
    assert conf.processing_guarantee.value == "exactly_once" and not conf.web_enabled
    assert str(conf.store) == "memory:"
    ctx = app.streamgrpo  # type: ignore[attr-defined]
    names = {n for t in ctx.topics.values() for n in t.topics} | set(ctx.window.source.topics)
    assert {"run7.rewards", "run7.planner-actions", "run7.rollouts", "run7.training-samples"} <= names
    assert all(n.startswith("run7.") for n in names)
    assert {t.name for t in app.tables.values()} == {"window-groups", "window-actions"}
    assert {t.changelog_topic_name for t in app.tables.values()} == {
        "run7.streamgrpo-streams-window-groups-changelog", "run7.streamgrpo-streams-window-actions-changelog"}
    assert {a for a in app.agents} == {"streamgrpo.window", "streamgrpo.metrics"}


def test_default_guarantee_is_at_least_once(tmp_path: Path) -> None:
    app = create_app(settings(tmp_path), KafkaSettings(bootstrap="h:9092"), ["fanout"])
    assert app.conf.processing_guarantee.value == "at_least_once"


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StreamsConfigError, match="unknown agents"):
        create_app(settings(tmp_path), KafkaSettings(bootstrap="h:1"), ["window", "nope"])
    with pytest.raises(StreamsConfigError, match="bootstrap"):
        broker_urls(None)
    with pytest.raises(StreamsConfigError, match="estimator"):
        create_app(settings(tmp_path, estimator="ppo"), KafkaSettings(bootstrap="h:1"), ["window"])


def test_prometheus_exposes_reward_counters() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prom = Prometheus(port)
    assert prom.enabled
    reward = R.Reward(R.Envelope.new("judge"), 1.0, R.RewardStatus.OK, R.JudgeInfo("m", "h"), 4, "planner", 5, 2,
                      R.RolloutStatus.ANSWERED)
    prom.on_reward(reward)
    prom.on_reward(reward)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'streamgrpo_rewards_total{adapter_version="5",status="OK"} 2.0' in body
    assert Prometheus(None).enabled is False
