"""Errors of the stream processors. All derive from :class:`StreamGRPOError`."""

from __future__ import annotations

from streamgrpo.errors import StreamGRPOError


class StreamsError(StreamGRPOError):
    """Base class of stream-processor errors."""


class StreamsConfigError(StreamsError):
    """A streams setting is invalid (the message names the setting)."""


class ArchiveError(StreamsError):
    """The Parquet archive cannot be read or written (the message says which path and why)."""
