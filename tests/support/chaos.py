"""Chaos campaign helpers: SIGKILL or SIGTERM random service children of a live ``streamgrpo run``, then audit
the topics.

:class:`ChaosMonkey` is a thread that, every few seconds (uniform in ``interval_s``), picks one live service
child of the ``streamgrpo run`` process (streams, judge, rollout, trainer; the broker only as below) at random and sends
its whole process group a signal drawn from ``signals``: SIGKILL as a pod or machine death would, SIGTERM as a
rolling update or a scale-in would -- the loop is back-pressured throughout (admission holds the fan-out), so a
SIGTERM lands wherever the service waits. A SIGTERMed child must exit within ``term_grace_s``; one that does
not is recorded as ``hung`` and SIGKILLed (the kubelet's terminationGracePeriod). ``streamgrpo run``'s supervisor
restarts the child either way. No kill in the first ``warmup_s`` seconds (the services load), and a child is
only chosen once it has been seen alive for ``min_uptime_s`` (a child killed again while it still loads its
model tests nothing new). With ``broker_restarts`` (and the campaign's own ``broker``), the monkey also kills the
broker that many times, evenly over the kill window, and brings it back as a durable broker would
(:func:`support.broker_restart.restart_durably`: the loop meets a dead broker for ``outage_s`` seconds, then
the same log and committed offsets on the same port).

:func:`audit` is the pure check of what the topics hold afterwards (records as :func:`read_topic` returns
them), with these rules:

- tasks -> groups: each Task's group (``ids.group_id(task_id, attempt)``), and each further group of a
  known task that the curriculum requested (its requests carry ``metadata["curriculum"]``), is closed by exactly one
  GroupClosed id (at-least-once: repeated copies of that same id are counted, not errors; two different
  closures of one group are). A task whose group was never requested is ``queued`` (admission held it);
  a group requested but not closed is ``in_flight`` if its first request is younger than
  ``group_timeout_s + grace_s`` at ``end_ms``, else it is LOST;
- groups -> samples: a group closed with ``trains`` must have ``samples`` distinct TrainingSample ids
  (one per rollout; repeated copies counted); fewer is LOST. A rollout a TIMED_OUT group missed is ``late``
  if its RolloutCompleted is on ``rollouts`` (its worker was down past ``group_timeout_s``: the group was scored
  without it, by design), else LOST (a killed worker's request is redelivered, so it must complete);
- samples -> adapters (lineage): on every partition of ``training-samples`` the published lineages cover
  disjoint ranges (an offset in two versions: trained twice) without gaps (an offset skipped: LOST); a
  sample past the last range is ``pending`` (not yet in a published adapter). Copies of one sample id
  consumed in the lineages are ``repeats``; each must be dropped as a duplicate by the trainer: the
  repeats of a version beyond its ``dropped_duplicate`` metric are reported as ``undeduplicated_repeats``
  (trained twice unless dropped for another reason, e.g. stale).

Not covered: several adapter names in one run, rollbacks (lineage then continues from the primary),
compacted or transactional topics.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.topics.received import Received

SERVICES = ("streams", "judge", "rollout", "trainer")
AUDITED_TOPICS = ("tasks", "rollout-requests", "rollouts", "groups", "training-samples", "adapter-events", "dead-letters")


@dataclass(frozen=True)
class Kill:
    at_s: float  # seconds since the monkey started
    service: str
    pid: int
    signal: str = "KILL"  # "KILL" or "TERM"
    exit_s: float | None = None  # TERM: seconds until the child had exited (None: it did not, see ``hung``)
    hung: bool = False  # TERM: still alive after ``term_grace_s``, then SIGKILLed


def exited(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie (exited, not yet reaped by its parent, ``streamgrpo run``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].startswith(("Z", "X"))


def service_children(run_pid: int, services: tuple[str, ...] = SERVICES) -> list[tuple[str, int]]:
    """(service, pid) of the live ``python -m streamgrpo.cli <service>`` children of ``run_pid`` (from /proc)."""
    out = []
    for pid in children(run_pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if "streamgrpo.cli" in args and args.index("streamgrpo.cli") + 1 < len(args):
            name = args[args.index("streamgrpo.cli") + 1]
            if name in services:
                out.append((name, pid))
    return out


def children(pid: int) -> list[int]:
    """The child pids of ``pid`` (from /proc; empty once it is gone)."""
    pids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return pids


class ChaosMonkey(threading.Thread):
    """Kills (or stops, ``signals``) a random service child of ``run_pid`` every ``interval_s`` seconds until
    ``duration_s`` seconds."""

    def __init__(self, run_pid: int, duration_s: float, interval_s: tuple[float, float] = (4.0, 8.0),
                 seed: int = 0, services: tuple[str, ...] = SERVICES, min_uptime_s: float = 20.0,
                 warmup_s: float = 30.0, signals: tuple[str, ...] = ("KILL",), term_grace_s: float = 15.0,
                 broker: Any = None, broker_restarts: int = 0, outage_s: float = 10.0) -> None:
        super().__init__(name="chaos-monkey", daemon=True)
        if broker_restarts and broker is None:
            raise ValueError("broker_restarts needs the broker (an EmbeddedBroker this campaign owns)")
        unknown = set(signals) - {"KILL", "TERM"}
        if not signals or unknown:
            raise ValueError(f"signals must be KILL and/or TERM, got {signals}")
        self.run_pid, self.duration_s, self.interval_s = run_pid, duration_s, interval_s
        self.services, self.min_uptime_s, self.warmup_s = services, min_uptime_s, warmup_s
        self.signals, self.term_grace_s = tuple(sorted(signals)), term_grace_s
        self.rng = random.Random(seed)
        self.kills: list[Kill] = []
        self.stop_event = threading.Event()
        self._first_seen: dict[int, float] = {}
        self.broker, self.outage_s = broker, outage_s
        # evenly spread over the kill window, after the warm-up
        span = max(duration_s - warmup_s, 0.0)
        self._restart_at = [warmup_s + span * (k + 1) / (broker_restarts + 1) for k in range(broker_restarts)]
        self.broker_restarts: list[dict[str, Any]] = []
        self.broker_error: str | None = None

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop_event.wait(self.rng.uniform(*self.interval_s)):
            now = time.monotonic()
            if now - started >= self.duration_s:
                return
            if now - started < self.warmup_s:
                continue
            if self._restart_at and now - started >= self._restart_at[0]:
                self._restart_at.pop(0)
                self._restart_broker(round(now - started, 1))
                continue
            ready = []
            for name, pid in service_children(self.run_pid, self.services):
                self._first_seen.setdefault(pid, now)
                if now - self._first_seen[pid] >= self.min_uptime_s:
                    ready.append((name, pid))
            if not ready:
                continue
            name, pid = self.rng.choice(sorted(ready))
            sig = self.rng.choice(self.signals)
            try:
                # the child leads its own session (start_new_session): its process group is the service
                os.killpg(pid, signal.SIGTERM if sig == "TERM" else signal.SIGKILL)
            except ProcessLookupError:
                continue
            at_s = round(now - started, 1)
            self.kills.append(self._stopped(at_s, name, pid) if sig == "TERM" else Kill(at_s, name, pid))

    def _restart_broker(self, at_s: float) -> None:
        from support.broker_restart import restart_durably

        try:
            self.broker_restarts.append({"at_s": at_s, **restart_durably(self.broker, self.run_pid, self.outage_s)})
        except Exception as exc:  # reported in the result; the campaign stops killing (its subject is gone)
            self.broker_error = f"{type(exc).__name__}: {exc}"
            self.stop_event.set()

    def _stopped(self, at_s: float, name: str, pid: int) -> Kill:
        """Wait up to ``term_grace_s`` for a SIGTERMed child to exit; SIGKILL it if it does not."""
        sent = time.monotonic()
        while time.monotonic() - sent < self.term_grace_s:
            if exited(pid):
                return Kill(at_s, name, pid, "TERM", round(time.monotonic() - sent, 2))
            time.sleep(0.05)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return Kill(at_s, name, pid, "TERM", None, hung=True)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)

    def summary(self) -> dict[str, int]:
        return dict(Counter(k.service for k in self.kills))

    def by_signal(self) -> dict[str, int]:
        return dict(Counter(k.signal for k in self.kills))

    def hung(self) -> list[Kill]:
        """SIGTERMed children that did not exit within ``term_grace_s``."""
        return [k for k in self.kills if k.hung]


@dataclass
class Audit:
    """What the topics hold after a chaos run (see the module docstring for the rules)."""

    tasks: int = 0
    groups_closed: int = 0
    closure_repeats: int = 0
    conflicting_closures: list[str] = field(default_factory=list)
    closed_without_task: list[str] = field(default_factory=list)
    queued: int = 0
    in_flight: int = 0
    lost_groups: list[str] = field(default_factory=list)
    timed_out_groups: int = 0
    late_rollouts: int = 0
    lost_rollouts: int = 0
    trained_groups: int = 0
    samples: int = 0
    sample_repeats: int = 0
    missing_samples: list[str] = field(default_factory=list)
    versions: int = 0
    samples_in_lineage: int = 0
    samples_pending: int = 0
    lineage_overlaps: list[str] = field(default_factory=list)
    lineage_gaps: list[str] = field(default_factory=list)
    repeats_consumed: int = 0
    undeduplicated_repeats: int = 0
    dropped: dict[str, float] = field(default_factory=dict)
    dead_letters: dict[str, int] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        """Everything the rules call lost or trained twice (target 0)."""
        return (len(self.lost_groups) + self.lost_rollouts + len(self.missing_samples) + len(self.lineage_gaps)
                + len(self.lineage_overlaps) + self.undeduplicated_repeats + len(self.conflicting_closures))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "lost": self.lost}


#: What the :class:`Forger` writes, and the dead letter each must become (issue 38's campaign).
FORGERIES = {"promote_unannounced": "adapter_lineage", "rollback_without_operator": "adapter_lineage",
             "publish_skipping_versions": "adapter_lineage", "human_reward_nan": "out_of_bounds",
             "human_reward_out_of_range": "out_of_bounds"}


class Forger(threading.Thread):
    """Writes one forged fact (:data:`FORGERIES`, drawn per write) into the live loop every ``interval_s`` seconds
    after ``warmup_s`` until ``duration_s``: lifecycle events no real writer would write (a promotion of a version
    never announced, a rollback by a writer without an operator identity, an announcement 64 versions past any real
    one) and human rewards that are NaN or out of [0, 1]. Each must be dead-lettered and change nothing else."""

    def __init__(self, kafka: Any, duration_s: float, interval_s: tuple[float, float] = (10.0, 20.0), seed: int = 0,
                 warmup_s: float = 30.0) -> None:
        super().__init__(name="forger", daemon=True)
        self.kafka, self.duration_s, self.interval_s, self.warmup_s = kafka, duration_s, interval_s, warmup_s
        self.rng = random.Random(seed + 7919)
        self.sent: Counter[str] = Counter()
        self.stop_event = threading.Event()
        self.error: str | None = None

    def forged(self, kind: str, n: int) -> R.Event:
        if kind == "promote_unannounced":
            return R.AdapterPromoted(R.Envelope.new("ab-controller"), "planner", 99_999 + n, 0, "forged")
        if kind == "rollback_without_operator":
            return R.AdapterRolledBack(R.Envelope.new("forger"), "planner", 1, 0, "forged")
        if kind == "publish_skipping_versions":
            return R.AdapterPublished(R.Envelope.new("trainer"), "planner", 100_064 + n, f"file:///forged/v{n}",
                                      "0" * 64, "forged", 1, [], parent_version=100_000 + n, drops={},
                                      samples_dequeued=8, max_staleness=1, auto_promote=True)
        group = ids.group_id(f"forged-task-{n}")
        return R.Reward(R.Envelope.new("label", task_id=f"forged-task-{n}", group_id=group,
                                       rollout_id=ids.rollout_id(group, 0)),
                        float("nan") if kind == "human_reward_nan" else 7.0, R.RewardStatus.OK,
                        R.JudgeInfo("human:mallory", "forged"), 4, "planner", 0, 1, R.RolloutStatus.ANSWERED)

    def run(self) -> None:
        from streamgrpo.topics.producer import EventProducer

        started = time.monotonic()
        try:
            with EventProducer(self.kafka, "forger") as producer:
                while not self.stop_event.wait(self.rng.uniform(*self.interval_s)):
                    elapsed = time.monotonic() - started
                    if elapsed >= self.duration_s:
                        return
                    if elapsed < self.warmup_s:
                        continue
                    kind = self.rng.choice(sorted(FORGERIES))
                    try:
                        producer.send(self.forged(kind, sum(self.sent.values())))
                        producer.flush(30)
                    except Exception:  # the broker is restarting: the forger tries again at its next turn
                        continue
                    self.sent[kind] += 1
        except Exception as exc:  # reported in the result
            self.error = f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=60)

    def expected_letters(self) -> dict[str, int]:
        """The dead letters the forgeries sent must have become, by reason."""
        out: Counter[str] = Counter()
        for kind, n in self.sent.items():
            out[FORGERIES[kind]] += n
        return dict(out)


def audit(records: dict[str, list[Received]], *, end_ms: int, group_timeout_s: float,
          grace_s: float = 30.0) -> Audit:
    """Check ``records`` (topic -> records, as read_topic returns them; see AUDITED_TOPICS) against the rules."""
    out = Audit()
    events = {t: [r for r in records.get(t, []) if r.event is not None] for t in AUDITED_TOPICS}
    closures = _closures(events["groups"], out)
    _tasks_to_groups(events["tasks"], events["rollout-requests"], closures, out,
                     end_ms - int(1000 * (group_timeout_s + grace_s)))
    completed = {str(r.event.envelope.rollout_id) for r in events["rollouts"] if r.event is not None}
    for gc in closures.values():
        if gc.status == R.GroupStatus.TIMED_OUT:
            out.timed_out_groups += 1
            late = sum(1 for rid in gc.missing_rollout_ids if rid in completed)
            out.late_rollouts += late
            out.lost_rollouts += len(gc.missing_rollout_ids) - late
    samples = _groups_to_samples(events["training-samples"], closures, out)
    letters = {e.event.event_id: e.event for e in events["dead-letters"] if isinstance(e.event, R.DeadLetter)}
    refused = {(d.source_partition, d.source_offset) for d in letters.values()
               if d.source_topic.endswith("adapter-events")}  # forged lifecycle events the folds refused
    _lineage([r for r in events["adapter-events"] if (r.partition, r.offset) not in refused], samples, out)
    out.dead_letters = dict(Counter(d.reason_code for d in letters.values()))  # one per record: ids are derived
    return out


def _closures(records: list[Received], out: Audit) -> dict[str, R.GroupClosed]:
    by_group: dict[str, dict[str, R.GroupClosed]] = defaultdict(dict)
    for r in records:
        ev = r.event
        assert isinstance(ev, R.GroupClosed)
        ids_ = by_group[str(ev.envelope.group_id)]
        if ev.event_id in ids_:
            out.closure_repeats += 1
        ids_[ev.event_id] = ev
    out.conflicting_closures = sorted(g for g, evs in by_group.items() if len(evs) > 1)
    out.groups_closed = len(by_group)
    return {g: next(iter(evs.values())) for g, evs in by_group.items()}


def _tasks_to_groups(tasks: list[Received], requests: list[Received], closures: dict[str, R.GroupClosed],
                     out: Audit, lost_before_ms: int) -> None:
    first_request: dict[str, int] = {}
    for r in requests:
        gid = str(r.event.envelope.group_id) if r.event is not None else ""
        first_request[gid] = min(first_request.get(gid, r.timestamp_ms), r.timestamp_ms)
    task_groups = set()
    for r in tasks:
        task = r.event
        assert isinstance(task, R.Task)
        task_groups.add(ids.group_id(str(task.envelope.task_id), ids.attempt_of(task.metadata)))  # as the fan-out does
    known = {str(r.event.envelope.task_id) for r in tasks if r.event is not None}
    for r in requests:  # the curriculum's further groups of a task (streams/curriculum.py)
        req = r.event
        if req is not None and "curriculum" in req.metadata and str(req.envelope.task_id) in known:
            task_groups.add(str(req.envelope.group_id))
    out.tasks = len(task_groups)
    for gid in sorted(task_groups):
        if gid in closures:
            continue
        if gid not in first_request:
            out.queued += 1
        elif first_request[gid] >= lost_before_ms:
            out.in_flight += 1
        else:
            out.lost_groups.append(gid)
    out.closed_without_task = sorted(set(closures) - task_groups)


def _groups_to_samples(records: list[Received], closures: dict[str, R.GroupClosed],
                       out: Audit) -> dict[tuple[int, int], str]:
    """Checks every training group's samples; returns (partition, offset) -> sample id."""
    per_group: dict[str, set[str]] = defaultdict(set)
    at: dict[tuple[int, int], str] = {}
    for r in records:
        ev = r.event
        assert isinstance(ev, R.TrainingSample)
        gid = str(ev.envelope.group_id)
        if ev.event_id in per_group[gid]:
            out.sample_repeats += 1
        per_group[gid].add(ev.event_id)
        at[(r.partition, r.offset)] = ev.event_id
    out.samples = sum(len(s) for s in per_group.values())
    for gid, gc in sorted(closures.items()):
        if gc.trains:
            out.trained_groups += 1
            if len(per_group.get(gid, ())) != (gc.samples if gc.samples is not None else gc.received):
                out.missing_samples.append(f"{gid}: {len(per_group.get(gid, ()))} of {gc.samples}")
    return at


