"""Chaos: the whole loop (``streamgrpo run``, tiny planner, real broker) while a random service child
(streams, judge, rollout worker, trainer) is SIGKILLed or SIGTERMed (drawn per kill) every 6-10 s for 140 s
(a SIGTERMed child must exit within 15 s, wherever the back-pressured loop made it wait; none in the
first 30 s, none of a child up for less than 15 s; 400 tasks keep the loop busy throughout), and its broker killed
once half-way and brought back after a 10 s outage with its log and committed offsets, as a durable broker
restarts (tests/support/broker_restart.py), then 70 s without kills;
the topics are then audited (rules in tests/support/chaos.py): every task's group closed exactly once
(or still queued / in flight within the group timeout at the end), every training group has one sample per
rollout, the published lineages cover the samples without gap or overlap, every repeated sample was dropped
as a duplicate, nothing dead-lettered. ``python bench/chaos.py`` runs the longer campaign of RELIABILITY.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.chaos import run_chaos
from support.tiny_planner import build_tiny_planner

from streamgrpo.config import KafkaSettings
from streamgrpo.topics.admin import ensure
from streamgrpo.topics.broker import EmbeddedBroker

# In CI (`make test-e2e`, marker slow) and in `make reliability`. It was quarantined while a run lost 2 of 147
# groups (still unclosed when the drain ended): the streams worker kept its own 30 s session timeout, so a killed
# worker stayed a ghost group member for 30 s and Tansu held every join 15 s. Streams now follows [kafka].
pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-planner")
    build_tiny_planner(path)
    return path


def test_nothing_is_lost_while_services_and_the_broker_are_killed_or_stopped(tmp_path: Path, tiny_base: Path) -> None:
    with EmbeddedBroker(tmp_path / "broker") as broker:  # its own broker: the session's must not die
        kafka = KafkaSettings(bootstrap=broker.bootstrap, session_timeout_ms=3000, topic_prefix="chaos.")
        ensure(kafka)  # 140 s, not 120: no service is killed during the ~11 s the restart takes
        result = run_chaos(kafka, tiny_base, tmp_path / "run", chaos_s=140, drain_s=70, interval_s=(6.0, 10.0),
                           seed=1, group_timeout_s=60, min_uptime_s=15, signals=("KILL", "TERM"), term_grace_s=15.0,
                           broker=broker, broker_restarts=1, outage_s=10.0)
    audit = result["audit"]
    shown = json.dumps({k: v for k, v in result.items() if k != "output_tail"}, indent=1) + result["output_tail"]
    print(json.dumps({k: result[k] for k in ("kills", "kills_by_service", "kills_by_signal", "term_exit_s_max",
                                             "restarts", "broker_restarts")} | {"audit": audit}))
    assert result["broker_error"] is None, shown
    assert len(result["broker_restarts"]) == 1, shown
    assert result["broker_restarts"][0]["records"] > 0 and result["broker_restarts"][0]["committed_offsets"] > 0, shown
    assert result["returncode"] == 0, shown
    assert result["kills"] >= 6 and len(result["kills_by_service"]) >= 3, shown
    assert min(result["kills_by_signal"].get(s, 0) for s in ("KILL", "TERM")) >= 2, shown
    assert result["hung"] == [], shown  # every SIGTERMed service exited within term_grace_s
    assert sum(result["restarts"].values()) >= result["kills"] - 2, shown  # a kill in the last seconds may not be seen
    assert audit["lost"] == 0, shown
    assert audit["groups_closed"] >= 4 and audit["versions"] >= 1 and audit["samples_in_lineage"] >= 8, shown
    assert audit["dead_letters"] == {}, shown
