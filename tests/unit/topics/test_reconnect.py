""":func:`~streamgrpo.topics.reconnect.start_when_reachable`: a start that cannot reach the broker is retried with
backoff, yields to a stop signal while it waits, and lets any other error through."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka.errors import KafkaConnectionError, TopicAuthorizationFailedError

from streamgrpo.topics.dead_letter import Backoff
from streamgrpo.topics.reconnect import start_when_reachable

FAST = Backoff(first_s=0.05, max_s=0.2)


def test_an_unreachable_broker_is_waited_for_with_backoff_until_a_start_succeeds() -> None:
    attempts: list[float] = []
    beats: list[float] = []

    async def attempt() -> None:
        attempts.append(time.monotonic())
        if len(attempts) < 4:
            raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9, <AddressFamily.AF_INET: 2>)]")

    assert asyncio.run(start_when_reachable(attempt, alive=lambda: beats.append(1), backoff=FAST)) is True
    gaps = [b - a for a, b in zip(attempts, attempts[1:], strict=False)]
    assert len(attempts) == 4 and beats
    assert gaps[0] >= 0.045 and gaps[1] >= 0.095 and gaps[2] >= 0.19  # 0.05, 0.1, 0.2 s


def test_a_stop_while_waiting_gives_up_without_another_attempt() -> None:
    attempts = 0

    async def attempt() -> None:
        nonlocal attempts
        attempts += 1
        raise KafkaConnectionError("down")

    async def main() -> tuple[bool, float]:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.3, stop.set)
        started = time.monotonic()
        ok = await start_when_reachable(attempt, stop=stop, backoff=Backoff(first_s=60.0, max_s=60.0))
        return ok, time.monotonic() - started

    ok, took = asyncio.run(main())
    assert ok is False and attempts == 1 and took < 1.0


def test_other_start_errors_propagate() -> None:
    async def attempt() -> None:
        raise TopicAuthorizationFailedError("not allowed")

    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(start_when_reachable(attempt, backoff=FAST))
