"""Producer SDK for upstream services: publish Tasks without knowing Avro or Kafka details.

    from streamgrpo.config import KafkaSettings
    from streamgrpo.topics.sdk import TaskProducer

    with TaskProducer(KafkaSettings(bootstrap="kafka:9092"), source="support-bot") as tp:
        task_id = tp.submit("What is 12 squared?", ground_truths=["144"], group_size=8)

Installing this needs only the core dependencies (fastavro, confluent-kafka, aiokafka, pydantic):
``streamgrpo.topics`` and ``streamgrpo.avro`` never import torch, transformers, vllm or faust.

:func:`label_rollouts` is what ``streamgrpo label`` uses: a person's reward for rollouts, as Reward
events with provenance ``human:<name>`` (the advantage window uses them ahead of the judge's while
a group is open; metrics and the A/B test keep them apart). All or nothing, like files.

    from streamgrpo.topics.sdk import Label, label_rollouts

    label_rollouts(KafkaSettings(bootstrap="kafka:9092"), [Label(rollout_id, 1.0)], by="ada")

:func:`publish_rows` is what ``streamgrpo submit`` uses for files. All or nothing: EVERY row is
first built into a Task (the field rules of :mod:`~streamgrpo.topics.task_fields`: strings, no
lone surrogates, a list of answers, flat metadata, an identifier as task_id, at most the fan-out's
:data:`~streamgrpo.topics.limits.MAX_TASK_BYTES` encoded; ``group_size`` in 1..:data:`MAX_GROUP_SIZE`),
encoded with the producer's Avro codec, and its record size checked against the largest record
the topic accepts (:func:`topic_max_message_bytes`); only then is anything sent.
A bad row is reported with its 1-based row number; without ``skip_invalid`` nothing is published,
with it the bad rows are left out and reported. A row's own ``group_size`` is honoured (the
caller's value is the default for rows without one).

What is NOT covered: a broker that fails in the middle of sending (no transactions: the records
acknowledged before the failure stay published, and :class:`ProduceError` says how many were not).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from streamgrpo.avro import ids, provenance
from streamgrpo.avro.codec import Codec
from streamgrpo.avro.errors import EncodeError
from streamgrpo.avro.records import (
    Demonstration,
    Envelope,
    JudgeInfo,
    Reward,
    RewardComponent,
    RewardStatus,
    RolloutCompleted,
    Task,
)
from streamgrpo.config import KafkaSettings
from streamgrpo.topics import catalog
from streamgrpo.topics import task_fields as fields
from streamgrpo.topics.catalog import topic_for
from streamgrpo.topics.clients import client_config, topic_name
from streamgrpo.topics.errors import TopicsError
from streamgrpo.topics.producer import EventProducer
from streamgrpo.topics.task_fields import TaskValidationError

log = logging.getLogger(__name__)
_SIZING = Codec()  # single-object framing: its header is the larger of the two wire formats

#: Largest GRPO group a Task may ask for (submit, the SDK; the fan-out builds this many requests).
MAX_GROUP_SIZE = 256
#: Kafka's default max.message.bytes (topic) / message.max.bytes (broker).
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
#: librdkafka's default message.max.bytes, which EventProducer keeps: the client refuses larger records.
PRODUCER_MAX_MESSAGE_BYTES = 1_000_000
#: Room left for the record batch and record headers around key + value.
RECORD_OVERHEAD_BYTES = 512


class TaskLike(Protocol):
    question: str
    ground_truths: list[str]
    source: str
    metadata: dict[str, str]


def make_task(
    question: str,
    *,
    source: str,
    group_size: int,
    ground_truths: Iterable[str] = (),
    metadata: dict[str, str] | None = None,
    task_id: str | None = None,
    service: str = "submit",
    demonstration: Demonstration | None = None,
) -> Task:
    """Build a validated Task event (raises TaskValidationError naming the bad field: see
    :mod:`~streamgrpo.topics.task_fields`; nothing is converted or rewritten). ``demonstration``: the planner's
    replies that solve it (:mod:`streamgrpo.tasks.demos`); it then needs a ground truth, which the judge checks the
    demonstrated answer against."""
    question = fields.text("question", question)
    if demonstration is not None:
        _check_demonstration(demonstration, ground_truths)
    fields.text("source", source)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or not 1 <= group_size <= MAX_GROUP_SIZE:
        raise TaskValidationError(f"group_size: must be an integer from 1 to {MAX_GROUP_SIZE}, got {group_size!r:.40}")
    task = Task(
        envelope=Envelope.new(service, task_id=fields.task_id(task_id) or str(uuid.uuid4())),
        question=question.strip(),
        source=source,
        group_size=group_size,
        ground_truths=fields.ground_truths(ground_truths),
        metadata=fields.metadata(metadata),
        demonstration=demonstration,
    )
    fields.encoded_size(len(_SIZING.encode(task)))
    return task


def _check_demonstration(demonstration: Demonstration, ground_truths: Iterable[str]) -> None:
    from streamgrpo.tasks.demos import check_steps

    try:
        check_steps(demonstration.steps)
    except ValueError as exc:
        raise TaskValidationError(f"demonstration: {exc}") from exc
    fields.text("demonstration source", demonstration.source)
    if not list(ground_truths):
        raise TaskValidationError("demonstration: needs the task's ground truth (the judge checks the demonstrated "
                                  "answer against it)")


def topic_max_message_bytes(kafka: KafkaSettings, topic: str = catalog.TASKS, timeout_s: float = 5.0) -> int:
    """The largest record (key + value + overhead) ``topic`` accepts from our producer: the topic's
    ``max.message.bytes`` when the broker reports it (Apache Kafka does; the embedded broker reports
    none, then Kafka's default applies, so a file that passes here passes on a default cluster),
    capped by the producer's own ``message.max.bytes``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    broker_limit = KAFKA_DEFAULT_MAX_MESSAGE_BYTES
    try:
        admin = AdminClient(client_config(kafka))
        resource = ConfigResource(ResourceType.TOPIC, topic_name(kafka, topic))
        configs = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout=timeout_s)
        entry = configs.get("max.message.bytes")
        if entry is not None and entry.value:
            broker_limit = int(entry.value)
    except (KafkaException, TimeoutError, ValueError) as exc:
        log.info("max.message.bytes of %s not available (%s); using Kafka's default %d", topic, exc, broker_limit)
    return min(broker_limit, PRODUCER_MAX_MESSAGE_BYTES)


