"""A small but complete synthetic history of a run, as the services would have logged it (for analysis tests).

Two groups: G1 (v0, 4 rollouts: tools, a parse failure and a repair, a tool error, a verifier false stop, a
MAX_TURNS rollout, samples that trained v1, one of them dead-lettered by the trainer) and G2 (v1, 2
rollouts, one ERROR reward, never trains); v1's AdapterPublished with its lineage; held-out evaluations of
v0 and v1; v1's registry state and a reward-metrics window (so every topic has events); and a re-scoring of G1 by another judge in a namespace. :func:`place` assigns partitions by key
and offsets in order, like a log would.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from streamgrpo.archive.schema import Place
from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.topics.catalog import topic_for

T0 = datetime(2026, 4, 1, 10, 0, 0, tzinfo=timezone.utc)
SP = R.SamplingParams()


@dataclass
class SyntheticLog:
    """Assigns each event its topic, partition (crc32 of its key) and next offset, in order of :meth:`put`."""

    records: list[tuple[R.Event, Place]] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))

    def put(self, event: R.Event) -> None:
        spec = topic_for(event)
        key = spec.key_of(event).encode()
        partition = zlib.crc32(key) % spec.partitions
        offset = self.offsets[(spec.name, partition)]
        self.offsets[(spec.name, partition)] += 1
        ts = int(event.envelope.event_time.timestamp() * 1000)
        self.records.append((event, Place(spec.name, partition, offset, key, ts)))

    def place_of(self, event_id: str) -> Place:
        return next(p for e, p in self.records if e.event_id == event_id)


def env(kind: str, seconds: float, **place: object) -> R.Envelope:
    return R.Envelope(event_id=ids.derived_id("history", kind, *place.values()), event_time=T0 + timedelta(seconds=seconds),
                      producer=R.Producer("tests", "h:1"), **place)  # type: ignore[arg-type]


# (answer, turns, status, tools per turn, parse status per turn, final decision STOP?) per rollout
G1 = [("4", 1, "ANSWERED", ["calculator"], ["STRICT"]),
      ("5", 2, "ANSWERED", ["calculator", "calculator"], ["REPAIRED", "STRICT"]),  # wrong, stopped: false stop
      ("4", 1, "ANSWERED", [None], ["STRICT"]),  # no tool call
      ("4", 3, "MAX_TURNS", ["search", "search", None], ["STRICT", "FAILED", "STRICT"])]
G2 = [("9", 1, "ANSWERED", [None], ["STRICT"]), ("x", 1, "ERROR", [None], ["STRICT"])]


def _group(log: SyntheticLog, task_id: str, question: str, truth: str, spec: list[tuple], version: int,
           start: float, scores: list[float | None]) -> tuple[str, list[str]]:
    gid = ids.group_id(task_id)
    log.put(R.Task(env("task", start, task_id=task_id), question, "math", len(spec), [truth]))
    rids = [ids.rollout_id(gid, i) for i in range(len(spec))]
    for i, rid in enumerate(rids):
        place = dict(task_id=task_id, group_id=gid, rollout_id=rid)
        log.put(R.RolloutRequest(env("req", start + 1, **place), question, "math", i, len(spec), "planner", version,
                                 4, SP))
    for i, (answer, turns, status, tools, parses) in enumerate(spec):
        rid, t = rids[i], start + 2 + i
        place = dict(task_id=task_id, group_id=gid, rollout_id=rid)
        for turn in range(1, turns + 1):
            tool = tools[turn - 1]
            log.put(R.PlannerAction(env("act", t + turn, turn=turn, **place), [1, 2, turn], f"step {turn}",
                                    [10 + turn, 11], [-0.5, -0.25], "planner", version, SP,
                                    R.ParseStatus(parses[turn - 1]), "h", 5, tool=tool))
            if tool is not None:
                log.put(R.ToolObservation(env("obs", t + turn, turn=turn, **place), tool, "2+2", "4", 3, "direct",
                                          error="boom" if (i, turn) == (1, 2) else None))
            last = turn == turns and status == "ANSWERED"
            log.put(R.Verdict(env("ver", t + turn, turn=turn, **place),
                              R.Decision.STOP if last else R.Decision.CONTINUE, "ok", "rule"))
        calls = {k: sum(1 for x in tools if x == k) for k in {x for x in tools if x}}
        log.put(R.RolloutCompleted(env("done", t + 4, **place), question, "math", answer, turns,
                                   R.RolloutStatus(status), len(spec), "planner", version, 100 * (i + 1),
                                   tool_calls=calls))
        score = scores[i]
        log.put(R.Reward(env("reward", t + 5, **place), score or 0.0,
                         R.RewardStatus.ERROR if score is None else R.RewardStatus.OK, R.JudgeInfo("math", "m1"),
                         len(spec), "planner", version, turns, R.RolloutStatus(status)))
    return gid, rids


def build() -> tuple[SyntheticLog, list[tuple[R.Event, Place]]]:
    """The history (main namespace) and the re-scored rewards of G1 (namespace ``replay.rj.``)."""
    log = SyntheticLog()
    g1, r1 = _group(log, "t1", "What is 2+2?", "4", G1, 0, 0.0, [1.0, 0.0, 1.0, 1.0])
    log.put(R.GroupClosed(env("closed", 20, task_id="t1", group_id=g1), R.GroupStatus.COMPLETE, 4, 4, 0.75, 0.43,
                          "grpo", True, "complete", 0, samples=4))
    for i, rid in enumerate(r1):
        log.put(R.TrainingSample(env("sample", 21, task_id="t1", group_id=g1, rollout_id=rid),
                                 [R.SampleTurn(1, [1, 2], [10], [-0.5])], [0.58, -1.73, 0.58, 0.58][i], [1.0, 0.0, 1.0,
                                 1.0][i], 0.75, 0.43, 4, "grpo", "planner", 0))
    samples = [p for e, p in log.records if isinstance(e, R.TrainingSample)]
    partition = samples[0].partition
    lineage = [R.OffsetRange("training-samples", partition, samples[0].offset, samples[-1].offset)]
    log.put(R.AdapterPublished(env("pub", 30), "planner", 1, "file:///a/planner/v1", "a" * 64, "base", 1, lineage,
                               metrics={"max_staleness": 1.0, "rollouts": 3.0}))
    bad = samples[2]  # the trainer dead-lettered the third sample (malformed)
    log.put(R.DeadLetter(env("dl", 29), "training-samples", bad.partition, bad.offset, "trainer_malformed", "x",
                         "trainer.planner.run1"))
    log.put(R.EvaluationCompleted(env("eval0", 25), "planner", 0, "heldout", "h", 10, 1, 0.0, 0.2, 0.05, 0.5, 1.0,
                                  0.1, 1.0, 2.0, 30.0, 3.0, R.JudgeInfo("math", "m1")))
    log.put(R.AdapterState(env("state", 31), "planner", 1, R.AdapterStatus.PRIMARY, T0 + timedelta(seconds=31),
                           lineage=lineage, reward_mean=0.75))
    log.put(R.RewardMetrics(env("metrics", 35), "planner", 0, T0, T0 + timedelta(seconds=30), 4, 0.75, 0.75, 1.75,
                            {"calculator": 3, "search": 2}))
    _group(log, "t2", "What is 4+5?", "9", G2, 1, 40.0, [1.0, None])
    log.put(R.EvaluationCompleted(env("eval1", 60), "planner", 1, "heldout", "h", 10, 1, 0.0, 0.4, 0.15, 0.7, 1.0,
                                  0.0, 1.0, 2.0, 30.0, 3.0, R.JudgeInfo("math", "m1")))
    ns = SyntheticLog()
    for e, _ in log.records:
        if isinstance(e, R.Reward) and e.envelope.group_id == g1:
            ns.put(replace(e, envelope=replace(e.envelope, event_id=ids.rejudged_reward_id(
                e.envelope.rollout_id or "", "qa", "q1")), judge=R.JudgeInfo("qa", "q1"),
                score=[1.0, 0.0, 0.0, 1.0][r1.index(e.envelope.rollout_id or "")]))
    return log, ns.records
