"""Errors of the Kafka side: broker, topics, producing and consuming."""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class TopicsError(StreamGRPOError):
    """Base of Kafka-side errors."""


class BrokerError(TopicsError):
    """The embedded broker could not be started, found or stopped."""


class ProduceError(TopicsError):
    """One or more records were not acknowledged by the broker (nothing is dropped silently)."""


class DeliveryFailedError(ProduceError):
    """The broker refused records: librdkafka dropped them, so flushing again does not deliver them (a caller that
    retries must send them again, or not commit what they came from)."""


class RecordTooLargeError(ProduceError):
    """An event encodes larger than the project's record bound (:mod:`streamgrpo.topics.limits`)."""
