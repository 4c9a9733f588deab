"""``create_app(settings, kafka)``: the ONLY place Faust is configured.

Nothing is bound at import time: a caller builds one app per process from explicit settings and
names the agents it runs (``settings.agents``; registry :data:`AGENTS`, each entry a module with a
``register(ctx)`` function). Every catalog topic is read and written as raw bytes
(``value_serializer="raw"``) and decoded with the project's :class:`~streamgrpo.avro.codec.Codec`;
a record that does not decode becomes a ``DeadLetter`` on ``dead-letters`` (source
topic/partition/offset and the reason) and the agent moves on: it never crashes on bad input.

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
from dataclasses import dataclass, field
from typing import Any

import faust

from streamgrpo import heartbeat
from streamgrpo.avro import records as R
from streamgrpo.avro.codec import Codec
from streamgrpo.avro.errors import DecodeError
from streamgrpo.config import KafkaSettings
from streamgrpo.streams import faust_transport, ids
from streamgrpo.streams.config import AGENT_NAMES, StreamsSettings
from streamgrpo.streams.errors import StreamsConfigError
from streamgrpo.topics.catalog import TOPICS, spec

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


@dataclass
class StreamsContext:
    """What agents share: the app, settings, codec, topics by catalog name, and counters."""

    app: faust.App
    settings: StreamsSettings
    kafka: KafkaSettings
    codec: Codec
    topics: dict[str, Any] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)

    def name(self, topic: str) -> str:
        """The broker-side name of a catalog topic (prefix applied)."""
        return f"{self.kafka.topic_prefix}{topic}"

    def topic(self, *names: str, internal: bool = False, partitions: int | None = None) -> Any:
        """A raw-bytes Faust topic over one or more catalog/internal topic names (prefix applied)."""
        return self.app.topic(
            *(self.name(n) for n in names), key_type=bytes, value_type=bytes, key_serializer="raw",
            value_serializer="raw", internal=internal, partitions=partitions,
        )

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] += n

    async def send(self, event: R.Event, topic: str | None = None, partition: int | None = None) -> Any:
        """Encode and send ``event`` to its catalog topic; returns the delivery future (await it to wait)."""
        ts = spec(topic) if topic else _topic_for(event)
        return await self.topics[ts.name].send(
            key=ts.key_of(event).encode(), value=self.codec.encode(event, self.name(ts.name)),
            partition=partition, force=True,
        )

    async def decode(self, ev: Any, expected: tuple[type[R.Event], ...]) -> R.Event | None:
        """Decode a Faust event's raw value; on failure dead-letter it and return ``None``."""
        msg = ev.message
        try:
            event = self.codec.decode(ev.value)
            if not isinstance(event, expected):
                raise DecodeError(f"{type(event).__name__} does not belong on {msg.topic}")
            return event
        except DecodeError as exc:
            await self.dead_letter(msg.topic, msg.partition, msg.offset, ev.key, ev.value, "decode_error", str(exc))
            return None

    async def dead_letter(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                          code: str, reason: str) -> None:
        self.count(f"dead_letters.{code}")
        log.warning("dead-lettering %s[%d]@%d: %s", topic, partition, offset, reason)
        dl = R.DeadLetter(
            envelope=R.Envelope.new("streams", event_id=ids.dead_letter_id(topic, partition, offset)),
            source_topic=topic, source_partition=partition, source_offset=offset, reason_code=code,
            reason=reason, consumer=self.app.conf.id, key=key, value=value,
        )
        await self.send(dl)


def _topic_for(event: R.Event) -> Any:
    for t in TOPICS:
        if event.SCHEMA_NAME in t.event_types:
            return t
    raise KeyError(f"no topic carries {event.SCHEMA_NAME}")


#: Seconds between liveness beats of a streams worker (its event loop is alive and timers run).
HEARTBEAT_INTERVAL_S = 5.0


async def _heartbeat() -> None:
    heartbeat.beat()


def create_app(settings: StreamsSettings, kafka: KafkaSettings, agents: list[str] | None = None) -> faust.App:
    """Build the Faust app and register the selected agents (default: ``settings.agents``).

    The :class:`StreamsContext` is available afterwards as ``app.streamgrpo``.
    """
    chosen = list(agents if agents is not None else settings.agents)
    unknown = [a for a in chosen if a not in AGENTS]
    if unknown:
        raise StreamsConfigError(f"unknown agents {unknown}; choose from {', '.join(AGENTS)} (--only / streams.agents)")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        f"{kafka.topic_prefix}{settings.app_id}",
        broker=broker_urls(kafka.bootstrap, faust_transport.register()),
        broker_credentials=_credentials(kafka),
        broker_client_id=kafka.client_id,
        store="memory://",
        processing_guarantee=settings.processing_guarantee,
        web_enabled=settings.web_enabled,
        web_port=settings.web_port,
        datadir=str(settings.data_dir),
        topic_partitions=spec("rewards").partitions,
        table_standby_replicas=settings.standby_replicas,
        broker_commit_interval=settings.commit_interval_s,
        consumer_auto_offset_reset="earliest",
        broker_rebalance_timeout=settings.rebalance_timeout_s,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.session_timeout_s / 3),
        producer_acks=-1,
        autodiscover=False,
        worker_redirect_stdouts=False,
    )
    ctx = StreamsContext(app=app, settings=settings, kafka=kafka, codec=Codec(kafka.schema_registry_url))
    ctx.topics = {t.name: ctx.topic(t.name) for t in TOPICS}
    app.streamgrpo = ctx  # type: ignore[attr-defined]
    for name in chosen:
        importlib.import_module(AGENTS[name]).register(ctx)
    app.timer(HEARTBEAT_INTERVAL_S, name="streamgrpo.heartbeat")(_heartbeat)
    log.info("streams app %s: agents %s on %s", app.conf.id, ", ".join(chosen), kafka.bootstrap)
    return app
