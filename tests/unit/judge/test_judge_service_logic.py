"""The judge's intake (pure: admission, dedup, waiting for tasks, group buffering), the service shell's
construction, and the CLI."""

from __future__ import annotations

import json

from click.testing import CliRunner

from streamgrpo.avro import records as R
from streamgrpo.cli import cli
from streamgrpo.config import KafkaSettings
from streamgrpo.judge.config import JudgeSettings
from streamgrpo.judge.intake import Intake, TaskTable
from streamgrpo.judge.service import JudgeService, Router
from streamgrpo.topics.received import Received


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


class Judge:
    """The intake with the service's task table and router, as the shell wires them."""

    def __init__(self, **kw: object) -> None:
        settings = JudgeSettings(**kw)  # type: ignore[arg-type]
        self.intake = Intake(settings.task_wait_s, settings.group_wait_s)
        self.tasks = TaskTable(10)
        self.router = Router(settings)

    def ready(self, now: float) -> list:
        return self.intake.ready(now, self.tasks.get, self.router.scorer_for)


def test_rollout_waits_for_its_task_then_is_ready() -> None:
    j = Judge(task_wait_s=5.0)
    j.intake.admit([_rec(_rollout("r1"))], now=100.0)
    assert j.ready(now=101.0) == [] and j.intake.pending == 1
    j.tasks.apply(_task())
    ready = j.ready(now=102.0)
    assert len(ready) == 1 and ready[0].task is not None and ready[0].scorer.name == "qa" and j.intake.pending == 0


def test_unknown_task_is_released_after_the_wait() -> None:
    j = Judge(task_wait_s=5.0)
    j.intake.admit([_rec(_rollout("r1", tid="nope"))], now=100.0)
    assert j.ready(now=104.9) == []
    (ready,) = j.ready(now=105.0)
    assert ready.task is None and ready.scorer.name == "qa"  # routed by the rollout's source


def test_duplicate_rollouts_are_admitted_once() -> None:
    j = Judge()
    r = _rollout("r1")
    assert j.intake.admit([_rec(r, 0), _rec(r, 1)], now=0.0) == (1, 1)
    assert j.intake.admit([_rec(r, 2), _rec(_task(), 3)], now=1.0) == (0, 1)  # not a rollout: ignored
    assert j.intake.pending == 1


def test_groupwise_judge_buffers_until_full_or_deadline() -> None:
    j = Judge(routes={"nq": "group_relative"}, group_wait_s=10.0)
    j.tasks.add(_task())
    j.intake.admit([_rec(_rollout("a", gid="g1")), _rec(_rollout("x", gid="g2", n=3))], now=0.0)
    assert j.ready(now=0.0) == [] and j.intake.full_groups(now=1.0) == []
    j.intake.admit([_rec(_rollout("b", gid="g1"))], now=2.0)
    j.ready(now=2.0)
    full = j.intake.full_groups(now=2.0)
    assert [sorted(b.items) for b in full] == [["a", "b"]] and j.intake.pending == 1
    late = j.intake.full_groups(now=10.0)  # g2's deadline: scored with what arrived
    assert [sorted(b.items) for b in late] == [["x"]] and j.intake.pending == 0


def test_the_task_table_is_a_bounded_fold() -> None:
    table = TaskTable(2)
    for tid in ("t1", "t2", "t3"):
        table.apply(_task(tid))
    table.apply(_rollout("r"))  # other events are ignored
    assert len(table) == 2 and table.get("t1") is None and table.get("t3") is not None


def test_constructing_the_service_starts_nothing() -> None:
    import threading

    before = threading.active_count()
    svc = JudgeService(KafkaSettings(bootstrap="127.0.0.1:1"), JudgeSettings())
    assert threading.active_count() == before
    svc.close()


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
