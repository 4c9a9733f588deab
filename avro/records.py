"""Frozen dataclasses mirroring the ``.avsc`` contract, with explicit ``to_avro``/``from_avro``.

No I/O here. Field names and order match the schemas; ``tests/unit/avro/test_avro_contract.py``
fails when a dataclass and its ``.avsc`` drift apart. Enums are ``str`` enums whose values are the Avro
symbols. ``event_time`` is a timezone-aware UTC ``datetime`` (Avro ``timestamp-millis``);
``event_id`` is a ``str`` UUID (Avro ``uuid`` logical type).

Ids of derived events are deterministic: :mod:`streamgrpo.avro.ids` makes every one of them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import os
import socket
import typing
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, ClassVar, TypeVar

NAMESPACE = "streamgrpo.events"

E = TypeVar("E", bound="Event")


def now_utc() -> datetime:
    # Avro timestamp-millis keeps milliseconds; truncate so round-trips compare equal.
    t = datetime.now(timezone.utc)
    return t.replace(microsecond=(t.microsecond // 1000) * 1000)


class ParseStatus(str, enum.Enum):
    STRICT = "STRICT"
    REPAIRED = "REPAIRED"
    FAILED = "FAILED"


class Decision(str, enum.Enum):
    CONTINUE = "CONTINUE"
    STOP = "STOP"


class RolloutStatus(str, enum.Enum):
    ANSWERED = "ANSWERED"
    MAX_TURNS = "MAX_TURNS"
    ERROR = "ERROR"


class RewardStatus(str, enum.Enum):
    OK = "OK"
    ERROR = "ERROR"


class GroupStatus(str, enum.Enum):
    COMPLETE = "COMPLETE"
    TIMED_OUT = "TIMED_OUT"


class AdapterStatus(str, enum.Enum):
    CANDIDATE = "CANDIDATE"
    CANARY = "CANARY"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    PRIMARY = "PRIMARY"
    ROLLED_BACK = "ROLLED_BACK"
    REJECTED = "REJECTED"
    RETIRED = "RETIRED"


class AvroRecord:
    """Mixin: conversion to and from the plain dicts fastavro reads and writes."""

    SCHEMA_NAME: ClassVar[str]

    def to_avro(self) -> dict[str, Any]:
        return {f.name: _to_avro(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_avro(cls: type[Any], data: dict[str, Any]) -> Any:
        hints = _hints(cls)  # type: ignore[arg-type]
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name in data:
                kwargs[f.name] = _from_avro(hints[f.name], data[f.name])
        return cls(**kwargs)


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _to_avro(value: Any) -> Any:
    if isinstance(value, list) and (not value or isinstance(value[0], _PLAIN)):
        return value  # fast path: token ids, logprobs (fastavro only reads them)
    if isinstance(value, AvroRecord):
        return value.to_avro()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_to_avro(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_avro(v) for k, v in value.items()}
    return value


_PLAIN = (int, float, str, bool, bytes)


def _from_avro(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        inner = [a for a in args if a is not type(None)]
        return _from_avro(inner[0], value)
    if origin is list:
        if args[0] in _PLAIN:
            return list(value)  # fast path: token ids, logprobs, answers
        return [_from_avro(args[0], v) for v in value]
    if origin is dict:
        if args[1] in _PLAIN:
            return dict(value)
        return {k: _from_avro(args[1], v) for k, v in value.items()}
    if isinstance(tp, type):
        if issubclass(tp, AvroRecord):
            return tp.from_avro(value)
        if issubclass(tp, enum.Enum):
            return tp(value)
        if tp is str and isinstance(value, uuid.UUID):
            return str(value)
        if tp is datetime and isinstance(value, datetime):
            return value.astimezone(timezone.utc)
    return value


@dataclass(frozen=True)
class Producer(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.Producer"
    service: str
    instance: str

    @classmethod
    def here(cls, service: str) -> Producer:
        return cls(service=service, instance=f"{socket.gethostname()}:{os.getpid()}")


@dataclass(frozen=True)
class Envelope(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.Envelope"
    event_id: str
    event_time: datetime
    producer: Producer
    task_id: str | None = None
    group_id: str | None = None
    rollout_id: str | None = None
    turn: int | None = None

    @classmethod
    def new(
        cls,
        service: str,
        *,
        event_id: str | None = None,
        task_id: str | None = None,
        group_id: str | None = None,
        rollout_id: str | None = None,
        turn: int | None = None,
    ) -> Envelope:
        return cls(
            event_id=event_id or str(uuid.uuid4()),
            event_time=now_utc(),
            producer=Producer.here(service),
            task_id=task_id,
            group_id=group_id,
            rollout_id=rollout_id,
            turn=turn,
        )


class Event(AvroRecord):
    """A top-level event: has an envelope and lives on a topic."""

    envelope: Envelope

    @property
    def event_id(self) -> str:
        return self.envelope.event_id


@dataclass(frozen=True)
class Demonstration(AvroRecord):
    """A worked solution: the planner's replies in order (each one JSON object), executed through the real tools."""

    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.Demonstration"
    steps: list[str]
    source: str