class TaskProducer:
    """Publishes Tasks to the `tasks` topic. Context manager; delivery is confirmed on close/flush."""

    def __init__(self, kafka: KafkaSettings, source: str, group_size: int = 8, service: str = "submit") -> None:
        self.source = source
        self.group_size = group_size
        self.service = service
        self._producer = EventProducer(kafka, service)

    def submit(
        self,
        question: str,
        *,
        ground_truths: Iterable[str] = (),
        group_size: int | None = None,
        metadata: dict[str, str] | None = None,
        task_id: str | None = None,
    ) -> str:
        task = make_task(
            question, source=self.source, group_size=self.group_size if group_size is None else group_size,
            ground_truths=ground_truths, metadata=metadata, task_id=task_id, service=self.service,
        )
        self._producer.send(task)
        return task.envelope.task_id or ""

    def flush(self) -> None:
        self._producer.flush()

    def close(self) -> None:
        self._producer.close()

    def __enter__(self) -> TaskProducer:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()


@dataclass
class SubmitReport:
    """Outcome of publishing a file: counts, and every rejected row with its reason."""

    published: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EncodedTask:
    """A validated row, ready to send: its physical topic, key and Avro bytes."""

    row: int
    task_id: str
    topic: str
    key: str | None
    value: bytes


def _row_reason(row: TaskLike | Exception) -> str:
    """A rejected row's reason without its row number (the report carries the number)."""
    field_name, problem = getattr(row, "field", None), getattr(row, "problem", None)
    return f"field {field_name!r}: {problem}" if field_name and problem else str(row)


