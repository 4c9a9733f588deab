"""The Faust transport used by streamgrpo: faust's aiokafka driver with a configurable fetch wait.

Why: Faust 0.15 hard-codes ``fetch_max_wait_ms=1500`` for its worker consumer. Apache Kafka answers
a waiting fetch as soon as data arrives, so the value only bounds idle polling there; the embedded
Tansu broker does NOT wake a waiting fetch, so every hop would cost up to 1.5 s of latency.
:data:`SCHEME` (``streamgrpo-kafka://``) selects this driver; its consumer thread sets aiokafka's
fetch wait from ``StreamsSettings.fetch_max_wait_ms``.

This is the one adaptation of a third-party internal in streams/: it sets the private attribute
``AIOKafkaConsumer._fetch_max_wait_ms`` (read by ``AIOKafkaConsumer.start()``) before the consumer
starts, and is guarded by :data:`SUPPORTED` plus ``tests/unit/streams/test_streams_transport.py``,
which fails when faust or aiokafka change what it relies on.

Yielding to stop and rebalance (:func:`must_yield`, :func:`hand_back`; public Faust API only, guarded by the
same test): before a stop or a rebalance, Faust suspends its flow control and then waits until every event an
agent has started is acknowledged (``Consumer.wait_empty``). An agent that waits on something else (the
fan-out's admission, which frees only when the window, paused by that rebalance, closes groups) would hold
both forever. Such an agent checks :func:`must_yield` while it waits and, when it is true, hands its event back:
one extra reference keeps the message from ever being acknowledged (so its offset is never committed and the
event is delivered again after the rebalance or restart), and it leaves the set ``wait_empty`` waits on.

Which partitions this worker holds (:func:`assigned`; public Faust API, guarded by the same test): the consumer's
Kafka assignment, which Faust's own leader election reads too. NOT ``app.assignor.assigned_actives()``: Faust 0.15's
aiokafka driver installs Faust's partition assignor only in an app with changelog tables or standby replicas
(``AIOKafkaConsumerThread._create_worker_consumer``) and aiokafka's round-robin assignor otherwise, so in a worker
without a table (any agent selection without ``window``) that record stays empty while the consumer holds its
partitions.
"""

from __future__ import annotations

from typing import Any

import aiokafka
import faust
from faust.exceptions import ConsumerNotStarted
from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

SCHEME = "streamgrpo-kafka"
#: (faust, aiokafka) version prefixes this adaptation was checked against.
SUPPORTED = (("0.15",), ("0.11", "0.12", "0.13", "0.14"))


def supported() -> bool:
    return faust.__version__.startswith(SUPPORTED[0]) and aiokafka.__version__.startswith(SUPPORTED[1])


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        ctx = getattr(self.app, "streamgrpo", None)
        if ctx is not None and supported():
            consumer._fetch_max_wait_ms = ctx.settings.fetch_max_wait_ms
        return consumer


class Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer


def must_yield(app: faust.App) -> bool:
    """True while ``app`` stops or a rebalance revokes its partitions (Faust's flow control is suspended)."""
    return bool(app.should_stop) or not app.flow_control.is_active()


def hand_back(app: faust.App, message: Any) -> None:
    """Leave the ``faust.types.Message`` an agent is processing unacknowledged for good (never committed, so
    delivered again after the rebalance or restart) and let ``wait_empty`` stop waiting for it."""
    message.incref()
    app.consumer.unacked.discard(message)


def assigned(app: faust.App) -> set[TP]:
    """The partitions ``app``'s consumer holds now (empty before it started), whichever assignor the driver chose."""
    try:
        return set(app.consumer.assignment())
    except ConsumerNotStarted:
        return set()


def register() -> str:
    """Make ``streamgrpo-kafka://`` resolve to :class:`Transport` (idempotent); returns the scheme."""
    drivers.TRANSPORTS.aliases.setdefault(SCHEME, f"{__name__}:Transport")
    return SCHEME
