"""A consumer stopped while its broker is gone: aiokafka 0.14's ``stop()`` raises CancelledError when a fetch sleeps
in its retry backoff (its fetcher cancels the fetch on close and awaits it), which killed a rollout worker with
a traceback when ``run`` stopped it during a broker outage. :func:`~streamgrpo.topics.reconnect.stop_client`
(used by the services' consumer and the followers) stops it quietly, and a caller that is itself cancelled still
sees its cancellation. A real Tansu broker, SIGKILLed under a fetching consumer; a 30 s retry backoff makes the
fetch sleep in it when the consumer stops."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from streamgrpo.config import KafkaSettings
from streamgrpo.topics.broker import EmbeddedBroker
from streamgrpo.topics.consumer import EventConsumer
from streamgrpo.topics.reconnect import stop_client

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]


async def _fetching(bootstrap: str) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, fetch_max_wait_ms=100,
                                retry_backoff_ms=30_000)
    await consumer.start()
    consumer.assign([TopicPartition("t", 0)])
    await consumer.seek_to_beginning()
    await consumer.getmany(timeout_ms=300)  # fetches in flight
    return consumer


async def _after_broker_death(broker: EmbeddedBroker, polls: list[Callable[[], Awaitable[object]]]) -> None:
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGKILL)
    broker.proc.wait(10)
    broker.proc = None
    for _ in range(20):  # the pending fetch fails and sleeps in its 30 s backoff
        for poll in polls:
            try:
                await poll()
            except KafkaError:
                pass


def test_a_consumer_stopped_without_its_broker_stops_quietly(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "broker") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("t", 1, 1)]).values():
            f.result(10)

        async def scenario() -> tuple[BaseException | None, BaseException | None, bool]:
            raw, quiet, cancelled = [await _fetching(broker.bootstrap) for _ in range(3)]
            await _after_broker_death(broker, [lambda c=c: c.getmany(timeout_ms=100) for c in (raw, quiet, cancelled)])
            try:
                await raw.stop()  # aiokafka's own stop: the bug this works around
                raw_error = None
            except asyncio.CancelledError as exc:
                raw_error = exc
            try:
                await stop_client(quiet)
                quiet_error = None
            except BaseException as exc:  # noqa: BLE001 - whatever escapes is the failure shown
                quiet_error = exc
            task = asyncio.ensure_future(stop_client(cancelled))
            await asyncio.sleep(0)
            task.cancel()  # a caller cancelled while it stops still sees its cancellation
            try:
                await task
                seen = False
            except asyncio.CancelledError:
                seen = True
            return raw_error, quiet_error, seen

        raw_error, quiet_error, cancellation_seen = asyncio.run(scenario())
        assert isinstance(raw_error, asyncio.CancelledError), "aiokafka's stop() no longer raises: stop_client may go"
        assert quiet_error is None, repr(quiet_error)
        assert cancellation_seen


def test_the_services_consumer_stops_quietly_without_its_broker(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "broker") as broker:
        kafka = KafkaSettings(bootstrap=broker.bootstrap, topic_prefix="q.")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("q.tasks", 1, 1)]).values():
            f.result(10)

        async def scenario() -> None:
            async with EventConsumer(kafka, group_id="q.g", topics=["tasks"], service="test",
                                     retry_backoff_ms=30_000) as consumer:
                await consumer.poll(10, 500)
                await _after_broker_death(broker, [lambda: consumer.poll(10, 100)])

        asyncio.run(scenario())  # before: CancelledError out of __aexit__