def encode_row(number: int, row: TaskLike, codec: Codec, kafka: KafkaSettings, *, group_size: int,
               source: str | None, max_bytes: int) -> EncodedTask:
    """One row as the record ``publish_rows`` would send; TaskValidationError says why it cannot be."""
    own = getattr(row, "group_size", None)
    steps = getattr(row, "demo_steps", None)  # a DemoRow (streamgrpo.tasks.demos): a demonstration
    demo = Demonstration(list(steps), str(getattr(row, "demo_source", ""))) if steps is not None else None
    task = make_task(row.question, source=source or row.source, group_size=group_size if own is None else own,
                     ground_truths=row.ground_truths, metadata=row.metadata, demonstration=demo)
    spec = topic_for(task)
    physical = topic_name(kafka, spec.name)
    try:
        value = codec.encode(task, physical)
    except EncodeError as exc:
        raise TaskValidationError(f"cannot be encoded as Avro: {exc}") from exc
    key = spec.key_of(task)
    fields.encoded_size(len(value))
    size = len(value) + len(key.encode("utf-8") if key else b"") + RECORD_OVERHEAD_BYTES
    if size > max_bytes:
        raise TaskValidationError(
            f"the record would be {size:,} bytes; topic {physical} accepts at most {max_bytes:,} "
            "(shorten the question, answers or metadata)")
    return EncodedTask(number, task.envelope.task_id or "", physical, key, value)


def prepare_rows(
    rows: Iterable[tuple[int, TaskLike | Exception]], producer: EventProducer, *, group_size: int,
    source: str | None = None, limit: int | None = None, max_message_bytes: int | None = None,
) -> tuple[list[EncodedTask], list[tuple[int, str]]]:
    """Validate, encode and size-check every row (up to ``limit`` good ones); nothing is sent."""
    max_bytes = max_message_bytes or topic_max_message_bytes(producer.kafka)
    ready: list[EncodedTask] = []
    rejected: list[tuple[int, str]] = []
    for number, row in rows:
        if limit is not None and len(ready) >= limit:
            break
        if isinstance(row, Exception):
            rejected.append((number, _row_reason(row)))
            continue
        try:
            ready.append(encode_row(number, row, producer.codec, producer.kafka, group_size=group_size,
                                    source=source, max_bytes=max_bytes))
        except TaskValidationError as exc:
            rejected.append((number, str(exc)))
    return ready, rejected


def publish_rows(
    rows: Iterable[tuple[int, TaskLike | Exception]],
    producer: EventProducer,
    *,
    group_size: int,
    source: str | None = None,
    skip_invalid: bool = False,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
    max_message_bytes: int | None = None,
) -> SubmitReport:
    """Prepare every row (:func:`prepare_rows`), then publish. Rows are ``(row_number, TaskLike | error)``.

    Without ``skip_invalid`` a single bad row aborts the whole file before anything is sent (the
    report lists the bad rows; the caller turns that into an error). ``group_size`` is the default
    for rows without their own. ``max_message_bytes`` defaults to :func:`topic_max_message_bytes`.
    """
    ready, rejected = prepare_rows(rows, producer, group_size=group_size, source=source, limit=limit,
                                   max_message_bytes=max_message_bytes)
    if rejected and not skip_invalid:
        return SubmitReport(rejected=rejected)
    report = send_prepared(ready, producer, progress=progress)
    report.rejected = rejected
    return report


def send_prepared(ready: Iterable[EncodedTask], producer: EventProducer, *,
                  progress: Callable[[int], None] | None = None) -> SubmitReport:
    """Send prepared records and wait for every acknowledgement (ProduceError lists failures)."""
    report = SubmitReport()
    for item in ready:
        producer.send_raw(item.topic, item.value, item.key)
        report.published += 1
        report.task_ids.append(item.task_id)
        if progress is not None:
            progress(report.published)
    producer.flush()
    return report


# ---------------------------------------------------------------------------------------------
# human rewards: `streamgrpo label`
class LabelError(TopicsError, ValueError):
    """A label cannot be written (unknown rollout, score out of range, no labeller); nothing was sent."""


#: A person's reward (``streamgrpo label``, this SDK, MCP ``feedback``) is a number from HUMAN_SCORE_MIN (wrong) to
#: HUMAN_SCORE_MAX (right): the scale of the judges' correctness scores (math, qa, correct, llm: [0, 1]). The advantage
#: window refuses (dead-letters) a human Reward outside it, however it was written.
HUMAN_SCORE_MIN = 0.0
HUMAN_SCORE_MAX = 1.0
#: Largest magnitude of any Reward's score the window folds (a judge's too: the hybrid judge is not clipped, its
#: defaults give [-0.5, 1.1]); beyond it the group's mean and std would overflow.
MAX_ABS_SCORE = 1e6