def _lineage(records: list[Received], samples: dict[tuple[int, int], str], out: Audit) -> None:
    published: dict[int, R.AdapterPublished] = {}
    for r in records:
        if isinstance(r.event, R.AdapterPublished):
            published.setdefault(r.event.version, r.event)
    out.versions = len(published)
    covered: dict[tuple[int, int], int] = {}
    seen_ids: set[str] = set()
    for version in sorted(published):
        ev = published[version]
        repeats = 0
        for rng in sorted((x for x in ev.lineage if x.topic == "training-samples"), key=lambda x: (x.partition, x.start)):
            for off in range(rng.start, rng.end + 1):
                key = (rng.partition, off)
                if key in covered:
                    out.lineage_overlaps.append(f"p{rng.partition}@{off}: v{covered[key]} and v{version}")
                    continue
                covered[key] = version
                sid = samples.get(key)
                if sid is not None and sid in seen_ids:
                    repeats += 1
                elif sid is not None:
                    seen_ids.add(sid)
        out.repeats_consumed += repeats
        out.undeduplicated_repeats += max(0, repeats - int(ev.metrics.get("dropped_duplicate", 0)))
        for k, v in ev.metrics.items():
            if k.startswith("dropped_"):
                out.dropped[k.removeprefix("dropped_")] = out.dropped.get(k.removeprefix("dropped_"), 0.0) + v
    ends: dict[int, int] = {}
    for p, off in covered:
        ends[p] = max(ends.get(p, -1), off)
    for p, off in sorted(samples):
        if (p, off) in covered:
            out.samples_in_lineage += 1
        elif off > ends.get(p, -1):
            out.samples_pending += 1
        else:
            out.lineage_gaps.append(f"p{p}@{off}")


