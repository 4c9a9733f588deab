"""The service's pure steps (no broker): admission, dedup, waiting for tasks, group buffering; and the CLI."""

from __future__ import annotations

import json

from click.testing import CliRunner

from streamgrpo.avro import records as R
from streamgrpo.cli import cli
from streamgrpo.config import KafkaSettings
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.service import JudgeService
from streamgrpo.topics.consumer import Received


def _rec(event: R.Event, offset: int = 0) -> Received:
    return Received(event, "rollouts", 0, offset, b"k", b"", 0)


def _rollout(rid: str, tid: str = "t1", gid: str = "g1", n: int = 2, source: str = "nq") -> R.RolloutCompleted:
    return R.RolloutCompleted(
        envelope=R.Envelope.new("test", task_id=tid, group_id=gid, rollout_id=rid), question="q", source=source,
        final_answer="Paris", turns=1, status=R.RolloutStatus.ANSWERED, group_size=n, adapter_name="p",
        adapter_version=1, duration_ms=1,
    )


def _task(tid: str = "t1", source: str = "nq") -> R.Task:
    return R.Task(envelope=R.Envelope.new("test", task_id=tid), question="q", source=source, group_size=2,
                  ground_truths=["Paris"])


def _service(**kw: object) -> JudgeService:
    return JudgeService(KafkaSettings(bootstrap="127.0.0.1:1"), JudgeSettings(**kw))  # type: ignore[arg-type]


def test_rollout_waits_for_its_task_then_is_ready() -> None:
    svc = _service(task_wait_s=5.0)
    svc.admit([_rec(_rollout("r1"))], now=100.0)
    assert svc.ready(now=101.0) == [] and svc.pending == 1
    svc.tasks.add(_task())
    ready = svc.ready(now=102.0)
    assert len(ready) == 1 and ready[0][1] is not None and ready[0][2].name == "qa" and svc.pending == 0


def test_unknown_task_is_released_after_the_wait() -> None:
    svc = _service(task_wait_s=5.0)
    svc.admit([_rec(_rollout("r1", tid="nope"))], now=100.0)
    assert svc.ready(now=104.9) == []
    (rec, task, scorer), = svc.ready(now=105.0)
    assert task is None and scorer.name == "qa"  # routed by the rollout's source


def test_duplicate_rollouts_are_admitted_once() -> None:
    svc = _service()
    r = _rollout("r1")
    svc.admit([_rec(r, 0), _rec(r, 1)], now=0.0)
    svc.admit([_rec(r, 2)], now=1.0)
    assert svc.stats.rollouts == 1 and svc.stats.duplicates == 2 and svc.pending == 1


def test_groupwise_judge_buffers_until_full_or_deadline() -> None:
    svc = _service(routes={"nq": "group_relative"}, group_wait_s=10.0)
    svc.tasks.add(_task())
    svc.admit([_rec(_rollout("a", gid="g1")), _rec(_rollout("x", gid="g2", n=3))], now=0.0)
    assert svc.ready(now=0.0) == [] and svc.full_groups(now=1.0) == []
    svc.admit([_rec(_rollout("b", gid="g1"))], now=2.0)
    svc.ready(now=2.0)
    full = svc.full_groups(now=2.0)
    assert [sorted(b.items) for b in full] == [["a", "b"]] and svc.pending == 1
    late = svc.full_groups(now=10.0)  # g2's deadline: scored with what arrived
    assert [sorted(b.items) for b in late] == [["x"]] and svc.pending == 0


def test_cli_score_command_prints_a_score() -> None:
    result = CliRunner().invoke(cli, ["judge", "score", "--judge", "math", "--answer", r"\boxed{\frac12}",
                                      "--truth", "0.5"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["score"] == 1.0 and out["judge_name"] == "math" and out["correct"] is True


def test_cli_rejects_bad_route_and_lists_settings() -> None:
    bad = CliRunner().invoke(cli, ["judge", "--route", "nq"])
    assert bad.exit_code != 0 and "SOURCE=JUDGE" in bad.output
    helptext = CliRunner().invoke(cli, ["judge", "--help"]).output
    assert "[judge.llm] api_key" in helptext and "judge.task_wait_s" in helptext
