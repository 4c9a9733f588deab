"""A/B controller and registry publisher: which version serves a group, the test's verdicts, ``adapter-registry``.

Pure parts: :func:`choose_version` (the fan-out's choice for a whole group: the canary with
probability ``canary_share``, by a deterministic hash of the group id so a replay picks the same
arm, else the primary; a group is never split), :func:`comparison_only` (the advantage window's
question at a group's close: is it the control arm, served for the comparison but too far behind the
line to train? -- :func:`~streamgrpo.lifecycle.pacing.control_arm_trains` is the rule) and
:func:`ab_input` (what the decision core, :mod:`streamgrpo.lifecycle.ab`, looks at, gathered from
the two folds). The test counts a control group by its rewards whether or not it trains.

:class:`Lifecycle` is the agent's state: the one registry fold (:mod:`streamgrpo.lifecycle.registry`)
and the live statistics (:mod:`streamgrpo.lifecycle.stats`), fed by a group-less
:class:`~streamgrpo.topics.follow.LogFollower` over ``adapter-events``, ``rewards``,
``planner-actions``, ``groups`` and ``evaluations``. :meth:`Lifecycle.next_events` says what to
write now: the explicit rollback of a version born from a rolled-back parent, then the rollback of a version
whose files do not verify in the adapter store (:mod:`streamgrpo.lifecycle.file_check`: the leader checks the
primary and every version above it once, off the event loop; ``[streams] adapter_check``), then the verdict of
the running test (AdapterPromoted / AdapterRolledBack / AdapterVerdict, with the statistics and
deterministic ids: two controllers deciding the same thing write the same id). After writing, the
controller waits until its own follower has folded the event before it decides again.

Thin agent (``register(ctx)``, agent ``ab``): a timer decides every ``tick_interval_s`` once the
follower caught up, and every ``registry_interval_s`` publishes the ``AdapterState`` of each version
whose content changed (the base model included) on the compacted ``adapter-registry`` topic, so tools
read the current state without replaying. One leader: every worker running ``ab`` also consumes
``adapter-events`` (one partition) in the app's consumer group, and only the worker that holds that
partition decides and publishes; during a rebalance the lease may move (identical decisions of two
workers carry the same deterministic id and are folded once). Its events are written as
:data:`~streamgrpo.lifecycle.writers.AB_CONTROLLER`, the producer the fold lets act without an operator identity; the
controller's fold refuses what every fold refuses (forged announcements, actions on versions never announced or by
writers that may not act), logged and counted (``Lifecycle.registry.refused``); the streams follower dead-letters
those records.
What is not covered: more than one adapter name per controller (``[loop] adapter_name``); the
start-up replay reads those topics from the beginning (planner-actions included), O(history).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from faust.types import TP

from streamgrpo import metrics
from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.lifecycle import pacing
from streamgrpo.lifecycle.ab import ABInput, ABPolicy, Guardrails, Verdict, decide
from streamgrpo.lifecycle.actions import rollback_target
from streamgrpo.lifecycle.adapter_state import adapter_states, content_key
from streamgrpo.lifecycle.file_check import FileCheck
from streamgrpo.lifecycle.registry import AdapterRegistry, Line, ancestors
from streamgrpo.lifecycle.stats import Stats
from streamgrpo.lifecycle.writers import AB_CONTROLLER
from streamgrpo.models.errors import AdapterActionError
from streamgrpo.streams import faust_transport
from streamgrpo.streams.app import FaustStream, StreamsContext
from streamgrpo.streams.config import StreamsSettings
from streamgrpo.topics import catalog

log = logging.getLogger(__name__)
TOPICS = (catalog.ADAPTER_EVENTS, catalog.REWARDS, catalog.PLANNER_ACTIONS, catalog.GROUPS, catalog.EVALUATIONS)
SERVICE = AB_CONTROLLER  # the producer the registry fold trusts to act on its own (lifecycle.writers)


def choose_version(line: Line, group_id: str, canary_share: float) -> int:
    """The adapter version of a whole group."""
    if line.canary is None or canary_share <= 0:
        return line.primary
    bucket = int.from_bytes(hashlib.sha256(group_id.encode()).digest()[:8], "big") / 2**64
    return line.canary if bucket < canary_share else line.primary


def comparison_only(line: Line, version: int, max_staleness: int) -> bool:
    """Whether a group served by ``version`` is the running test's control arm for the comparison only: the primary
    while a line above it is under test, too far below the line's newest version for its samples to train
    (:func:`~streamgrpo.lifecycle.pacing.control_arm_trains`; behind counted along the newest's parent chain)."""
    if version != line.primary or not line.candidates:
        return False
    behind = pacing.versions_behind(line.latest, version, ancestors(line, line.latest))
    return not pacing.control_arm_trains(behind, max_staleness)


def files_rollback(line: Line, adapter: str, version: int, reason: str) -> R.AdapterRolledBack | None:
    """The rollback of ``version``, whose files do not verify: to its nearest good ancestor when it is the primary,
    else to the primary (the line under test goes with it); None when it is discarded already or cannot be rolled
    back (the base model): :func:`~streamgrpo.lifecycle.actions.rollback_target` says which."""
    try:
        v, restored = rollback_target(line, version, None)
    except AdapterActionError:
        return None
    return R.AdapterRolledBack(R.Envelope.new(SERVICE, event_id=ids.rollback_id(adapter, v)), adapter, v, restored,
                               f"its files do not verify in the adapter store: {reason}", {}, SERVICE)


def policy_from(s: StreamsSettings) -> ABPolicy:
    guards = Guardrails(s.ab_guard_min_rollouts, s.ab_guard_min_actions, s.ab_guard_margin,
                        {"error": s.ab_guard_error_rate, "judge_failure": s.ab_guard_judge_failure_rate,
                         "parse_failure": s.ab_guard_parse_failure_rate})
    return ABPolicy(s.ab_alpha, s.ab_mde, s.ab_min_groups, s.ab_max_groups, s.ab_max_duration_s, s.ab_max_loss,
                    s.ab_require_approval, s.ab_eval_gate, guards)


def ab_input(line: Line, stats: Stats, adapter_name: str, now_s: float) -> ABInput | None:
    """The running test's input, or None when no test runs (no candidate)."""
    if line.test_since is None or not line.candidates:
        return None
    since_ms = int(line.test_since.timestamp() * 1000)
    newest = line.candidates[-1]
    cand_eval, prim_eval = stats.of(adapter_name, newest).evaluation, stats.of(adapter_name, line.primary).evaluation
    return ABInput(
        canary=stats.arm(adapter_name, line.candidates, since_ms),
        control=stats.arm(adapter_name, [line.primary], since_ms),
        canary_counts=stats.pooled(adapter_name, line.candidates),
        control_counts=stats.of(adapter_name, line.primary), age_s=max(0.0, now_s - line.test_since.timestamp()),
        candidate_eval=cand_eval.accuracy if cand_eval else None, primary_eval=prim_eval.accuracy if prim_eval else None,
    )


def verdict_event(verdict: Verdict, adapter: str, line: Line) -> R.Event:
    """The event that carries ``verdict`` (about the newest candidate) with its statistics."""
    newest, since = line.candidates[-1], line.test_since
    env = R.Envelope.new
    if verdict.action == "promote":
        return R.AdapterPromoted(env(SERVICE, event_id=ids.promotion_id(adapter, newest)), adapter, newest,
                                 line.primary, verdict.reason, verdict.metrics, SERVICE)
    if verdict.action == "rollback":
        return R.AdapterRolledBack(env(SERVICE, event_id=ids.rollback_id(adapter, newest)), adapter, newest,
                                   line.primary, verdict.reason, verdict.metrics, SERVICE)
    since_ms = int(since.timestamp() * 1000) if since else 0
    return R.AdapterVerdict(env(SERVICE, event_id=ids.verdict_id(adapter, newest, verdict.action, since_ms)),
                            adapter, newest, line.primary, verdict.verdict, verdict.action, verdict.reason,
                            verdict.metrics, SERVICE)


class Lifecycle:
    """The controller's folds and decisions (no I/O: the agent sends what :meth:`next_events` returns)."""

    def __init__(self, adapter_name: str, canary_share: float, policy: ABPolicy, success_threshold: float) -> None:
        self.adapter_name = adapter_name
        self.canary_share = canary_share
        self.policy = policy
        self.registry = AdapterRegistry(canary_share)
        self.stats = Stats(success_threshold)
        self.pending: dict[str, float] = {}  # event id written -> when (until the fold has it)
        self.last: Verdict | None = None
        self.published: dict[str, tuple[Any, ...]] = {}  # version key -> content of the last AdapterState sent
        self.files: FileCheck | None = None  # set by the shell when [streams] adapter_check is on

    def apply(self, event: R.Event) -> None:
        self.registry.apply(event)
        self.stats.apply(event)

    @property
    def line(self) -> Line:
        return self.registry.line(self.adapter_name)

    def next_events(self, now_s: float, retry_s: float = 30.0) -> list[R.Event]:
        """What to write now (nothing while an earlier write is not folded yet, up to ``retry_s``)."""
        self.pending = {i: t for i, t in self.pending.items() if i not in self.registry.applied
                        and now_s - t < retry_s}
        if self.pending:
            return []
        line, out = self.line, []
        for v in sorted(line.rolled_back):
            born = line.history.get(v, ())
            if born and born[-1].by == "registry":  # rolled back by the fold at publication: say so in the log
                out.append(R.AdapterRolledBack(R.Envelope.new(SERVICE, event_id=ids.rollback_id(self.adapter_name, v)),
                                               self.adapter_name, v, line.primary, born[-1].reason, {}, SERVICE))
        failed = sorted(self.files.failed.items()) if self.files is not None and not out else []
        for v, reason in failed:
            event = files_rollback(line, self.adapter_name, v, reason)
            if event is not None:  # one at a time: it discards the versions above the one it restores
                out.append(event)
                break
        if not out and self.canary_share > 0:
            inp = ab_input(line, self.stats, self.adapter_name, now_s)
            self.last = decide(inp, self.policy) if inp is not None else None
            if self.last is not None and self.last.action != "wait":
                out.append(verdict_event(self.last, self.adapter_name, line))
        self.pending.update({e.event_id: now_s for e in out})
        return out

    def states_to_publish(self, now: datetime) -> list[R.AdapterState]:
        """AdapterStates whose content changed since :meth:`mark_published` (the canary's carries the test)."""
        line = self.line
        extra = {}
        if line.canary is not None and self.last is not None:
            extra[line.canary] = {f"test_{k}": v for k, v in self.last.metrics.items()}
        return [state for state in adapter_states(line, self.adapter_name, self.stats, now, extra)
                if self.published.get(state.version_key) != content_key(state)]

    def mark_published(self, state: R.AdapterState) -> None:
        self.published[state.version_key] = content_key(state)


def eval_gauges(life: Lifecycle) -> None:
    """Held-out accuracy (point and CI) of the newest evaluated version and of the primary, and the number of
    the newest evaluated version, in the process's metrics (nothing before the first evaluation)."""
    m = metrics.current()
    evaluated = {v: s.evaluation for (name, v), s in life.stats.versions.items()
                 if name == life.adapter_name and s.evaluation is not None}
    roles = {"primary": evaluated.get(life.line.primary)}
    if evaluated:
        newest = max(evaluated)
        roles["evaluated"] = evaluated[newest]
        m.set(metrics.ADAPTER_VERSION, newest, role="evaluated")
    for role, ev in roles.items():
        if ev is not None:
            for bound, value in (("point", ev.accuracy), ("ci_low", ev.ci_low), ("ci_high", ev.ci_high)):
                m.set(metrics.EVAL_ACCURACY, value, role=role, bound=bound)


def register(ctx: StreamsContext) -> Lifecycle:
    from streamgrpo.topics.follow import LogFollower, fold_events

    s = ctx.settings
    life = Lifecycle(s.adapter_name, s.canary_share, policy_from(s), s.success_threshold)
    if s.adapter_check:
        life.files = FileCheck(Path(s.adapter_store), s.adapter_verify_grace_s)
    follower = LogFollower(ctx.kafka, TOPICS, fold_events(life.apply), codec=ctx.codec)
    last_publish = [0.0]

    async def run_follower() -> None:
        await follower.run()

    async def ab_tick() -> None:
        if not follower.caught_up.is_set():
            return
        eval_gauges(life)
        if not leads():
            return
        if life.files is not None:
            for ann in life.files.pending(life.line):  # hashing a version's files is blocking I/O
                await asyncio.to_thread(life.files.check, ann, time.time())
        for event in life.next_events(time.time()):
            log.info("lifecycle: %s v%s: %s", type(event).__name__, getattr(event, "version", "?"),
                     getattr(event, "reason", ""))
            await (await ctx.send(event))
            ctx.count(f"ab.{type(event).__name__}")
        if time.monotonic() - last_publish[0] >= s.registry_interval_s:
            last_publish[0] = time.monotonic()
            for state in life.states_to_publish(datetime.now(timezone.utc)):
                await (await ctx.send(state))
                life.mark_published(state)
                ctx.count("ab.registry_states")

    async def lease(stream: FaustStream) -> None:
        async for _ in stream.events():  # consumed only so that ONE worker of the group holds the partition
            pass

    def leads() -> bool:
        return TP(ctx.name(catalog.ADAPTER_EVENTS), 0) in faust_transport.assigned(ctx.app)

    ctx.app.task(run_follower)
    ctx.app.agent(ctx.topics[catalog.ADAPTER_EVENTS], name="streamgrpo.ab.lease")(lease)
    ctx.app.timer(max(0.2, s.tick_interval_s), name="streamgrpo.ab")(ab_tick)
    return life
