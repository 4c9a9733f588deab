"""``create_app(settings, kafka)``: the ONLY place Faust is configured.

Nothing is bound at import time: a caller builds one app per process from explicit settings and
names the agents it runs (``settings.agents``; registry :data:`AGENTS`, each entry a module with a
``register(ctx)`` function). Every catalog topic is read and written as raw bytes
(``value_serializer="raw"``) and decoded with the project's :class:`~streamgrpo.avro.codec.Codec`;
a record that does not decode becomes a bounded ``DeadLetter`` on ``dead-letters`` (built by
:func:`streamgrpo.topics.dead_letter.dead_letter`: catalog topic, partition, offset, reason code
and a bounded copy) and the agent moves on: it never crashes on bad input. A bad record read by
several agents of one worker is dead-lettered once (``StreamsContext.dead_lettered``); no topic is consumed
by two Faust agents of one worker (``rewards``: the window hands Rewards to the metrics, see
:mod:`.metrics`); a dead letter that cannot be delivered is
retried with backoff, then pauses the agent with a loud error instead of crashing the worker.

Faust settings applied: broker from ``KafkaSettings.bootstrap`` (``streamgrpo-kafka://host:port``:
faust's aiokafka driver with a configurable fetch wait, see :mod:`.faust_transport`), the topic
prefix on every topic name and on the app id (so changelog topics of tables are prefixed too),
``processing_guarantee`` (``at_least_once`` by default; ``exactly_once`` only on Apache Kafka),
in-memory tables (RocksDB is not installed; state is recovered from the changelog topics on
restart), the web server off unless enabled, offsets from the earliest record for a new group.

What is not covered: SSL client certificates (SASL over SSL with the default trust store is).
"""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import faust
from faust.types import RecordMetadata

from streamgrpo import metrics
from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec
from streamgrpo.config import KafkaSettings
from streamgrpo.heartbeat import Heartbeat
from streamgrpo.streams import faust_transport
from streamgrpo.streams.config import AGENT_NAMES, StreamsSettings
from streamgrpo.streams.errors import StreamsConfigError
from streamgrpo.topics import catalog
from streamgrpo.topics.catalog import TOPICS, spec, topic_for
from streamgrpo.topics.clients import logical_name
from streamgrpo.topics.dead_letter import dead_letter as build_dead_letter
from streamgrpo.topics.dead_letter import deliver
from streamgrpo.topics.dedup import RecentIds
from streamgrpo.topics.producer import check_size
from streamgrpo.topics.received import decode_record

if TYPE_CHECKING:
    from streamgrpo.streams.archive import ArchiveWriter
    from streamgrpo.streams.follower import StreamsFollower
    from streamgrpo.streams.metrics import RewardWindows
    from streamgrpo.streams.window import Window

log = logging.getLogger(__name__)

#: agent name -> module with ``register(ctx: StreamsContext) -> None``
AGENTS: dict[str, str] = {
    "fanout": "streamgrpo.streams.fanout",
    "window": "streamgrpo.streams.window",
    "metrics": "streamgrpo.streams.metrics",
    "ab": "streamgrpo.streams.ab_controller",
    "archive": "streamgrpo.streams.archive",
}
assert set(AGENTS) == set(AGENT_NAMES)


def broker_urls(bootstrap: str | None, scheme: str = "kafka") -> list[str]:
    """``"h1:p1,h2:p2"`` -> ``["kafka://h1:p1", "kafka://h2:p2"]``."""
    if not bootstrap:
        raise StreamsConfigError(
            "no Kafka bootstrap address: set kafka.bootstrap (STREAMGRPO_BOOTSTRAP, or --bootstrap), "
            "or start the embedded broker with `streamgrpo broker up`"
        )
    return [f"{scheme}://{h.strip()}" for h in bootstrap.split(",") if h.strip()]


def session_timeout_s(settings: StreamsSettings, kafka: KafkaSettings) -> float:
    """The Faust worker's group session timeout: ``[streams] session_timeout_s``, else ``[kafka]``'s."""
    return settings.session_timeout_s if settings.session_timeout_s is not None else kafka.session_timeout_ms / 1000