def run_chaos(kafka: Any, base_model: Path, work: Path, *, chaos_s: float, drain_s: float,
              interval_s: tuple[float, float] = (4.0, 8.0), seed: int = 0, group_timeout_s: float = 60.0,
              tasks: int = 400, group_size: int = 4, min_uptime_s: float = 20.0, warmup_s: float = 30.0,
              signals: tuple[str, ...] = ("KILL",), term_grace_s: float = 15.0, broker: Any = None,
              broker_restarts: int = 0, outage_s: float = 10.0, forge: bool = False,
              liveness_s: float | None = None) -> dict[str, Any]:
    """``streamgrpo run`` of ``base_model`` on ``kafka`` (an existing broker + topic prefix) under a ChaosMonkey for
    ``chaos_s`` s, then ``drain_s`` s without kills; returns the kills (with each SIGTERM's time to exit), the run's
    restarts and the audit."""
    import json
    import subprocess
    import sys

    from streamgrpo.topics.follow import read_topic
    from support.tiny_planner import QUESTIONS

    work.mkdir(parents=True, exist_ok=True)
    task_file = work / "tasks.jsonl"
    task_file.write_text("".join(json.dumps({"question": q, "answer": a, "source": "math"}) + "\n"
                                 for q, a in (QUESTIONS * (tasks // len(QUESTIONS) + 1))[:tasks]))
    cfg = work / "streamgrpo.toml"
    cfg.write_text(  # the model, short timeouts: every other loop setting keeps its default
        f'[kafka]\ntopic_prefix = "{kafka.topic_prefix}"\nsession_timeout_ms = 3000\n\n'
        f'[rollout]\nmodel = "{base_model}"\nmetrics_port = 0\n\n'
        f'[trainer]\nbase_model = "{base_model}"\nlora_rank = 4\nlora_alpha = 8\nmetrics_port = 0\n\n'
        f"[streams]\nmetrics_port = 0\ngroup_timeout_s = {group_timeout_s}\n\n[judge]\nmetrics_port = 0\n\n"
        "[evaluator]\nenabled = false\n" + (f"\n[loop]\nliveness_s = {liveness_s}\n" if liveness_s else ""))
    home = work / "home"
    env = dict(os.environ, STREAMGRPO_CONFIG=str(cfg))
    env.pop("STREAMGRPO_BOOTSTRAP", None)
    argv = [sys.executable, "-m", "streamgrpo.cli", "run", "--bootstrap", kafka.bootstrap or "", "--home", str(home),
            "--tasks", str(task_file), "--duration", str(chaos_s + drain_s), "--group-size", str(group_size),
            "--no-final-eval"]
    with open(work / "run.out", "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        monkey = ChaosMonkey(proc.pid, chaos_s, interval_s, seed, min_uptime_s=min_uptime_s, warmup_s=warmup_s,
                             signals=signals, term_grace_s=term_grace_s, broker=broker,
                             broker_restarts=broker_restarts, outage_s=outage_s)
        monkey.start()
        forger = Forger(kafka, chaos_s, seed=seed, warmup_s=warmup_s) if forge else None
        if forger is not None:
            forger.start()
        try:
            rc = proc.wait(timeout=chaos_s + drain_s + 300)
        finally:
            monkey.stop()
            if forger is not None:
                forger.stop()
            if proc.poll() is None:
                proc.kill()
    end_ms = int(time.time() * 1000)
    records = {t: read_topic(kafka, t) for t in AUDITED_TOPICS}
    result = audit(records, end_ms=end_ms, group_timeout_s=group_timeout_s)
    summaries = sorted(home.glob("runs/*/report/summary.json"))
    restarts = json.loads(summaries[-1].read_text()).get("restarts", {}) if summaries else {}
    term_exits = [k.exit_s for k in monkey.kills if k.exit_s is not None]
    return {"returncode": rc, "kills": len(monkey.kills), "kills_by_service": monkey.summary(),
            "kills_by_signal": monkey.by_signal(), "hung": [asdict(k) for k in monkey.hung()],
            "term_exit_s_max": max(term_exits, default=None), "term_grace_s": term_grace_s,
            "kill_log": [asdict(k) for k in monkey.kills], "restarts": restarts, "audit": result.as_dict(),
            "broker_restarts": monkey.broker_restarts, "broker_error": monkey.broker_error,
            "chaos_s": chaos_s, "drain_s": drain_s, "interval_s": list(interval_s), "seed": seed, "tasks": tasks,
            "min_uptime_s": min_uptime_s, "warmup_s": warmup_s,
            "forged": dict(forger.sent) if forger else {}, "forger_error": forger.error if forger else None,
            "expected_dead_letters": forger.expected_letters() if forger else {}, "liveness_s": liveness_s,
            "output_tail": (work / "run.out").read_text(errors="replace")[-3000:]}
