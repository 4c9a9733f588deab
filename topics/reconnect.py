"""Start a Kafka client once its broker answers, instead of exiting into a restart loop.

A service may start before its broker (k8s starts pods in any order; the broker may be restarting). An
aiokafka client's ``start()`` fails at once when no bootstrap server answers; :func:`start_when_reachable`
retries it with backoff (1, 2, 4 ... 30 s) until it succeeds or the service is asked to stop. The
client's own "Unable connect" line of every attempt is what the service logs, bounded by
:mod:`streamgrpo.topics.broker_logs` (the first one with the broker address, then one summary per
interval). Once started, the clients retry on their own while the broker is away.

What is not covered: any other start failure (authentication, a missing topic, a bug) propagates as before;
readers that must answer now (``read_topic``, ``tail`` without ``--follow``) do not wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiokafka.errors import KafkaConnectionError

from streamgrpo.topics.dead_letter import Backoff

#: Waits between start attempts: 1, 2, 4 ... 30 s.
START_BACKOFF = Backoff(first_s=1.0, max_s=30.0)
#: How often a wait looks at the stop signal.
STOP_CHECK_S = 0.2


log = logging.getLogger(__name__)


class _Stoppable(Protocol):
    async def stop(self) -> None: ...


class StopSignal(Protocol):
    """``asyncio.Event`` or ``threading.Event``: set once the caller should stop."""

    def is_set(self) -> bool: ...


async def start_when_reachable(attempt: Callable[[], Awaitable[None]], *, stop: StopSignal | None = None,
                               alive: Callable[[], object] | None = None, backoff: Backoff = START_BACKOFF) -> bool:
    """Run ``attempt`` until it succeeds (True) or ``stop`` is set while waiting (False). Only
    ``KafkaConnectionError`` (no bootstrap server answered) is waited out; ``attempt`` must leave nothing
    started when it raises it. ``alive`` is called while waiting (a liveness heartbeat: waiting is not hung)."""
    failures = 0
    while True:
        if stop is not None and stop.is_set():
            return False
        try:
            await attempt()
            return True
        except KafkaConnectionError:
            failures += 1
        loop = asyncio.get_running_loop()
        until = loop.time() + backoff.delay(failures)
        while (left := until - loop.time()) > 0:
            if stop is not None and stop.is_set():
                return False
            if alive is not None:
                alive()
            await asyncio.sleep(min(STOP_CHECK_S, left))


async def stop_client(client: _Stoppable) -> None:
    """``client.stop()`` of an aiokafka client, without the CancelledError aiokafka 0.14 raises when its broker is
    gone: the consumer's fetcher cancels its pending fetches on close and awaits each, and a fetch sleeping in its
    retry backoff after a failed request (``_proc_fetch_request``) does not catch its cancellation, so ``stop()``
    raises CancelledError although nobody cancelled the caller (a service stopped during a broker outage died
    with a traceback). A cancellation of the caller itself still propagates."""
    try:
        await client.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.debug("an aiokafka client stopped with its broker gone (a pending fetch was cancelled)")
