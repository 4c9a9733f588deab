"""Dead letters: the one builder, and delivery that retries, then pauses, never crash-loops.

:func:`dead_letter` turns a record a consumer cannot process into a bounded ``DeadLetter``:
- its id is :func:`~streamgrpo.avro.ids.dead_letter_id` of the record's place (catalog topic name
  without prefix, partition, offset), so the same bad record gets the same dead letter whichever
  consumer or path finds it, and a redelivery is dropped downstream by id;
- it keeps at most :data:`~streamgrpo.topics.limits.DEAD_LETTER_VALUE_BYTES` of the value (and
  :data:`~streamgrpo.topics.limits.DEAD_LETTER_KEY_BYTES` of the key) plus the original value's size
  and sha256, with ``truncated`` set when anything was cut: a dead letter always fits on its topic,
  however large the bad record (a copy of a 1 MB record could not be produced, and the consumer
  would stop on it at every restart);
- the reason is cut to :data:`~streamgrpo.topics.limits.DEAD_LETTER_REASON_CHARS` characters.

Reason codes are the consumer's classification; decoding failures are classified once, in
:func:`streamgrpo.topics.received.decode_record` (``decode_error``, ``wrong_event_type``).

:func:`deliver` runs a delivery until it succeeds: Kafka errors are retried with exponential backoff
(``first_s`` doubling up to ``max_s``); after ``attempts_before_pause`` failures the consumer is
PAUSED: an ERROR says what is stuck and why, and delivery is retried every ``max_s`` until it goes
through. The process stays up (its liveness callback keeps beating), so a broker or topic problem
never turns into a restart loop; offsets are not committed past the record meanwhile.
What is not covered: errors that are not Kafka errors (bugs) propagate.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka.errors import KafkaError

from streamgrpo.avro import ids
from streamgrpo.avro.records import DeadLetter, Envelope
from streamgrpo.topics.catalog import DEAD_LETTERS
from streamgrpo.topics.errors import ProduceError
from streamgrpo.topics.limits import DEAD_LETTER_KEY_BYTES, DEAD_LETTER_REASON_CHARS, DEAD_LETTER_VALUE_BYTES

log = logging.getLogger(__name__)


def dead_letter(
    *, service: str, consumer: str, topic: str, partition: int, offset: int,
    key: bytes | None, value: bytes | None, reason_code: str, reason: str,
) -> DeadLetter:
    """The bounded DeadLetter of one record (``topic`` is the catalog name, without prefix)."""
    kept_value = value[:DEAD_LETTER_VALUE_BYTES] if value is not None else None
    kept_key = key[:DEAD_LETTER_KEY_BYTES] if key is not None else None
    truncated = kept_value != value or kept_key != key
    return DeadLetter(
        envelope=Envelope.new(service, event_id=ids.dead_letter_id(topic, partition, offset)),
        source_topic=topic, source_partition=partition, source_offset=offset,
        reason_code=reason_code, reason=reason[:DEAD_LETTER_REASON_CHARS], consumer=consumer,
        key=kept_key, value=kept_value,
        original_size=len(value) if value is not None else None,
        original_sha256=hashlib.sha256(value).hexdigest() if value is not None else None,
        truncated=truncated,
    )


@dataclass(frozen=True)
class Backoff:
    """Retry schedule of :func:`deliver`."""

    first_s: float = 0.5
    max_s: float = 30.0
    attempts_before_pause: int = 6

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return float(min(self.max_s, self.first_s * 2 ** max(0, attempt - 1)))


#: Errors a retry may fix (broker down, topic missing, delivery timed out).
RETRIABLE = (ProduceError, KafkaError)


async def deliver(
    attempt: Callable[[], Awaitable[None]], what: str, *, backoff: Backoff = Backoff(),
    alive: Callable[[], object] | None = None,
) -> int:
    """Run ``attempt`` until it succeeds (see the module docstring); returns the attempts it took.

    ``what`` names the stuck delivery in the logs; ``alive`` is called while waiting (a heartbeat).
    """
    failures = 0
    while True:
        try:
            await attempt()
            if failures >= backoff.attempts_before_pause:
                log.error("RESUMED: %s delivered after %d failed attempts", what, failures)
            return failures + 1
        except RETRIABLE as exc:
            failures += 1
            if failures == backoff.attempts_before_pause:
                log.error("PAUSED: cannot deliver %s after %d attempts (%s). Consumption is paused and no offset "
                          "is committed past it; retrying every %.0f s. Check the broker and the %s "
                          "topic (`streamgrpo topics ensure`).", what, failures, exc, backoff.max_s, DEAD_LETTERS)
            elif failures < backoff.attempts_before_pause:
                log.warning("cannot deliver %s (attempt %d): %s; retrying in %.1f s", what, failures, exc,
                            backoff.delay(failures))
        if alive is not None:
            alive()
        await asyncio.sleep(backoff.delay(failures))
