"""The evaluator in the loop (``streamgrpo evaluator``): held-out accuracy of each new adapter version.

It follows ``adapter-events`` and ``evaluations`` with one log follower for its lifetime (read from the
beginning once, then only new records; a broker that does not answer at start is waited for, one that goes
away later is ridden out). It evaluates the base model once at start, then at most one version per
``interval_s`` seconds: the NEWEST version published and not yet evaluated (of every ``every``-th one), so the
curve stays current instead of falling behind. It loads the announced files -- only from the adapter store
(``[loop] adapter_store``) and only if their sha256 matches the event; any other version is logged as skipped with
the reason and never evaluated --, evaluates the agent as served on a FIXED held-out sample (``limit`` tasks of
``tasks``, each kind in proportion to its share of the set; ``sample = "first"``: the first ``limit``), greedy,
and publishes an ``EvaluationCompleted`` (trigger ``run-evaluator``). Versions already evaluated on the same task
set by an evaluator (read back from ``evaluations``: at start, and as they come) are not evaluated again, so a
restarted evaluator resumes.

Cost on a small machine: the evaluator runs at a lower CPU priority (``nice``) than the rollout
workers and the trainer, on a small sample; evaluating every version kept it busy the whole run on 2 cores (a
quarter of the loop's rollouts), so by default it starts one at most every ``interval_s`` (240 s); docs/learning.md
has the measurements.

What is not covered: evaluating canaries differently from other versions (every version is treated
alike), sampling-based evaluation in the loop (``streamgrpo eval --samples`` does that on demand).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from streamgrpo import heartbeat
from streamgrpo.avro import records as R
from streamgrpo.config import StrictModel
from streamgrpo.errors import StreamGRPOError
from streamgrpo.topics import catalog

if TYPE_CHECKING:
    from streamgrpo.topics.follow import FollowerThread

log = logging.getLogger(__name__)


class EvaluatorSettings(StrictModel):
    """The evaluator of `streamgrpo run` (section ``[evaluator]``, env ``STREAMGRPO_EVALUATOR__<FIELD>``)."""

    enabled: bool = Field(True, description="Run the evaluator as part of `streamgrpo run`.")
    tasks: str = Field("builtin:heldout", description="Held-out task set (a file or a built-in split). Never train "
                       "on it: `run` submits builtin:train.")
    limit: int = Field(32, ge=1, le=100_000, description="Tasks of the fixed held-out sample.")
    sample: Literal["proportional", "first"] = Field(
        "proportional", description="Which `limit` tasks: `proportional` (the default) takes each task kind "
        "(metadata `kind`) in proportion to its share of the set, spread over its tasks, so the in-loop accuracy "
        "estimates the whole set's (builtin:heldout: 14 arithmetic, 8 lookup, 7 two-step, 3 history); `first` "
        "takes the first `limit` (builtin:heldout interleaves kinds: 8 of each, so the one kind that learns, "
        "arithmetic, is a quarter of it and the curve moves less; docs/learning.md).")
    every: int = Field(1, ge=1, le=1000, description="Evaluate every N-th published version (the newest pending "
                       "one is taken when versions come faster than evaluations).")
    interval_s: float = Field(240.0, ge=0, le=86_400, description="Start an evaluation at most once per this many "
                              "seconds (the newest version pending when it is due; 0: as soon as one is published). "
                              "The base model is evaluated at start regardless. 240 (the default): about 7 points "
                              "of the held-out curve in a 30-minute run instead of one per version, so the warm "
                              "start's many quick versions do not keep the evaluator busy beside the trainer "
                              "(docs/learning.md).")
    include_base: bool = Field(True, description="Evaluate the base model (v0) once, as the reference.")
    batch_size: int = Field(16, ge=1, le=512, description="Tasks run at once.")
    nice: int = Field(10, ge=0, le=19, description="CPU niceness of the evaluator process (the loop's rollout "
                      "workers and trainer come first).")
    poll_s: float = Field(2.0, gt=0, le=300, description=f"How often {catalog.ADAPTER_EVENTS} is checked for new "
                          "versions.")
    metrics_port: int = Field(9465, ge=0, le=65535, description="Port of the evaluator's Prometheus /metrics and "
                              "/status endpoint (0 = off; a port in use is logged and skipped).")


class Evaluator:
    """State + one step of the evaluator loop (the session does the I/O)."""

    def __init__(self, settings: EvaluatorSettings, session: Any, rows: Sequence[Any]) -> None:
        from streamgrpo.evaluation.core import proportional_sample, task_set_hash

        self.settings = settings
        self.session = session
        rows = list(rows)
        if settings.sample == "first":
            self.rows = rows[: settings.limit]
        else:  # a task's kind as the evaluation reports it per kind (runner.py's Outcome)
            kinds = [r.metadata.get("kind", "") for r in rows]
            self.rows = [rows[i] for i in proportional_sample(kinds, settings.limit)]
        self.spec = session.spec(settings.tasks, batch_size=settings.batch_size)
        self.task_hash = task_set_hash([(t.question, t.ground_truths) for t in self.rows])
        self.done: set[int] = set()
        self.last_started: float | None = None  # time.monotonic() of the last evaluation started

    def pending(self, published: dict[int, R.AdapterPublished], now: float | None = None) -> int | None:
        """The version to evaluate next: the base first (if asked), then, once ``interval_s`` has passed since the
        last evaluation started, the newest not yet evaluated."""
        if self.settings.include_base and 0 not in self.done:
            return 0
        now = time.monotonic() if now is None else now
        if self.last_started is not None and now - self.last_started < self.settings.interval_s:
            return None
        todo = [v for v in published if v not in self.done and v % self.settings.every == 0]
        return max(todo) if todo else None

    def note_existing(self, events: Sequence[R.Event]) -> None:
        """Versions already evaluated on this exact task set by an evaluator (resume after a restart)."""
        for e in events:
            if isinstance(e, R.EvaluationCompleted) and e.task_set_hash == self.task_hash \
                    and e.trigger == "run-evaluator" and e.adapter_name == self.session.loop.adapter_name:
                self.done.add(e.adapter_version)

    def evaluate(self, version: int, published: dict[int, R.AdapterPublished]) -> R.EvaluationCompleted:
        from streamgrpo.evaluation.adapters import base_target, from_event

        name = self.session.loop.adapter_name  # announced files load only from the session's adapter store
        target = base_target(name) if version == 0 else from_event(published[version], self.session.store)
        self.last_started = time.monotonic()  # a version that does not verify does not use up the interval
        run = self.session.run_one(target, self.rows, self.spec)
        self.done.add(version)
        return run.run.event(self.session.judge.info, trigger="run-evaluator", service="evaluator")


class Announcements:
    """A fold of ``adapter-events`` and ``evaluations`` for the evaluator: the announced versions of one adapter and
    the evaluations not yet handed over. The follower's thread applies events; the evaluator's thread reads."""

    def __init__(self, adapter_name: str) -> None:
        self.adapter_name = adapter_name
        self._lock = threading.Lock()
        self._published: dict[int, R.AdapterPublished] = {}
        self._evaluations: list[R.EvaluationCompleted] = []

    def apply(self, event: R.Event) -> None:
        with self._lock:
            if isinstance(event, R.AdapterPublished) and event.adapter_name == self.adapter_name:
                self._published[event.version] = event
            elif isinstance(event, R.EvaluationCompleted):
                self._evaluations.append(event)

    def published(self) -> dict[int, R.AdapterPublished]:
        """The AdapterPublished events of the adapter by version (a copy)."""
        with self._lock:
            return dict(self._published)

    def take_evaluations(self) -> list[R.EvaluationCompleted]:
        """The evaluations folded since the last call."""
        with self._lock:
            taken, self._evaluations = self._evaluations, []
            return taken


#: What the evaluator follows, for its lifetime (one :class:`~streamgrpo.topics.follow.FollowerThread`).
FOLLOWED = (catalog.ADAPTER_EVENTS, catalog.EVALUATIONS)


def serve(settings: EvaluatorSettings, session: Any, stop: threading.Event) -> None:
    """The evaluator loop until ``stop`` (see module docstring)."""
    from streamgrpo.topics.producer import EventProducer

    if settings.nice:
        os.nice(settings.nice)
    rows = session.load_tasks(settings.tasks)
    evaluator = Evaluator(settings, session, rows)
    from streamgrpo.topics.follow import FollowerThread, fold_events

    fold = Announcements(session.loop.adapter_name)
    follower = FollowerThread(session.kafka, FOLLOWED, fold_events(fold.apply), name="evaluator-follower").start()
    try:
        with EventProducer(session.kafka, "evaluator") as producer:
            if _wait_caught_up(follower, settings, stop):
                evaluator.note_existing(fold.take_evaluations())
                log.info("evaluator: %d held-out tasks (%s, hash %s); already evaluated: %s", len(evaluator.rows),
                         settings.tasks, evaluator.task_hash, sorted(evaluator.done) or "none")
                _evaluate_until(stop, settings, evaluator, follower, fold, producer)
    finally:
        follower.close()


def _wait_caught_up(follower: FollowerThread, settings: EvaluatorSettings, stop: threading.Event) -> bool:
    """Wait until the follower folded the history (True), or ``stop`` (False); alive meanwhile."""
    while not stop.is_set():
        heartbeat.beat()
        follower.check()
        if follower.caught_up(min(settings.poll_s, 1.0)):
            return True
    return False


def _evaluate_until(stop: threading.Event, settings: EvaluatorSettings, evaluator: Evaluator,
                    follower: FollowerThread, fold: Announcements, producer: Any) -> None:
    while not stop.is_set():
        heartbeat.beat()
        follower.check()
        evaluator.note_existing(fold.take_evaluations())  # e.g. another evaluator's, or our own
        published = fold.published()
        version = evaluator.pending(published)
        if version is None:
            stop.wait(settings.poll_s)
            continue
        started = time.monotonic()
        try:
            event = evaluator.evaluate(version, published)
        except StreamGRPOError as exc:  # a version that does not verify (sha256, outside the store) is reported
            log.error("evaluator: v%d skipped: %s", version, exc)
            evaluator.done.add(version)
            continue
        producer.send(event)
        producer.flush()
        log.info("evaluator: %s@v%d accuracy %.3f [%.3f, %.3f] on %d tasks in %.0f s", event.adapter_name,
                 version, event.accuracy, event.ci_low, event.ci_high, event.tasks, time.monotonic() - started)
