"""The one dead-letter builder (bounded, one id per record place) and delivery that pauses instead of crashing."""

from __future__ import annotations

import asyncio
import hashlib
import logging

import pytest

from streamgrpo.avro import ids
from streamgrpo.avro.codec import Codec
from streamgrpo.topics.dead_letter import Backoff, dead_letter, deliver
from streamgrpo.topics.errors import ProduceError
from streamgrpo.topics.limits import DEAD_LETTER_KEY_BYTES, DEAD_LETTER_VALUE_BYTES, MAX_RECORD_BYTES


def letter(value: bytes | None, key: bytes | None = b"k", consumer: str = "judge", code: str = "decode_error"):
    return dead_letter(service="judge", consumer=consumer, topic="rollouts", partition=2, offset=7, key=key,
                       value=value, reason_code=code, reason="x" * 10_000)


def test_a_small_record_is_kept_whole() -> None:
    d = letter(b"\x00bad")
    assert d.value == b"\x00bad" and d.key == b"k" and not d.truncated
    assert d.original_size == 4 and d.original_sha256 == hashlib.sha256(b"\x00bad").hexdigest()
    assert len(d.reason) == 2000


def test_a_huge_record_gives_a_bounded_dead_letter_that_fits_on_its_topic() -> None:
    big = bytes(range(256)) * (3 * 1024 * 1024 // 256)  # 3 MiB
    d = letter(big, key=b"K" * 5000)
    assert d.truncated and d.value == big[:DEAD_LETTER_VALUE_BYTES] and len(d.key or b"") == DEAD_LETTER_KEY_BYTES
    assert d.original_size == len(big) and d.original_sha256 == hashlib.sha256(big).hexdigest()
    assert len(Codec().encode(d, "dead-letters")) < MAX_RECORD_BYTES


def test_the_same_record_gets_the_same_id_whoever_dead_letters_it() -> None:
    a, b = letter(b"z", consumer="judge"), letter(b"z", consumer="streams-archive", code="wrong_event_type")
    assert a.event_id == b.event_id == ids.dead_letter_id("rollouts", 2, 7)
    assert letter(None).value is None and letter(None).original_size is None


def test_delivery_retries_with_backoff_then_succeeds() -> None:
    calls: list[int] = []
    beats: list[int] = []

    async def attempt() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise ProduceError("broker down")

    n = asyncio.run(deliver(attempt, "one letter", backoff=Backoff(0.01, 0.02, 5), alive=lambda: beats.append(1)))
    assert n == 3 and len(calls) == 3 and len(beats) == 2


def test_delivery_pauses_loudly_and_keeps_the_process_up(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    async def never() -> None:
        calls.append(1)
        raise ProduceError("MSG_SIZE_TOO_LARGE")

    async def run() -> bool:
        task = asyncio.create_task(deliver(never, "the dead letter of rollouts[0]@1", backoff=Backoff(0.001, 0.005, 3)))
        await asyncio.sleep(0.3)
        alive = not task.done()
        task.cancel()
        return alive

    with caplog.at_level(logging.WARNING, logger="streamgrpo.topics.dead_letter"):
        assert asyncio.run(run())  # still retrying: paused, not crashed
    paused = [r for r in caplog.records if "PAUSED" in r.getMessage()]
    assert len(paused) == 1 and paused[0].levelno == logging.ERROR
    assert "rollouts[0]@1" in paused[0].getMessage() and len(calls) > 3


def test_bugs_are_not_retried() -> None:
    async def bug() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        asyncio.run(deliver(bug, "x", backoff=Backoff(0.001, 0.001, 2)))
