"""Guard of the one third-party adaptation (see streams/faust_transport.py): fails when faust or
aiokafka change what it relies on."""

from __future__ import annotations

import asyncio
import inspect

import aiokafka
from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_aiokafka

from streamgrpo.streams import faust_transport


def test_versions_are_the_checked_ones() -> None:
    assert faust_transport.supported(), "faust/aiokafka changed: re-check streams/faust_transport.py"


def test_aiokafka_reads_the_private_fetch_wait_on_start() -> None:
    async def build() -> aiokafka.AIOKafkaConsumer:
        return aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1", fetch_max_wait_ms=321)

    consumer = asyncio.run(build())
    assert consumer._fetch_max_wait_ms == 321
    assert "fetch_max_wait_ms=self._fetch_max_wait_ms" in inspect.getsource(aiokafka.AIOKafkaConsumer.start)


def test_faust_hooks_exist_and_scheme_resolves() -> None:
    assert hasattr(faust_aiokafka.AIOKafkaConsumerThread, "_create_worker_consumer")
    assert hasattr(faust_aiokafka.Consumer, "_new_consumer_thread")
    scheme = faust_transport.register()
    assert drivers.by_url(f"{scheme}://127.0.0.1:9092") is faust_transport.Transport
