"""The agent behind ``streamgrpo serve``: ``solve``, ``adapters`` and ``feedback`` as plain methods.

``solve(question)`` builds a Task (source ``mcp:<client>``, group size 1, deterministic group and rollout ids
derived from the task id as the fan-out derives them) and runs its one rollout with
:meth:`~streamgrpo.rollout.worker.RolloutWorker.run_group_sync` -- the worker's own path: a rolled-back
version serves the primary instead, a version > 0 is waited for (``adapter_wait_s``, at most ``version_wait_s``),
verified and pinned. The version is the PRIMARY one (as the adapter follower's registry says) unless the call pins
``planner@vN``; a primary this server refused to load (its files do not match its announced sha256, or lie outside
the adapter store) is not waited for: the newest version loaded below it answers, and the reply says so. With a
broker, the Task and every rollout event are produced and flushed before the answer returns;
``feedback(rollout_id, score, comment, feedback_token)`` then produces a human Reward (judge ``human:mcp:<client>``).

What feedback does (:func:`feedback_effect`, the words every client reads in the ``feedback`` reply and the
server's instructions): it is recorded as a human Reward of that rollout, counted apart from the judge's in the
version's figures (``streamgrpo adapters show``) and shown with the call by ``streamgrpo analyse``. It does not
train the planner: a served call is a group of ONE rollout (``group_size`` 1), the streams window closes such a group
without a training sample whatever reward it gets (one reward has no variance; the judge's own reward of a call
without ground truth is an ERROR), and the fan-out does not run a served Task again (``served_by``). What makes a
correct served answer teach is an operator's ``streamgrpo label ROLLOUT_ID 1.0 --as-demo`` (a demonstration).

Bounds (:mod:`.bounds`): a question beyond ``max_question_bytes`` is refused; a question whose planner prompt would
exceed ``max_prompt_tokens`` is cut to fit (the reply says so, and the Task records the cut question); a pinned
version that is not announced within ``version_wait_s`` is refused (:meth:`ServeAgent.version_announced` lets the
server wait on its event loop, holding no thread). A call whose client gave up (``cancel`` set) stops at its next
event: its rollout ends as ERROR ``cancelled``.

Feedback is authorised: only on a rollout this server answered with ``solve`` (never a training rollout read from
``rollouts``), by the client it was served to (its MCP client name) holding the ``feedback_token`` that ``solve``
returned to it (a secret of that one reply: the client name alone is only what a client claims to be). Tokens are
stateless (:mod:`.tokens`): signed with a secret kept in the home (``<home>/serve/feedback.key``, mode 0600), so a
``serve`` restarted on the same home accepts the tokens it gave before; an agent built without one
(``tokens`` None) signs with a key of its process only. The score is a number from 0 to 1
(:func:`~streamgrpo.topics.sdk.score_problem`).

Without a broker (``producer`` None) nothing is recorded and every answer says so (``note``, with the reason
:mod:`.discovery` gave); the base model (v0) answers, or, for a finished run (``--run ID``), the primary its archive
names, fed to the follower at start. ``adapters`` folds the versions from ``events`` (the broker's topics or that
archive; :mod:`streamgrpo.lifecycle.view`), at most once per :data:`VIEW_TTL_S`.

What is not covered: the comment of ``feedback`` travels only in the reply and the log (the Reward schema has
no free-text field); revoking one feedback token (rotate the key: :mod:`.tokens`); stopping a model call in the
middle of a turn (a cancelled call stops at its next event).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from streamgrpo.avro import ids
from streamgrpo.avro import records as R
from streamgrpo.errors import StreamGRPOError
from streamgrpo.lifecycle.view import EventSource
from streamgrpo.rollout.config import RolloutConfig
from streamgrpo.rollout.loop import LoopContext
from streamgrpo.serve.bounds import ServeLimits, check_question, fit_question
from streamgrpo.serve.tokens import FeedbackTokens, TokenRefused

log = logging.getLogger(__name__)
_PIN = re.compile(r"^(?:(?P<name>[A-Za-z0-9_.-]+)@)?v?(?P<version>\d+)$")
NOT_RECORDED = "no broker"
#: Seconds an ``adapters`` answer is reused (calls at once share one read of the topics).
VIEW_TTL_S = 5.0


def feedback_effect(adapter: str) -> str:
    """What happens to feedback, as clients are told (see the module docstring; true for a group of one rollout,
    the group every ``solve`` opens: tests/unit/serve/test_feedback_words.py checks it against the streams window)."""
    return (f"Recorded on the event log as a human reward of this answer: counted apart from the judge's in {adapter}'s "
            "figures (`streamgrpo adapters show`) and shown with the call by `streamgrpo analyse`. It does not train "
            "the planner: a served call is a group of one rollout, and GRPO learns only from differences between "
            "answers to the same question. An operator can make a correct answer teach with `streamgrpo label "
            "<rollout_id> 1.0 --as-demo` (it becomes a demonstration the trainer learns from).")


class ServeError(StreamGRPOError):
    """A serve call cannot be done (bad pin, unknown rollout, no broker for feedback)."""


class FeedbackRefused(ServeError):
    """Feedback on a rollout this server did not serve to the caller (or without its token)."""


class SolveCancelled(Exception):  # noqa: N818 - not a StreamGRPOError: the rollout loop must not make it an ERROR
    """The client of a ``solve`` gave up; raised from the event sink to stop the rollout at its next event."""


class Producer(Protocol):
    def send(self, event: R.Event) -> None: ...
    def flush(self) -> None: ...


@dataclass
class _Sink:
    """What the worker's group runner writes to: kept for the reply, forwarded to the producer when there is one;
    raises SolveCancelled once ``cancel`` is set."""

    producer: Producer | None
    events: list[R.Event] = field(default_factory=list)
    cancel: threading.Event | None = None

    def send(self, event: R.Event) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise SolveCancelled("the client gave up on this call")
        self.events.append(event)
        if self.producer is not None:
            self.producer.send(event)

    def flush(self) -> None:
        if self.producer is not None:
            self.producer.flush()


def parse_pin(pin: str | None, adapter_name: str) -> int | None:
    """``planner@v3`` / ``v3`` / ``3`` -> 3; None for no pin; ServeError for another adapter or bad text."""
    if pin is None or not pin.strip():
        return None
    m = _PIN.match(pin.strip())
    if m is None or (m["name"] not in (None, adapter_name)):
        raise ServeError(f"version {pin!r}: give {adapter_name}@v<N> (this server serves {adapter_name!r})")
    return int(m["version"])


def trace(events: list[R.Event], clip: int = 160) -> list[str]:
    """One short line per step of a rollout's events."""
    out = []
    for e in events:
        if isinstance(e, R.ToolObservation):
            result = f"ERROR {e.error}" if e.error else e.output
            out.append(f"turn {e.envelope.turn}: {e.tool}({e.command[:80]}) -> {' '.join(result.split())[:clip]}")
        elif isinstance(e, R.RolloutCompleted):
            out.append(f"{e.status.value} after {e.turns} turn(s)" + (f": {e.error[:clip]}" if e.error else ""))
    return out


