"""Chaos: the whole loop (``streamgrpo run``, tiny planner, real broker) while a random service child
(streams, judge, rollout worker, trainer) is SIGKILLed every 5-10 s for 2 minutes, then 90 s without kills;
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

pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-planner")
    build_tiny_planner(path)
    return path


def test_nothing_is_lost_while_services_are_killed(kafka_ns: KafkaSettings, tmp_path: Path, tiny_base: Path) -> None:
    result = run_chaos(kafka_ns, tiny_base, tmp_path, chaos_s=120, drain_s=90, interval_s=(5.0, 10.0), seed=1,
                       group_timeout_s=60)
    audit = result["audit"]
    shown = json.dumps({k: v for k, v in result.items() if k != "output_tail"}, indent=1) + result["output_tail"]
    assert result["returncode"] == 0, shown
    assert result["kills"] >= 8 and len(result["kills_by_service"]) >= 3, shown
    assert sum(result["restarts"].values()) >= result["kills"] - 2, shown  # a kill in the last seconds may not be seen
    assert audit["lost"] == 0, shown
    assert audit["groups_closed"] >= 4 and audit["versions"] >= 1 and audit["samples_in_lineage"] >= 8, shown
    assert audit["dead_letters"] == {}, shown
