"""The topic catalog: every topic the project reads or writes, declared once.

A :class:`TopicSpec` says how a topic is created (partitions, replication, retention, cleanup
policy), how its records are keyed (``key_field``: a dotted path into the event) and which event
types it carries. ``streamgrpo topics ensure`` creates missing topics and reports drift;
``k8s/base/topics/`` holds the same specs as Strimzi ``KafkaTopic`` resources, generated from here
(``python k8s/gen_topics.py``) and drift-tested.

Partition counts are sized for the embedded broker and a small cluster. To raise one in production,
change it here and on the broker (partitions can grow, never shrink; keys then move partitions, so do
it between runs); ``topics ensure`` reports a broker whose counts differ from this catalog as drift.

``writers`` names the principals (:data:`PRINCIPALS`) that may produce to a topic. It is the one
declaration of who writes what: ``k8s/gen_topics.py`` renders it as Strimzi ``KafkaUser`` ACLs
(``k8s/components/kafka-acl``) and ``tests/unit/topics/test_catalog_writers.py`` checks it against the
modules that construct each event. It does not restrict anything by itself: a broker without
authorization (the embedded one, a plain listener) lets any client write any topic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: importing the catalog stays cheap (the CLI's --help formats topic names)
    from streamgrpo.avro.records import Event

DAY_MS = 24 * 3600 * 1000

#: The Kafka principals, one per kind of process: the five loop services, the MCP server
#: (``streamgrpo serve``) and ``operator`` (a person's CLI: ``submit``, ``label``, ``adapters``,
#: ``eval``, and the ``topics ensure`` Job). Rollout workers run model-written code in a sandbox
#: and the judge and the MCP server face untrusted input: none of them may write ``adapter-events``.
PRINCIPALS: tuple[str, ...] = ("streams", "judge", "rollout", "trainer", "evaluator", "mcp", "operator")


@dataclass(frozen=True)
class TopicSpec:
    """How one topic is created and what it carries."""

    name: str
    partitions: int
    key_field: str  # dotted path into the event (a field or property), e.g. "envelope.group_id"
    event_types: tuple[str, ...]  # Avro full names the topic carries
    retention_ms: int = 7 * DAY_MS  # -1 = forever
    cleanup_policy: str = "delete"
    replication: int = 1
    doc: str = ""
    extra_config: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    writers: tuple[str, ...] = ()  # principals (PRINCIPALS) allowed to produce to this topic

    def __post_init__(self) -> None:
        unknown = sorted(set(self.writers) - set(PRINCIPALS))
        if unknown:
            raise ValueError(f"topic {self.name}: unknown writer(s) {unknown}; principals are {', '.join(PRINCIPALS)}")

    def config(self) -> dict[str, str]:
        """Broker-side topic configuration."""
        cfg = {"cleanup.policy": self.cleanup_policy, "retention.ms": str(self.retention_ms)}
        cfg.update(dict(self.extra_config))
        return cfg

    def key_of(self, event: Event) -> str:
        """The record key of ``event`` on this topic (``key_field`` resolved on the event)."""
        value: Any = event
        for part in self.key_field.split("."):
            value = getattr(value, part)
        if value is None:
            raise ValueError(f"{type(event).__name__} has no {self.key_field}; it cannot be keyed on {self.name}")
        return str(value)


#: Topic names, the one spelling of each: product code refers to these, never to a literal (a test checks).
TASKS = "tasks"
ROLLOUT_REQUESTS = "rollout-requests"
PLANNER_ACTIONS = "planner-actions"
TOOL_OBSERVATIONS = "tool-observations"
VERDICTS = "verdicts"
ROLLOUTS = "rollouts"
REWARDS = "rewards"
GROUPS = "groups"
TRAINING_SAMPLES = "training-samples"
ADAPTER_EVENTS = "adapter-events"
ADAPTER_REGISTRY = "adapter-registry"
EVALUATIONS = "evaluations"
REWARD_METRICS = "reward-metrics"
DEAD_LETTERS = "dead-letters"


def _ev(*names: str) -> tuple[str, ...]:
    return tuple(f"streamgrpo.events.{n}" for n in names)


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(TASKS, 3, "envelope.task_id", _ev("Task"), 30 * DAY_MS,
              doc="Tasks from upstream services; the judge also reads ground truth here.",
              writers=("operator", "mcp")),
    TopicSpec(ROLLOUT_REQUESTS, 3, "envelope.group_id", _ev("RolloutRequest"),
              doc="One request per rollout; the whole group shares one adapter version.",
              writers=("streams",)),
    TopicSpec(PLANNER_ACTIONS, 3, "envelope.group_id", _ev("PlannerAction"),
              doc="Planner decisions with token ids and behaviour logprobs.",
              writers=("rollout", "mcp")),
    TopicSpec(TOOL_OBSERVATIONS, 3, "envelope.group_id", _ev("ToolObservation"), doc="Tool calls and results.",
              writers=("rollout", "mcp")),
    TopicSpec(VERDICTS, 3, "envelope.group_id", _ev("Verdict"), doc="Verifier stop/continue decisions.",
              writers=("rollout", "mcp")),
    TopicSpec(ROLLOUTS, 3, "envelope.group_id", _ev("RolloutCompleted"), doc="One completion per rollout.",
              writers=("rollout", "mcp")),
    TopicSpec(REWARDS, 3, "envelope.group_id", _ev("Reward"), doc="Judge scores with provenance.",
              writers=("judge", "operator", "mcp")),
    TopicSpec(GROUPS, 3, "envelope.group_id", _ev("GroupClosed"), doc="Closed advantage windows.",
              writers=("streams",)),
    TopicSpec(TRAINING_SAMPLES, 3, "envelope.group_id", _ev("TrainingSample"),
              doc="One sample per trained rollout: every planner turn + its trajectory advantage.",
              writers=("streams",)),
    TopicSpec(ADAPTER_EVENTS, 1, "adapter_name",
              _ev("AdapterPublished", "AdapterPromoted", "AdapterRolledBack", "AdapterApproved", "AdapterRejected",
                  "AdapterVerdict"),
              retention_ms=-1, doc="Adapter lifecycle; kept forever (the audit trail of what served what).",
              writers=("trainer", "streams", "operator")),
    TopicSpec(ADAPTER_REGISTRY, 1, "version_key", _ev("AdapterState"), retention_ms=-1,
              cleanup_policy="compact",
              doc="Current state of every adapter version (the fold of adapter-events, evaluations and reward "
                  "metrics); compacted, keyed '<adapter>@v<version>'.",
              writers=("streams",)),
    TopicSpec(EVALUATIONS, 1, "version_key", _ev("EvaluationCompleted"), retention_ms=-1,
              doc="Held-out accuracy of adapter versions (streamgrpo eval and the run's evaluator); kept forever.",
              writers=("evaluator", "operator")),
    TopicSpec(REWARD_METRICS, 1, "adapter_name", _ev("RewardMetrics"), 30 * DAY_MS,
              doc="Reward statistics per adapter version and tumbling window.",
              writers=("streams",)),
    TopicSpec(DEAD_LETTERS, 1, "source_topic", _ev("DeadLetter"), 30 * DAY_MS,
              doc="Records a consumer could not process, with the reason.",
              writers=("streams", "judge", "rollout", "trainer")),
)

CATALOG: dict[str, TopicSpec] = {t.name: t for t in TOPICS}


def spec(name: str) -> TopicSpec:
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown topic {name!r}; known topics: {', '.join(CATALOG)}") from None


def topic_for(event: Event) -> TopicSpec:
    """The one topic an event type belongs to."""
    for t in TOPICS:
        if event.SCHEMA_NAME in t.event_types:
            return t
    raise KeyError(f"no topic carries {event.SCHEMA_NAME}")