def served_request(cfg: RolloutConfig, question: str, client: str, version: int) -> tuple[R.RolloutRequest, R.Task]:
    """The Task a ``solve`` records (source ``mcp:<client>``, a group of ONE rollout, ``served_by`` set so the
    fan-out does not run it again) and the one RolloutRequest the server runs for it, at ``version``."""
    from streamgrpo.topics.sdk import make_task

    task = make_task(question, source=f"mcp:{client}", group_size=1, service="mcp",
                     metadata={"served_by": "mcp", "client": client}, task_id=str(uuid.uuid4()))
    task_id = str(task.envelope.task_id)
    group = ids.group_id(task_id, 0)
    rollout = ids.rollout_id(group, 0)
    sampling = R.SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                                seed=cfg.seed)
    request = R.RolloutRequest(
        envelope=R.Envelope.new("mcp", event_id=ids.request_event_id(rollout), task_id=task_id, group_id=group,
                                rollout_id=rollout),
        question=task.question, source=task.source, rollout_index=0, group_size=1,
        adapter_name=cfg.adapter_name, adapter_version=version, max_turns=cfg.max_turns,
        sampling=sampling, metadata=dict(task.metadata))
    return request, task


class ServeAgent:
    """``solve`` / ``adapters`` / ``feedback`` (see the module docstring). Thread-safe: calls may overlap."""

    def __init__(self, cfg: RolloutConfig, ctx: LoopContext, *, producer: Producer | None = None,
                 follower: Any = None, kafka: Any = None, limits: ServeLimits | None = None,
                 events: EventSource | None = None, why_not_recorded: str = NOT_RECORDED,
                 tokens: FeedbackTokens | None = None) -> None:
        """``kafka``: the broker calls are recorded on (``events`` defaults to its topics); ``events``: where
        ``adapters`` reads the versions (a finished run's archive); ``why_not_recorded``: the reason every reply
        gives when ``producer`` is None; ``tokens``: what signs and checks feedback tokens (``serve``: the home's
        key, :mod:`.tokens`; None: a key of this process only)."""
        self.limits = limits or ServeLimits()
        # a worker thread waits for a pinned version to load at most version_wait_s (its announcement is awaited on
        # the server's event loop first: version_announced)
        cfg = cfg.model_copy(update={"adapter_wait_s": min(cfg.adapter_wait_s, self.limits.version_wait_s)})
        self.cfg, self.ctx, self.producer, self.follower, self.kafka = cfg, ctx, producer, follower, kafka
        if events is None and kafka is not None:
            from streamgrpo.lifecycle.view import kafka_events

            events = kafka_events(kafka)
        self.events = events
        self.why_not_recorded = why_not_recorded
        self.tokens = tokens or FeedbackTokens.ephemeral(kafka.topic_prefix if kafka is not None else "")
        self._view_lock = threading.Lock()
        self._view: tuple[float, list[dict[str, Any]]] | None = None
        self._warned: set[int] = set()

    @property
    def recording(self) -> bool:
        return self.producer is not None

    def primary(self) -> int:
        return int(self.follower.primary(self.cfg.adapter_name)) if self.follower is not None else 0

    def serving(self) -> tuple[int, str]:
        """The version an unpinned call uses, and a note when it is not the primary: a primary this server refused
        to load is not waited for (every call would wait, then fail); the newest version loaded below it answers."""
        primary, name = self.primary(), self.cfg.adapter_name
        refusals = [r for r in getattr(self.follower, "refusals", ()) if (r.adapter_name, r.version) == (name, primary)]
        if not primary or not refusals:
            return primary, ""
        below = [v for v in self.ctx.policy.resident_versions(name) if v < primary]
        fallback = max(below, default=0)
        if primary not in self._warned:
            self._warned.add(primary)
            log.error("%s@v%d is the primary but was refused here (%s): %s@v%d answers instead", name, primary,
                      refusals[-1].reason, name, fallback)
        return fallback, (f"{name}@v{primary} is the primary but this server refused to load it "
                          f"({refusals[-1].reason[:300]}); {name}@v{fallback} answered")

    def version_announced(self, version: str | None) -> bool:
        """Whether a call pinned to ``version`` can start without waiting for an announcement (never blocks)."""
        pinned = parse_pin(version, self.cfg.adapter_name)
        if not pinned or self.follower is None:
            return True
        return bool(self.follower.wait_announced(self.cfg.adapter_name, pinned, 0.0))

    def solve(self, question: str, client: str, version: str | None = None,
              cancel: threading.Event | None = None) -> dict[str, Any]:
        check_question(question, self.limits)
        pinned = parse_pin(version, self.cfg.adapter_name)
        asked, fallback = self.serving() if pinned is None else (pinned, "")
        fitted, cut = fit_question(question, self.ctx)
        request, task = served_request(self.cfg, fitted, client, asked)
        sink = _Sink(self.producer, cancel=cancel)
        sink.send(task)
        results = self._run(request, sink)
        sink.flush()
        done = next(e for e in sink.events if isinstance(e, R.RolloutCompleted))
        token = self.tokens.issue(done, client)
        result = results[0]
        reply: dict[str, Any] = {
            "answer": result.final_answer, "status": result.status.value, "rollout_id": request.envelope.rollout_id,
            "adapter": f"{self.cfg.adapter_name}@v{result.adapter_version}", "version": result.adapter_version,
            "trace": trace(sink.events), "recorded": self.recording, "feedback_token": token,
        }
        if result.error:
            reply["error"] = result.error
        if cut:
            reply["question_cut"] = (f"the question was cut from {len(question.strip()):,} to {len(fitted):,} "
                                     "characters (its start and end kept) to fit the planner's prompt budget "
                                     f"([rollout] max_prompt_tokens = {self.ctx.max_prompt_tokens})")
        if fallback:
            reply["fallback"] = fallback
        if not self.recording:
            reply["note"] = self.not_recorded(result.adapter_version)
        return reply

    def not_recorded(self, version: int) -> str:
        return (f"not recorded as events ({self.why_not_recorded}): {self.cfg.adapter_name}@v{version}"
                f"{' (the base model)' if version == 0 else ''} answered; feedback cannot be given")

    def _run(self, request: R.RolloutRequest, sink: _Sink) -> list[Any]:
        from streamgrpo.rollout.loop import fail_group
        from streamgrpo.rollout.worker import RolloutWorker

        worker = RolloutWorker(self.cfg, self.kafka, self.ctx, sink, self.follower)  # per call: its own sink
        try:
            return worker.run_group_sync([request])
        except SolveCancelled:
            log.info("solve of rollout %s stopped: its client gave up", request.envelope.rollout_id)
            ended = _Sink(self.producer)  # the rollout ends as ERROR: the log holds no half rollout
            fail_group([request], self.ctx, ended.send, "cancelled: the client gave up on the call")
            ended.flush()
            raise ServeError("the call was cancelled: the client gave up") from None

    def adapters(self) -> list[dict[str, Any]]:
        """Versions and their lifecycle status (from ``events``; reused for :data:`VIEW_TTL_S`); without any events
        only the base model."""
        serving, _ = self.serving()
        if self.events is None:
            return [{"version": 0, "status": "base model", "serving": True,
                     "note": self.not_recorded(0)}]
        with self._view_lock:  # calls at once share one read
            if self._view is None or time.monotonic() - self._view[0] > VIEW_TTL_S:
                self._view = (time.monotonic(), self._rows())
            rows = self._view[1]
        return [{**r, "serving": r["version"] == serving} for r in rows]

    def _rows(self) -> list[dict[str, Any]]:
        from datetime import datetime, timezone

        from streamgrpo.lifecycle.view import row, view_from

        assert self.events is not None
        view = view_from(self.events, self.cfg.adapter_name, self.cfg.canary_share)
        now = datetime.now(timezone.utc)
        return [{**row(view.state(v, now), now), "version": v} for v in view.versions]

    def feedback(self, rollout_id: str, score: float, comment: str, client: str, token: str = "") -> dict[str, Any]:
        """A human Reward (judge ``human:mcp:<client>``) for a rollout this server answered to ``client``, checked
        with its ``feedback_token``; FeedbackRefused for any other rollout, LabelError for a score outside [0, 1]."""
        from streamgrpo.topics.sdk import human_reward

        if self.producer is None:
            raise ServeError(f"feedback cannot be recorded: nothing is recorded ({self.why_not_recorded})")
        served = self._authorise(rollout_id, client, token)
        reward = human_reward(served, score, f"mcp:{client}")
        self.producer.send(reward)
        self.producer.flush()
        log.info("feedback %s on rollout %s by %s: %s", score, rollout_id, reward.judge.name, comment[:500])
        adapter = f"{reward.adapter_name}@v{reward.adapter_version}"
        return {"rollout_id": rollout_id, "score": reward.score, "judge": reward.judge.name, "adapter": adapter,
                "recorded": True, "trains": False, "effect": feedback_effect(adapter)}

    def _authorise(self, rollout_id: str, client: str, token: str) -> R.RolloutCompleted:
        """The served rollout ``rollout_id`` (as its token describes it) when ``client`` holds its token;
        FeedbackRefused otherwise."""
        try:
            return self.tokens.verify(rollout_id, client, token)
        except TokenRefused as exc:
            if exc.wrong_rollout:
                raise FeedbackRefused(f"rollout {rollout_id!r} was not answered by this server's `solve` with that "
                                      "feedback_token: feedback is only for answers this server gave you, each with "
                                      "its own token") from None
            raise FeedbackRefused(f"rollout {rollout_id!r} was not served to this client with that token ({exc}): "
                                  "pass the feedback_token that `solve` returned with the answer") from None
