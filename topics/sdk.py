"""Producer SDK for upstream services: publish Tasks without knowing Avro or Kafka details.

    from streamgrpo.config import KafkaSettings
    from streamgrpo.topics.sdk import TaskProducer

    with TaskProducer(KafkaSettings(bootstrap="kafka:9092"), source="support-bot") as tp:
        task_id = tp.submit("What is 12 squared?", ground_truths=["144"], group_size=8)

Installing this needs only the core dependencies (fastavro, confluent-kafka, aiokafka, pydantic):
``streamgrpo.topics`` and ``streamgrpo.avro`` never import torch, transformers, vllm or faust.

:func:`publish_rows` is what ``streamgrpo submit`` uses for files: it validates every row first
and, unless ``skip_invalid`` is set, publishes nothing when any row is bad, so a file is never
half published silently.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from streamgrpo.avro.records import Envelope, Task
from streamgrpo.config import KafkaSettings
from streamgrpo.topics.producer import EventProducer

MAX_GROUP_SIZE = 1024


class TaskLike(Protocol):
    question: str
    ground_truths: list[str]
    source: str
    metadata: dict[str, str]


class TaskValidationError(ValueError):
    """A task is not publishable; the message names the field."""


def make_task(
    question: str,
    *,
    source: str,
    group_size: int,
    ground_truths: Iterable[str] = (),
    metadata: dict[str, str] | None = None,
    task_id: str | None = None,
    service: str = "submit",
) -> Task:
    """Build a validated Task event (raises TaskValidationError naming the bad field)."""
    if not isinstance(question, str) or not question.strip():
        raise TaskValidationError("question: must be a non-empty string")
    if not source:
        raise TaskValidationError("source: must be a non-empty string")
    if not 1 <= group_size <= MAX_GROUP_SIZE:
        raise TaskValidationError(f"group_size: must be between 1 and {MAX_GROUP_SIZE}, got {group_size}")
    truths = [str(t) for t in ground_truths]
    if any(not t.strip() for t in truths):
        raise TaskValidationError("ground_truths: answers must be non-empty strings")
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    tid = task_id or str(uuid.uuid4())
    return Task(
        envelope=Envelope.new(service, task_id=tid),
        question=question.strip(),
        source=source,
        group_size=group_size,
        ground_truths=truths,
        metadata=meta,
    )


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
            question, source=self.source, group_size=group_size or self.group_size,
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


def publish_rows(
    rows: Iterable[tuple[int, TaskLike | Exception]],
    producer: EventProducer,
    *,
    group_size: int,
    source: str | None = None,
    skip_invalid: bool = False,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> SubmitReport:
    """Validate every row, then publish. Rows are ``(row_number, TaskLike | error)`` pairs.

    Without ``skip_invalid`` a single bad row aborts the whole file before anything is sent
    (the report lists the bad rows; the caller turns that into an error).
    """
    report = SubmitReport()
    tasks: list[Task] = []
    for number, row in rows:
        if limit is not None and len(tasks) >= limit:
            break
        if isinstance(row, Exception):
            report.rejected.append((number, str(row)))
            continue
        try:
            tasks.append(make_task(row.question, source=source or row.source, group_size=group_size,
                                   ground_truths=row.ground_truths, metadata=row.metadata))
        except TaskValidationError as exc:
            report.rejected.append((number, str(exc)))
    if report.rejected and not skip_invalid:
        return report
    for task in tasks:
        producer.send(task)
        report.published += 1
        report.task_ids.append(task.envelope.task_id or "")
        if progress is not None:
            progress(report.published)
    producer.flush()
    return report