def score_problem(score: object, *, human: bool) -> str | None:
    """Why ``score`` cannot be a reward (of a person when ``human``), or None. Every score is a finite number of
    magnitude at most :data:`MAX_ABS_SCORE`; a person's is in [HUMAN_SCORE_MIN, HUMAN_SCORE_MAX]."""
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return f"score {score!r:.40} is not a number"
    value = float(score)
    if not math.isfinite(value):
        return f"score {value!r} is not a finite number"
    if human and not HUMAN_SCORE_MIN <= value <= HUMAN_SCORE_MAX:
        return (f"score {value!r} is out of range: a human reward is a number from {HUMAN_SCORE_MIN:g} (wrong) "
                f"to {HUMAN_SCORE_MAX:g} (right)")
    if abs(value) > MAX_ABS_SCORE:
        return f"score {value!r} is out of range: a reward's magnitude is at most {MAX_ABS_SCORE:g}"
    return None


@dataclass(frozen=True)
class Label:
    """A person's reward for one rollout: ``score`` in [0, 1] (1 = fully right)."""

    rollout_id: str
    score: float


def labeller(name: str) -> str:
    """``ada`` or ``human:ada`` -> ``human:ada`` (a LabelError for an empty name)."""
    who = provenance.human(name)
    if who is None:
        raise LabelError("the labeller's name is empty; pass --by NAME")
    return who


def human_reward(done: RolloutCompleted, score: float, by: str) -> Reward:
    """The Reward a person gives the rollout ``done`` (deterministic id: the same label twice is one event)."""
    problem = score_problem(score, human=True)
    if problem is not None:
        raise LabelError(problem)
    who = labeller(by)
    env = done.envelope
    return Reward(
        envelope=Envelope.new("label", event_id=ids.human_reward_id(env.rollout_id or "", who, float(score)),
                              task_id=env.task_id, group_id=env.group_id, rollout_id=env.rollout_id),
        score=float(score), status=RewardStatus.OK, judge=JudgeInfo(name=who, rubric_hash="human", model=None),
        group_size=done.group_size, adapter_name=done.adapter_name, adapter_version=done.adapter_version,
        turns=done.turns, rollout_status=done.status, components=[RewardComponent("human", float(score), 1.0)],
        tool_calls=dict(done.tool_calls),
    )


def find_rollouts(kafka: KafkaSettings, rollout_ids: Iterable[str], timeout_s: float = 10.0) -> dict[str, RolloutCompleted]:
    """The RolloutCompleted of each id found on ``rollouts`` (one pass over the topic)."""
    from streamgrpo.topics.follow import iter_topic

    wanted, found = set(rollout_ids), dict[str, RolloutCompleted]()
    for rec in iter_topic(kafka, catalog.ROLLOUTS, timeout_s=timeout_s):
        ev = rec.event
        if isinstance(ev, RolloutCompleted) and ev.envelope.rollout_id in wanted:
            found.setdefault(ev.envelope.rollout_id or "", ev)
    return found


def label_rollouts(kafka: KafkaSettings, labels: Iterable[Label], by: str) -> list[Reward]:
    """Write one human Reward per label, all or nothing: every label is checked first (the rollout exists on
    ``rollouts``, the score is in [0, 1], a labeller is named); a LabelError lists every problem and nothing is
    sent. Returns the Rewards sent (delivery confirmed)."""
    todo = list(labels)
    if not todo:
        raise LabelError("no labels given")
    labeller(by)
    found = find_rollouts(kafka, {lab.rollout_id for lab in todo})
    rewards, problems = [], []
    for n, lab in enumerate(todo, 1):
        done = found.get(lab.rollout_id)
        try:
            if done is None:
                raise LabelError(f"unknown rollout {lab.rollout_id!r}: no RolloutCompleted with that id on "
                                 f"`{catalog.ROLLOUTS}`")
            rewards.append(human_reward(done, lab.score, by))
        except LabelError as exc:
            problems.append(f"label {n}: {exc}" if len(todo) > 1 else str(exc))
    if problems:
        raise LabelError("; ".join(problems) + ("; nothing was written" if len(todo) > 1 else ""))
    with EventProducer(kafka, "label") as producer:
        for reward in rewards:
            producer.send(reward)
    return rewards
