"""Errors of the event contract."""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class AvroError(StreamGRPOError):
    """Base of contract errors."""


class UnknownSchemaError(AvroError):
    """A schema name or fingerprint is not in the registry."""


class EncodeError(AvroError):
    """An event does not match its schema (a field is missing or has the wrong type)."""


class DecodeError(AvroError):
    """Bytes are not a valid event: wrong magic, unknown fingerprint, or corrupt Avro body."""


class IncompatibleSchemaError(AvroError):
    """A schema change would break readers or old data; the message lists each problem."""
