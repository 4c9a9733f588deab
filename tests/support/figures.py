"""Each canned report's figures recomputed in plain Python from events read off the topics (or any list).

The tests compare ``streamgrpo analyse --report NAME`` with these: two independent computations of the
same definitions (see :mod:`streamgrpo.analysis.reports`), one SQL over the archive, one Python over
the log. ``Log`` maps a catalog topic to its events with their (partition, offset).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from streamgrpo.avro import records as R
from streamgrpo.lifecycle import published

Log = dict[str, list[tuple[R.Event, int, int]]]  # topic -> (event, partition, offset), first copy of each id


def first_copies(records: list[tuple[R.Event, int, int]]) -> list[tuple[R.Event, int, int]]:
    seen: set[str] = set()
    out = []
    for rec in records:
        if rec[0].event_id not in seen:
            seen.add(rec[0].event_id)
            out.append(rec)
    return out


def events(log: Log, topic: str) -> list[Any]:
    return [e for e, _, _ in log.get(topic, [])]


def judge_rewards(log: Log) -> dict[str, R.Reward]:
    """rollout -> its first non-human reward (by event time)."""
    out: dict[str, R.Reward] = {}
    for r in sorted(events(log, "rewards"), key=lambda r: r.envelope.event_time):
        if not r.judge.name.startswith("human:"):
            out.setdefault(r.envelope.rollout_id, r)
    return out


def outcome(reward: R.Reward | None, threshold: float) -> str:
    if reward is None:
        return "unscored"
    if reward.status == R.RewardStatus.ERROR:
        return "error"
    return "success" if reward.score >= threshold else "failure"


def outcomes(log: Log, adapter: str, threshold: float) -> dict[str, tuple[R.RolloutCompleted, str]]:
    rewards = judge_rewards(log)
    return {c.envelope.rollout_id: (c, outcome(rewards.get(c.envelope.rollout_id), threshold))
            for c in events(log, "rollouts") if c.adapter_name == adapter}


def reward_by_version(log: Log, adapter: str, threshold: float) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = defaultdict(lambda: {"rollouts": 0, "rewards": 0, "scores": [], "success": []})
    for c in events(log, "rollouts"):
        if c.adapter_name == adapter:
            out[c.adapter_version]["rollouts"] += 1
    for r in events(log, "rewards"):
        if r.adapter_name != adapter or r.judge.name.startswith("human:"):
            continue
        row = out[r.adapter_version]
        row["success"].append(1.0 if r.status == R.RewardStatus.OK and r.score >= threshold else 0.0)
        if r.status == R.RewardStatus.OK:
            row["rewards"] += 1
            row["scores"].append(r.score)
    for e in sorted(events(log, "evaluations"), key=lambda e: e.envelope.event_time):
        if e.adapter_name == adapter:
            out[e.adapter_version]["eval_accuracy"] = e.accuracy
    for p in events(log, "adapter-events"):
        if isinstance(p, R.AdapterPublished) and p.adapter_name == adapter:
            out[p.version]  # noqa: B018 - a published version has a row even before it served
    return {v: {"rollouts": d["rollouts"], "rewards": d["rewards"],
                "reward_mean": sum(d["scores"]) / len(d["scores"]) if d["scores"] else None,
                "success_rate": sum(d["success"]) / len(d["success"]) if d["success"] else None,
                "eval_accuracy": d.get("eval_accuracy")} for v, d in out.items()}


def tool_usage(log: Log, adapter: str, threshold: float) -> dict[tuple[str, str], tuple[int, int, int]]:
    outs = outcomes(log, adapter, threshold)
    calls: Counter[tuple[str, str]] = Counter()
    errors: Counter[tuple[str, str]] = Counter()
    rollouts: dict[tuple[str, str], set[str]] = defaultdict(set)
    for o in events(log, "tool-observations"):
        rid = o.envelope.rollout_id
        if rid in outs:
            key = (o.tool, outs[rid][1])
            calls[key] += 1
            errors[key] += o.error is not None
            rollouts[key].add(rid)
    return {k: (calls[k], len(rollouts[k]), errors[k]) for k in calls}


def turns(log: Log, adapter: str, threshold: float) -> dict[int, tuple[int, int, int]]:
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for c, o in outcomes(log, adapter, threshold).values():
        row = out[c.turns]
        row[0] += 1
        row[1] += o == "success"
        row[2] += c.status == R.RolloutStatus.MAX_TURNS
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def parse_failures(log: Log, adapter: str) -> dict[int, tuple[int, int, int]]:
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for a in events(log, "planner-actions"):
        if a.adapter_name == adapter:
            row = out[a.adapter_version]
            row[0] += 1
            row[1] += a.parse_status == R.ParseStatus.FAILED
            row[2] += a.parse_status == R.ParseStatus.REPAIRED
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def false_stops(log: Log, adapter: str, threshold: float) -> dict[int, tuple[int, int]]:
    stopped = {v.envelope.rollout_id for v in events(log, "verdicts") if v.decision == R.Decision.STOP}
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for rid, (c, o) in outcomes(log, adapter, threshold).items():
        row = out[c.adapter_version]
        row[0] += rid in stopped
        row[1] += rid in stopped and o == "failure"
    return {k: (v[0], v[1]) for k, v in out.items()}


def no_tool_answers(log: Log, adapter: str, threshold: float) -> dict[int, tuple[int, int]]:
    with_tools = {o.envelope.rollout_id for o in events(log, "tool-observations")}
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for rid, (c, _) in outcomes(log, adapter, threshold).items():
        if c.status == R.RolloutStatus.ANSWERED:
            out[c.adapter_version][0] += 1
            out[c.adapter_version][1] += rid not in with_tools
    return {k: (v[0], v[1]) for k, v in out.items()}


def lineage(log: Log, adapter: str) -> dict[int, dict[str, str | None]]:
    """version -> {sample id: drop reason (None = trained)} for the records inside its lineage."""
    letters = {(d.source_partition, d.source_offset): d.reason_code for d in events(log, "dead-letters")
               if d.source_topic == "training-samples" and d.consumer.startswith("trainer.")}
    samples = [(s, p, o) for s, p, o in log.get("training-samples", [])]
    out: dict[int, dict[str, str | None]] = {}
    for ev in events(log, "adapter-events"):
        if not (isinstance(ev, R.AdapterPublished) and ev.adapter_name == adapter):
            continue
        inside: dict[str, str | None] = {}
        for r in ev.lineage:
            for s, p, o in samples:
                if r.topic == "training-samples" and p == r.partition and r.start <= o <= r.end:
                    limit = published.max_staleness(ev)
                    stale = limit is not None and (ev.parent_version or 0) - s.behaviour_version > limit
                    inside[s.event_id] = ("other_adapter" if s.adapter_name != adapter else letters.get((p, o))
                                          or ("stale" if stale else None))
        out[ev.version] = inside
    return out


def staleness(log: Log, adapter: str) -> dict[int, tuple[int, int]]:
    published = {e.version: e for e in events(log, "adapter-events") if isinstance(e, R.AdapterPublished)}
    by_id = {s.event_id: s for s in events(log, "training-samples")}
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for version, inside in lineage(log, adapter).items():
        for sid, reason in inside.items():
            lag = (published[version].parent_version or 0) - by_id[sid].behaviour_version
            out[lag][0] += reason is None
            out[lag][1] += reason == "stale"
    return {k: (v[0], v[1]) for k, v in out.items()}


def group_wall_s(log: Log) -> dict[str, float]:
    """group -> seconds from its first request to its GroupClosed (or its last completion)."""
    first: dict[str, float] = {}
    for q in events(log, "rollout-requests"):
        t = q.envelope.event_time.timestamp()
        first[q.envelope.group_id] = min(first.get(q.envelope.group_id, t), t)
    closed = {g.envelope.group_id: g.envelope.event_time.timestamp() for g in events(log, "groups")}
    last: dict[str, float] = {}
    for c in events(log, "rollouts"):
        last[c.envelope.group_id] = max(last.get(c.envelope.group_id, 0.0), c.envelope.event_time.timestamp())
    ends = {g: closed.get(g, last.get(g)) for g in first}
    return {g: end - first[g] for g, end in ends.items() if end is not None}