@dataclass(frozen=True)
class Task(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.Task"
    envelope: Envelope
    question: str
    source: str
    group_size: int
    ground_truths: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    demonstration: Demonstration | None = None


@dataclass(frozen=True)
class SamplingParams(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.SamplingParams"
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    seed: int | None = None
    constraint: str | None = None


@dataclass(frozen=True)
class RolloutRequest(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.RolloutRequest"
    envelope: Envelope
    question: str
    source: str
    rollout_index: int
    group_size: int
    adapter_name: str
    adapter_version: int
    max_turns: int
    sampling: SamplingParams
    metadata: dict[str, str] = field(default_factory=dict)
    demonstration: Demonstration | None = None


@dataclass(frozen=True)
class PlannerAction(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.PlannerAction"
    envelope: Envelope
    prompt_token_ids: list[int]
    action_text: str
    action_token_ids: list[int]
    behaviour_logprobs: list[float]
    adapter_name: str
    adapter_version: int
    sampling: SamplingParams
    parse_status: ParseStatus
    prompt_hash: str
    latency_ms: int
    tool: str | None = None
    is_final: bool = False
    engine: str | None = None
    role: str = "planner"
    demo_source: str | None = None


@dataclass(frozen=True)
class ToolObservation(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.ToolObservation"
    envelope: Envelope
    tool: str
    command: str
    output: str
    duration_ms: int
    executor_mode: str
    truncated: bool = False
    error: str | None = None
    prompt_hash: str = ""


@dataclass(frozen=True)
class Verdict(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.Verdict"
    envelope: Envelope
    decision: Decision
    analysis: str
    verifier_mode: str
    prompt_hash: str = ""


@dataclass(frozen=True)
class RolloutCompleted(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.RolloutCompleted"
    envelope: Envelope
    question: str
    source: str
    final_answer: str
    turns: int
    status: RolloutStatus
    group_size: int
    adapter_name: str
    adapter_version: int
    duration_ms: int
    error: str | None = None
    tool_calls: dict[str, int] = field(default_factory=dict)
    demo_source: str | None = None


@dataclass(frozen=True)
class RewardComponent(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.RewardComponent"
    name: str
    value: float
    weight: float


@dataclass(frozen=True)
class JudgeInfo(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.JudgeInfo"
    name: str
    rubric_hash: str
    model: str | None = None


@dataclass(frozen=True)
class Reward(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.Reward"
    envelope: Envelope
    score: float
    status: RewardStatus
    judge: JudgeInfo
    group_size: int
    adapter_name: str
    adapter_version: int
    turns: int
    rollout_status: RolloutStatus
    error: str | None = None
    components: list[RewardComponent] = field(default_factory=list)
    cached: bool = False
    tool_calls: dict[str, int] = field(default_factory=dict)
    demo_source: str | None = None


@dataclass(frozen=True)
class GroupClosed(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.GroupClosed"
    envelope: Envelope
    status: GroupStatus
    expected: int
    received: int
    reward_mean: float
    reward_std: float
    estimator: str
    trains: bool
    reason: str
    adapter_version: int
    missing_rollout_ids: list[str] = field(default_factory=list)
    samples: int | None = None


@dataclass(frozen=True)
class SampleTurn(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.SampleTurn"
    turn: int
    prompt_token_ids: list[int]
    action_token_ids: list[int]
    behaviour_logprobs: list[float]


@dataclass(frozen=True)
class TrainingSample(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.TrainingSample"
    envelope: Envelope
    turns: list[SampleTurn]
    advantage: float
    reward: float
    group_mean: float
    group_std: float
    group_size: int
    estimator: str
    adapter_name: str
    behaviour_version: int
    sampling: SamplingParams | None = None
    demo_source: str | None = None


@dataclass(frozen=True)
class OffsetRange(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.OffsetRange"
    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class AdapterPublished(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.AdapterPublished"
    envelope: Envelope
    adapter_name: str
    version: int
    uri: str
    sha256: str
    base_model: str
    trainer_step: int
    lineage: list[OffsetRange]
    parent_version: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # observability only (see the .avsc)
    drops: dict[str, int] | None = None  # by reason; None: a pre-v4 writer (lifecycle.published reads both)
    samples_dequeued: int | None = None
    max_staleness: int | None = None
    auto_promote: bool | None = None


@dataclass(frozen=True)
class AdapterPromoted(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.AdapterPromoted"
    envelope: Envelope
    adapter_name: str
    version: int
    previous_version: int
    reason: str
    metrics: dict[str, float] = field(default_factory=dict)
    decided_by: str = "ab-controller"


@dataclass(frozen=True)
class AdapterRolledBack(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.AdapterRolledBack"
    envelope: Envelope
    adapter_name: str
    version: int
    restored_version: int
    reason: str
    metrics: dict[str, float] = field(default_factory=dict)
    decided_by: str = "ab-controller"


@dataclass(frozen=True)
class AdapterApproved(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.AdapterApproved"
    envelope: Envelope
    adapter_name: str
    version: int
    by: str
    reason: str = ""


@dataclass(frozen=True)
class AdapterRejected(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.AdapterRejected"
    envelope: Envelope
    adapter_name: str
    version: int
    by: str
    reason: str = ""


@dataclass(frozen=True)
class AdapterVerdict(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.AdapterVerdict"
    envelope: Envelope
    adapter_name: str
    version: int
    primary_version: int
    verdict: str
    action: str
    reason: str
    metrics: dict[str, float] = field(default_factory=dict)
    decided_by: str = "ab-controller"


@dataclass(frozen=True)
class AdapterState(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.AdapterState"
    envelope: Envelope
    adapter_name: str
    version: int
    status: AdapterStatus
    updated_at: datetime
    parent_version: int | None = None
    base_model: str = ""
    uri: str = ""
    sha256: str = ""
    trainer_step: int = 0
    samples_trained: int = 0
    published_at: datetime | None = None
    lineage: list[OffsetRange] = field(default_factory=list)
    groups: int = 0
    reward_count: int = 0
    reward_mean: float | None = None
    success_rate: float | None = None
    eval_accuracy: float | None = None
    eval_ci_low: float | None = None
    eval_ci_high: float | None = None
    eval_task_set: str | None = None
    decision_reason: str = ""
    decided_by: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def version_key(self) -> str:
        """Record key on ``adapter-registry``: ``planner@v3``."""
        return f"{self.adapter_name}@v{self.version}"


@dataclass(frozen=True)
class EvaluationCompleted(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.EvaluationCompleted"
    envelope: Envelope
    adapter_name: str
    adapter_version: int
    task_set: str
    task_set_hash: str
    tasks: int
    samples_per_task: int
    temperature: float
    accuracy: float
    ci_low: float
    ci_high: float
    answered_rate: float
    parse_failure_rate: float
    tool_calls_per_task: float
    mean_turns: float
    tokens_per_task: float
    seconds: float
    judge: JudgeInfo
    pass_at_k: float | None = None
    trigger: str = "cli"
    per_kind: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def version_key(self) -> str:
        """Record key on ``evaluations``: ``planner@v3``."""
        return f"{self.adapter_name}@v{self.adapter_version}"


@dataclass(frozen=True)
class RewardMetrics(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.RewardMetrics"
    envelope: Envelope
    adapter_name: str
    adapter_version: int
    window_start: datetime
    window_end: datetime
    count: int
    mean_reward: float
    success_rate: float
    mean_turns: float
    tool_calls: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DeadLetter(Event):
    SCHEMA_NAME: ClassVar[str] = f"{NAMESPACE}.DeadLetter"
    envelope: Envelope
    source_topic: str
    source_partition: int
    source_offset: int
    reason_code: str
    reason: str
    consumer: str
    key: bytes | None = None
    value: bytes | None = None
    original_size: int | None = None
    original_sha256: str | None = None
    truncated: bool = False


#: Every top-level event type, by Avro full name.
EVENT_TYPES: dict[str, type[Event]] = {
    cls.SCHEMA_NAME: cls
    for cls in (
        Task,
        RolloutRequest,
        PlannerAction,
        ToolObservation,
        Verdict,
        RolloutCompleted,
        Reward,
        GroupClosed,
        TrainingSample,
        AdapterPublished,
        AdapterPromoted,
        AdapterRolledBack,
        AdapterApproved,
        AdapterRejected,
        AdapterVerdict,
        AdapterState,
        EvaluationCompleted,
        RewardMetrics,
        DeadLetter,
    )
}
#: Every record type (events and nested records), by Avro full name.
RECORD_TYPES: dict[str, type[AvroRecord]] = {
    **EVENT_TYPES,
    **{
        c.SCHEMA_NAME: c
        for c in (Producer, Envelope, SamplingParams, RewardComponent, JudgeInfo, SampleTurn, OffsetRange,
                  Demonstration)
    },
}
