"""create_app: configuration only (no broker needed: building a Faust app does not connect)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from streamgrpo import metrics
from streamgrpo.avro import records as R
from streamgrpo.config import KafkaSettings
from streamgrpo.streams.ab_controller import Lifecycle, eval_gauges, policy_from
from streamgrpo.streams.app import broker_urls, create_app, loop_gauges
from streamgrpo.streams.config import StreamsSettings
from streamgrpo.streams.errors import StreamsConfigError
from streamgrpo.streams.follower import LoopView
from streamgrpo.streams.metrics import arm_of


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
    assert {a for a in app.agents} == {"streamgrpo.window"}  # the metrics ride on the window's channel
    assert ctx.on_reward is not None and ctx.reward_windows is not None


def test_no_topic_is_consumed_by_two_agents_of_one_worker(tmp_path: Path) -> None:
    """Every agent selection, the default (all) included: each topic feeds at most one Faust channel. Two agents on
    ``rewards`` (window and metrics) hung a rebalance after a broker restart in 2 chaos runs of 5: Faust handed
    both the same event, cleared the window's queued copy unacknowledged, and waited in ``wait_empty`` for a
    message the metrics agent's stream still held (streams/metrics.py)."""
    from itertools import combinations

    from streamgrpo.streams.app import AGENTS

    apps = {chosen: create_app(settings(tmp_path), KafkaSettings(bootstrap="h:9092"), list(chosen))
            for n in range(1, len(AGENTS) + 1) for chosen in combinations(AGENTS, n)}
    for chosen, app in apps.items():
        topics = [name for agent in app.agents.values() for name in agent.channel.topics]
        assert len(topics) == len(set(topics)), (chosen, sorted(topics))
    for chosen, app in apps.items():
        if "metrics" in chosen:  # the metrics still see every reward: their own agent, or the window's
            assert ("streamgrpo.metrics" in app.agents) != (app.streamgrpo.on_reward is not None), chosen


def test_the_session_timeout_is_kafkas_unless_streams_sets_its_own(tmp_path: Path) -> None:
    """One session timeout for every consumer: a streams worker that kept its own (30 s) while the others used
    [kafka]'s stayed a ghost group member 30 s after a SIGKILL, and every join on Tansu waited 15 s."""
    kafka = KafkaSettings(bootstrap="h:9092", session_timeout_ms=3000)
    conf = create_app(settings(tmp_path), kafka, ["fanout"]).conf
    assert conf.broker_session_timeout == 3.0 and conf.broker_heartbeat_interval == 1.0
    conf = create_app(settings(tmp_path, session_timeout_s=20), kafka, ["fanout"]).conf
    assert conf.broker_session_timeout == 20.0 and conf.broker_heartbeat_interval == 3.0


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


def test_loop_gauges_and_arms_come_from_the_workers_view(tmp_path: Path) -> None:
    """Groups in flight and versions per role are read from the follower's view; a reward's arm is the A/B
    role of the version that served it (canary_share > 0: the newest version above the primary is the canary)."""
    from fixtures.sample_events import sample_events

    app = create_app(settings(tmp_path, canary_share=0.5), KafkaSettings(bootstrap="h:9092"), ["metrics"])
    ctx = app.streamgrpo  # type: ignore[attr-defined]
    view = LoopView(canary_share=0.5)
    ctx.follower = SimpleNamespace(view=view)
    published = next(e for e in sample_events() if isinstance(e, R.AdapterPublished))
    for v in (1, 2):
        view.apply(dataclasses.replace(published, envelope=R.Envelope.new("trainer"), adapter_name="planner",
                                       version=v, parent_version=v - 1 or None,
                                       auto_promote=False))  # a trainer with the same canary_share > 0
    view.note_requested("g1", 4)
    view.note_requested("g2", 4)
    m = metrics.start("streams", 0)
    try:
        loop_gauges(ctx)
        assert m.value("streamgrpo_groups_open") == 2
        assert m.value("streamgrpo_adapter_version", role="published") == 2
        assert m.value("streamgrpo_adapter_version", role="canary") == 2
        assert (arm_of(ctx, 2), arm_of(ctx, 0)) == ("canary", "primary")
    finally:
        metrics.stop()


def test_eval_gauges_show_the_newest_evaluated_version_and_the_primary() -> None:
    from fixtures.sample_events import sample_events

    life = Lifecycle("planner", 0.0, policy_from(StreamsSettings()), 0.5)
    published = next(e for e in sample_events() if isinstance(e, R.AdapterPublished))
    evaluation = next(e for e in sample_events() if isinstance(e, R.EvaluationCompleted))
    for v in (1, 2):
        life.apply(dataclasses.replace(published, envelope=R.Envelope.new("trainer"), adapter_name="planner",
                                       version=v, parent_version=v - 1 or None))
    m = metrics.start("streams", 0)
    try:
        eval_gauges(life)  # nothing evaluated yet: no accuracy series
        assert m.value("streamgrpo_eval_accuracy_ratio", role="evaluated", bound="point") is None
        for v, acc in ((1, 0.25), (2, 0.5)):
            life.apply(dataclasses.replace(evaluation, envelope=R.Envelope.new("evaluator"), adapter_name="planner",
                                           adapter_version=v, accuracy=acc, ci_low=acc - 0.1, ci_high=acc + 0.1))
        eval_gauges(life)
        assert m.value("streamgrpo_adapter_version", role="evaluated") == 2
        assert m.value("streamgrpo_eval_accuracy_ratio", role="evaluated", bound="point") == 0.5
        assert m.value("streamgrpo_eval_accuracy_ratio", role="evaluated", bound="ci_low") == 0.4
        primary = life.line.primary
        assert m.value("streamgrpo_eval_accuracy_ratio", role="primary", bound="point") == {1: 0.25, 2: 0.5}[primary]
    finally:
        metrics.stop()