def _credentials(kafka: KafkaSettings) -> Any:
    if kafka.security_protocol.startswith("SASL"):
        password = kafka.sasl_password.get_secret_value() if kafka.sasl_password else None
        return faust.SASLCredentials(
            username=kafka.sasl_username, password=password, mechanism=kafka.sasl_mechanism or "PLAIN",
            ssl_context=faust.auth.ssl.create_default_context() if kafka.security_protocol == "SASL_SSL" else None,
        )
    if kafka.security_protocol == "SSL":
        return faust.SSLCredentials(faust.auth.ssl.create_default_context())
    return None


class FaustMessage(Protocol):
    """The place of a record Faust delivered (``faust.types.Message``)."""

    topic: str
    partition: int
    offset: int


class FaustEvent(Protocol):
    """A raw-bytes record Faust delivered to an agent (``faust.types.EventT``)."""

    message: FaustMessage
    key: bytes | None
    value: bytes | None


class FaustStream(Protocol):
    """The stream an agent iterates (``faust.types.StreamT`` over raw-bytes records)."""

    def events(self) -> AsyncIterator[FaustEvent]: ...


class StreamsApp(faust.App):
    """The Faust app of a streams worker; carries the worker's typed :class:`StreamsContext`."""

    streamgrpo: StreamsContext | None = None


@dataclass
class StreamsContext:
    """What agents share: the app, settings, codec, topics by catalog name, counters, and the parts agents
    create and other agents (or tests) use: the follower, the window, the archive writer, the reward windows."""

    app: StreamsApp
    settings: StreamsSettings
    kafka: KafkaSettings
    codec: Codec
    topics: dict[str, faust.types.TopicT] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)
    dead_lettered: RecentIds = field(default_factory=RecentIds)
    heartbeat: Heartbeat = field(default_factory=Heartbeat.configured)
    follower: StreamsFollower | None = None
    window: Window | None = None
    archive: ArchiveWriter | None = None
    reward_windows: RewardWindows | None = None
    #: the agents of this worker (``create_app``'s selection), known before any registers
    agents: tuple[str, ...] = ()
    #: where the window hands each decoded Reward when the metrics agent runs in the same worker (one Faust
    #: channel per topic: see :mod:`streamgrpo.streams.metrics`)
    on_reward: Callable[[R.Reward], None] | None = None

    def name(self, topic: str) -> str:
        """The broker-side name of a catalog topic (prefix applied)."""
        return f"{self.kafka.topic_prefix}{topic}"

    def topic(self, *names: str, internal: bool = False, partitions: int | None = None) -> faust.types.TopicT:
        """A raw-bytes Faust topic over one or more catalog/internal topic names (prefix applied)."""
        return self.app.topic(
            *(self.name(n) for n in names), key_type=bytes, value_type=bytes, key_serializer="raw",
            value_serializer="raw", internal=internal, partitions=partitions,
        )

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] += n

    def must_yield(self) -> bool:
        """True while the worker stops or a rebalance revokes its partitions: an agent waiting on anything but
        its input (the fan-out's admission) stops waiting and hands its event back (:meth:`hand_back`)."""
        return faust_transport.must_yield(self.app)

    def hand_back(self, ev: FaustEvent) -> None:
        """Leave ``ev`` unacknowledged: its offset is not committed and it is delivered again after the
        rebalance or restart (to this worker or another); the stop or rebalance no longer waits for it."""
        faust_transport.hand_back(self.app, ev.message)

    async def send(self, event: R.Event, topic: str | None = None,
                   partition: int | None = None) -> Awaitable[RecordMetadata]:
        """Encode and send ``event`` to its catalog topic; returns the delivery future (await it to wait)."""
        ts = spec(topic) if topic else topic_for(event)
        value = self.codec.encode(event, self.name(ts.name))
        check_size(event, value)
        metrics.current().inc(metrics.EVENTS_PRODUCED, topic=ts.name)
        return await self.topics[ts.name].send(key=ts.key_of(event).encode(), value=value, partition=partition,
                                               force=True)

    async def decode(self, ev: FaustEvent, expected: tuple[type[R.Event], ...]) -> R.Event | None:
        """Decode a Faust event's raw value; on failure dead-letter it and return ``None``."""
        msg = ev.message
        topic = logical_name(self.kafka, msg.topic)
        metrics.current().inc(metrics.EVENTS_CONSUMED, topic=topic, group=self.settings.app_id)
        event, code, reason = decode_record(self.codec, topic, ev.value)
        if event is not None and not isinstance(event, expected):
            event, code, reason = None, "wrong_event_type", f"{type(event).__name__} does not belong on {msg.topic}"
        if event is None:
            await self.dead_letter(msg.topic, msg.partition, msg.offset, ev.key, ev.value, code or "decode_error",
                                   reason or "")
        return event

    async def dead_letter(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                          code: str, reason: str) -> None:
        """Dead-letter one record (``topic`` physical or catalog name), once per worker; delivered before return."""
        letter = build_dead_letter(service="streams", consumer=self.app.conf.id, topic=logical_name(self.kafka, topic),
                                   partition=partition, offset=offset, key=key, value=value, reason_code=code,
                                   reason=reason)
        if self.dead_lettered.seen(letter.event_id):
            return
        self.count(f"dead_letters.{code}")
        metrics.current().inc(metrics.DEAD_LETTERS, topic=letter.source_topic, reason=code)
        log.warning("dead-lettering %s[%d]@%d: %s", topic, partition, offset, letter.reason)

        async def attempt() -> None:
            await (await self.send(letter))

        await deliver(attempt, f"the dead letter of {topic}[{partition}]@{offset}", alive=self.heartbeat.beat)


