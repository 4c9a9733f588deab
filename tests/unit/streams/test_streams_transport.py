"""Guard of the one third-party adaptation (see streams/faust_transport.py): fails when faust or
aiokafka change what it relies on."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import aiokafka
import faust
from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import ConsumerMessage

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


def test_a_handed_back_message_is_never_acked_nor_waited_for() -> None:
    """What the fan-out's yield to stop/rebalance relies on: the stream's ack after the agent moves on does not
    ack a handed-back message (no commit past it) and ``wait_empty`` no longer waits for it."""

    async def run() -> None:
        app = faust.App("canary", broker="kafka://127.0.0.1:1")
        consumer = app.consumer
        tp = TP("tasks", 0)
        held = ConsumerMessage("tasks", 0, 5, 0.0, None, [], b"k", b"v", None, tp=tp)
        consumer.track_message(held)  # what the conductor does before delivery
        held.incref()  # the stream's reference
        assert held in consumer.unacked
        faust_transport.hand_back(app, held)
        assert held not in consumer.unacked
        assert held.ack(consumer) is False and not held.acked  # the stream's ack in its finally
        assert list(consumer._acked[tp]) == []  # nothing to commit
        await asyncio.wait_for(consumer.wait_empty(), 5)

    asyncio.run(run())
    # the C iterator that inlines Message.ack acks only when the refcount reaches zero
    pyx = (Path(faust.__file__).parent / "_cython" / "streams.pyx").read_text()
    after = pyx[pyx.index("cpdef object after"):]
    assert "refcount -= 1" in after and "if not refcount:" in after


def test_must_yield_follows_faust_flow_control_and_stop() -> None:
    async def run() -> None:
        app = faust.App("canary", broker="kafka://127.0.0.1:1")
        app.flow_control.resume()  # streams running
        assert not faust_transport.must_yield(app)
        app.flow_control.suspend()  # what a rebalance's revoke and a stop do before wait_empty
        assert faust_transport.must_yield(app)
        app.flow_control.resume()
        app._stopped.set()  # Service.stop() sets it before on_stop()
        assert faust_transport.must_yield(app)

    asyncio.run(run())


def test_assigned_is_the_consumers_assignment_whichever_assignor_faust_chose() -> None:
    """Why :func:`faust_transport.assigned` reads the consumer, not ``app.assignor``: without a changelog table (and
    with ``[streams] standby_replicas`` 0, the default) Faust's driver hands the group to aiokafka's round-robin
    assignor, so Faust's assignor record is never filled. Before the
    consumer starts, ``assigned`` is empty instead of raising. The assignment itself is covered on a real broker by
    tests/integration/test_streams_adapter_refusals.py (a worker without the window leads)."""
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    async def run() -> None:
        app = faust.App("canary", broker="kafka://127.0.0.1:1", table_standby_replicas=0)  # as create_app sets it
        thread = app.consumer._thread  # type: ignore[attr-defined]
        await thread._create_worker_consumer(app.transport).stop()
        assert thread._assignor is RoundRobinPartitionAssignor
        assert faust_transport.assigned(app) == set() == app.assignor.assigned_actives()

    asyncio.run(run())