#: Seconds between liveness beats of a streams worker (its event loop is alive and timers run).
HEARTBEAT_INTERVAL_S = 5.0


def loop_gauges(ctx: StreamsContext) -> None:
    """Set the gauges read from this worker's view of the loop: groups in flight, versions per role."""
    m = metrics.current()
    if ctx.follower is None:  # no agent that follows the loop runs here
        return
    view = ctx.follower.view
    m.set(metrics.GROUPS_OPEN, view.in_flight)
    line = view.adapters(ctx.settings.adapter_name)
    m.set(metrics.ADAPTER_VERSION, line.latest, role="published")
    m.set(metrics.ADAPTER_VERSION, line.primary, role="primary")
    m.set(metrics.ADAPTER_VERSION, line.canary or 0, role="canary")


def create_app(settings: StreamsSettings, kafka: KafkaSettings, agents: list[str] | None = None) -> StreamsApp:
    """Build the Faust app and register the selected agents (default: ``settings.agents``).

    The :class:`StreamsContext` is available afterwards as ``app.streamgrpo``.
    """
    chosen = list(agents if agents is not None else settings.agents)
    unknown = [a for a in chosen if a not in AGENTS]
    if unknown:
        raise StreamsConfigError(f"unknown agents {unknown}; choose from {', '.join(AGENTS)} (--only / streams.agents)")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    app = StreamsApp(
        f"{kafka.topic_prefix}{settings.app_id}",
        broker=broker_urls(kafka.bootstrap, faust_transport.register()),
        broker_credentials=_credentials(kafka),
        broker_client_id=kafka.client_id,
        store="memory://",
        processing_guarantee=settings.processing_guarantee,
        web_enabled=settings.web_enabled,
        web_port=settings.web_port,
        datadir=str(settings.data_dir),
        topic_partitions=spec(catalog.REWARDS).partitions,
        table_standby_replicas=settings.standby_replicas,
        broker_commit_interval=settings.commit_interval_s,
        consumer_auto_offset_reset="earliest",
        broker_rebalance_timeout=settings.rebalance_timeout_s,
        broker_session_timeout=session_timeout_s(settings, kafka),
        broker_heartbeat_interval=min(3.0, session_timeout_s(settings, kafka) / 3),
        producer_acks=-1,
        autodiscover=False,
        worker_redirect_stdouts=False,
    )
    ctx = StreamsContext(app=app, settings=settings, kafka=kafka, codec=Codec(kafka.schema_registry_url),
                         agents=tuple(chosen))
    ctx.topics = {t.name: ctx.topic(t.name) for t in TOPICS}
    app.streamgrpo = ctx
    for name in chosen:
        importlib.import_module(AGENTS[name]).register(ctx)
    async def beat() -> None:
        ctx.heartbeat.beat()
        loop_gauges(ctx)

    app.timer(HEARTBEAT_INTERVAL_S, name="streamgrpo.heartbeat")(beat)
    log.info("streams app %s: agents %s on %s", app.conf.id, ", ".join(chosen), kafka.bootstrap)
    return app
